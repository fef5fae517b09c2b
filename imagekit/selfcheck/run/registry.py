"""Which function runs each check the contract names (contract/check_table.py): the probes'
functions and the verdicts' over the host snapshot, bound by attribute so a reader and a
tool can follow each one. Importing the probes costs no torch: they import it when they run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagekit.contract.check_table import CHECKS, VERDICTS
from imagekit.contract.host_snapshot import HostSnapshot
from imagekit.selfcheck.probes import attention, ddp, inference, perf, stack, training
from imagekit.selfcheck.verdicts import health, links, perf_verdict

PROBES: dict[str, Callable[..., Any]] = {
    "stack": stack.check_stack,
    "amp": training.check_amp,
    "checkpoint": training.check_checkpoint,
    "compile": training.check_compile,
    "ddp": ddp.check_ddp,
    "flash": attention.check_flash,
    "onnx": inference.check_onnx,
    "int8": inference.check_int8,
    "tensorrt": inference.check_tensorrt,
    "perf": perf.check_perf,
}


# Each takes the typed host snapshot (contract/host_snapshot.py).
JUDGES: dict[str, Callable[[HostSnapshot], Any]] = {
    "gpus": health.check_gpus,
    "health": health.check_health,
    "perf": perf_verdict.check_perf_verdict,
    "links": links.check_links,
}
# Every name the contract lists has its function here, and nothing else.
assert set(PROBES) == {c.name for c in CHECKS} and set(JUDGES) == {v.name for v in VERDICTS}
