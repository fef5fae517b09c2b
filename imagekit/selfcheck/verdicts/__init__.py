"""Verdicts: pure decisions over data (the typed host snapshot, a probe's figures); no I/O, no
torch, so every rule is table-tested without a GPU."""
