"""Probes: code that measures (a training step, a kernel, a copy, an all-reduce) and returns a
CheckResult; torch is imported inside each function, when the probe runs."""
