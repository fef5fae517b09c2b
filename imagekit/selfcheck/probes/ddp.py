"""ddp: a DistributedDataParallel step whose gradients must agree across ranks. Always two
gloo ranks on the CPU (the sync logic); on a GPU host also NCCL with one rank per GPU."""

from __future__ import annotations

import os
import queue as queues
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from imagekit.contract.checks import CheckResult, failed, passed
from imagekit.contract.tolerances import DDP_GRAD_SPREAD
from imagekit.selfcheck.probes.results import (
    bus_bandwidth,
    checked_sum,
    fault,
    gather,
    max_difference,
    sync_of,
    timed,
)
from imagekit.selfcheck.readers.nccl_log import transport_from_log
from imagekit.selfcheck.verdicts.rules import DdpRun, ddp_runs, differs, launched_by_torchrun

# A rank that has not reported by then is dead or stuck; the check's own limit is longer.
RANK_WAIT_S = float(os.environ.get("IMAGEKIT_DDP_WAIT", "90"))
# nccl-tests reaches bus bandwidth at 1 GiB and up (256 MB is too small for NVLS on 8 GPUs:
# https://github.com/NVIDIA/nccl-tests/issues/212); less where the GPU has little free.
ALLREDUCE_BYTES = 2**30
ALLREDUCE_MIN_BYTES = 64 * 2**20
ALLREDUCE_FREE_FRACTION = 8  # at most 1/8 of free memory: NCCL's buffers and others' checks
# The sizes below the message, as nccl-tests sweeps them (-b 8M -e 1G -f 4): the bus bandwidth
# curve; the floor is judged at the largest, the message itself.
ALLREDUCE_SWEEP = (8 * 2**20, 32 * 2**20, 128 * 2**20, 512 * 2**20)


def allreduce_bytes(free_bytes: int, world: int) -> int:
    """The all-reduce message: 1 GiB, capped to an eighth of the GPU's free memory, at least
    64 MiB; a whole number of fp32 elements per rank."""
    size = max(ALLREDUCE_MIN_BYTES, min(ALLREDUCE_BYTES, free_bytes // ALLREDUCE_FREE_FRACTION))
    unit = 4 * max(1, world)
    return size - size % unit


def sweep_sizes(message: int, world: int) -> list[int]:
    """The sweep's sizes under the message, then the message: whole fp32 elements per rank."""
    unit = 4 * max(1, world)
    return [size - size % unit for size in ALLREDUCE_SWEEP if size < message] + [message]


def nccl_log_env(path: Path) -> dict[str, str]:
    """NCCL's INFO log of this rank into `path` (not the check's output): the channel lines
    say which transport it used. INIT and NET carry the connection and network lines."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": str(path)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_ddp() -> CheckResult:
    import torch

    if launched_by_torchrun(os.environ):
        return ddp_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None)
    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    runs = ddp_runs(gpus)
    results = _run_all(runs, start_method(runs, cuda))
    merged: dict[str, Any] = {}
    problems = []
    for run, result in results:
        for key, value in result.measurements.items():
            keep = key == "backend" or key.startswith(f"{run.backend}_")  # nccl_transport
            merged[key if keep else f"{run.backend}_{key}"] = value
        if result.failed:
            problems.append(f"{run.backend} ({run.world_size} ranks): {result.reason}")
    merged["backend"] = "+".join(run.backend for run, _ in results)
    merged["device"] = "cuda" if any(run.backend == "nccl" for run, _ in results) else "cpu"
    merged["world_size"] = max(run.world_size for run, _ in results)
    merged["max_grad_difference"] = max(
        r.measurements.get("max_grad_difference", 0.0) for _, r in results
    )
    for key in (
        "allreduce_busbw_GBps",
        "allreduce_message_bytes",
        "allreduce_sweep",
        "allreduce_checked",
        "note",
    ):
        if f"nccl_{key}" in merged:
            merged[key] = merged[f"nccl_{key}"]
    return failed("; ".join(problems), **merged) if problems else passed(**merged)


def start_method(runs: list[DdpRun], cuda: bool) -> str:
    """How the ranks start: forked from this process, torch already imported (a fresh
    interpreter's import is most of a gloo rank's cost on a CPU host), where no CUDA is
    about; else spawned, since a process forked after CUDA's initialisation cannot use it."""
    return "spawn" if cuda or any(run.backend == "nccl" for run in runs) else "fork"


def _run_all(runs: list[DdpRun], method: str) -> list[tuple[DdpRun, CheckResult]]:
    """Each run on its own, one after the other (NCCL's timed all-reduce shares the host with
    nothing, gloo's CPU ranks included): every rank of a run started at once, then collected
    with a deadline, so a rank that dies before it reports is named with its exit code, not
    waited for to the check's limit."""
    import torch.multiprocessing as mp

    ctx = mp.get_context(method)
    deadline = time.monotonic() + RANK_WAIT_S  # one for all runs: within the check's limit
    return [(run, _one_run(ctx, index, run, deadline)) for index, run in enumerate(runs)]


def _one_run(ctx: Any, index: int, run: DdpRun, deadline: float) -> CheckResult:
    queue = ctx.Queue()
    port = free_port()
    procs: dict[tuple[int, int], Any] = {}
    for rank in range(run.world_size):
        proc = ctx.Process(
            target=_ddp_entry, args=(index, rank, run.world_size, run.backend, port, queue)
        )
        proc.start()
        procs[(index, rank)] = proc
    reports = _collect(queue, procs, deadline)
    for proc in procs.values():
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    return merge_ranks([reports[(index, r)] for r in range(run.world_size)])


def merge_ranks(reports: list[CheckResult]) -> CheckResult:
    """One result for a run: a failure wins, and a rank that died or never reported comes
    first, since the others' errors (a closed connection) are only its echo."""
    failures = [r for r in reports if r.failed]
    if not failures:
        return reports[0]
    root = sorted(failures, key=lambda r: not r.reason.startswith("rank "))
    root = sorted(
        root, key=lambda r: "died with" not in r.reason and "did not report" not in r.reason
    )
    reasons = list(dict.fromkeys(r.reason for r in root))
    return replace(root[0], reason="; ".join(reasons[:2]))


def _collect(
    queue: Any, procs: dict[tuple[int, int], Any], deadline: float
) -> dict[tuple[int, int], CheckResult]:
    reports: dict[tuple[int, int], CheckResult] = {}
    while len(reports) < len(procs) and time.monotonic() < deadline:
        try:
            index, rank, result = queue.get(timeout=1.0)
            reports[(index, rank)] = result
        except queues.Empty:
            pass
        for key, proc in procs.items():
            if key not in reports and not proc.is_alive() and proc.exitcode not in (0, None):
                reports[key] = failed(f"rank {key[1]} died with exit code {proc.exitcode}")
    for key in procs:
        reports.setdefault(key, failed(f"rank {key[1]} did not report in {RANK_WAIT_S:g}s"))
    return reports


def _ddp_entry(index: int, rank: int, world: int, backend: str, port: int, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        queue.put((index, rank, ddp_worker(rank, world, backend)))
    except Exception as exc:  # report, so the parent does not wait for this rank
        queue.put((index, rank, failed(f"rank {rank}: {type(exc).__name__}: {exc}")))


def ddp_worker(rank: int, world: int, backend: str | None) -> CheckResult:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = f"cuda:{rank % max(1, torch.cuda.device_count())}" if backend == "nccl" else "cpu"
    log = None
    if backend == "nccl":
        torch.cuda.set_device(device)
        # Before the group starts: NCCL reads its environment when it first initialises.
        fd, name = tempfile.mkstemp(prefix=f"imagekit-nccl-rank{rank}-", suffix=".log")
        os.close(fd)
        log = Path(name)
        os.environ.update(nccl_log_env(log))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(
            torch.nn.Linear(32, 8).to(device), device_ids=[device] if backend == "nccl" else None
        )
        torch.manual_seed(rank + 1)  # each rank its own data
        model(torch.randn(16, 32, device=device)).square().mean().backward()
        if fault("ddp-hang") and rank == 1:
            time.sleep(3600)  # rank 0 waits in the collective below: a real hang
        if fault("ddp-die") and rank == 1:
            os._exit(3)  # dies without reporting
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        spread = max_difference(gather(torch, dist, grads, world))
        m: dict[str, Any] = {
            "backend": backend,
            "world_size": world,
            "device": device.split(":")[0],
            "max_grad_difference": spread,
        }
        wrong = ""
        if backend == "nccl" and world > 1:
            free, _ = torch.cuda.mem_get_info(device)
            nbytes = _message_bytes(torch, dist, world, device, free)
            sweep, wrong = allreduce_sweep(torch, dist, rank, world, device, nbytes)
            m["allreduce_sweep"] = sweep
            m["allreduce_busbw_GBps"] = sweep[-1]["busbw_GBps"]
            m["allreduce_message_bytes"] = nbytes
            m["allreduce_checked"] = True
        elif backend == "nccl":
            dist.all_reduce(grads)  # NCCL's kernel runs; one rank moves no data to time
            torch.cuda.synchronize()
            m["note"] = "1 GPU: NCCL ran; bus bandwidth needs 2 or more GPUs"
        if log is not None:
            m["nccl_transport"] = transport_from_log(log.read_text(errors="replace"))
        if wrong:
            return failed(wrong, **m)
        if differs(spread, DDP_GRAD_SPREAD):
            return failed(f"gradients differ across ranks by {spread:g} after a DDP step", **m)
        return passed(**m)
    finally:
        dist.destroy_process_group()
        if log is not None:
            log.unlink(missing_ok=True)


def _message_bytes(
    torch: Any, dist: Any, world: int, device: str, free_bytes: int, group: Any = None
) -> int:
    """allreduce_bytes for the rank with the least free memory (`free_bytes` is this rank's):
    every rank must reduce a tensor of the same size, or the collective hangs."""
    mine = torch.tensor([allreduce_bytes(free_bytes, world)], dtype=torch.int64, device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MIN, group=group)
    return int(mine.item())


def _busbw(torch: Any, dist: Any, world: int, device: str, nbytes: int, group: Any = None) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of `nbytes`, GB/s (on any backend: the
    tests run it over gloo on CPU tensors)."""
    tensor = torch.ones(nbytes // 4, device=device)  # fp32
    sync = sync_of(torch, device.partition(":")[0])
    seconds = timed(lambda: dist.all_reduce(tensor, group=group), 10, sync)
    return bus_bandwidth(tensor.numel() * 4 / seconds / 1e9, world)


def allreduce_sweep(
    torch: Any, dist: Any, rank: int, world: int, device: str, message: int, group: Any = None
) -> tuple[list[dict[str, Any]], str]:
    """nccl-tests' curve: the bus bandwidth of every size up to the message, each size's
    result then checked on this rank (nccl-tests -c); and what was wrong, or ""."""
    points: list[dict[str, Any]] = []
    wrong = ""
    for nbytes in sweep_sizes(message, world):
        busbw = _busbw(torch, dist, world, device, nbytes, group)
        points.append({"bytes": nbytes, "busbw_GBps": round(busbw, 1)})
        # every rank runs every size's checked all-reduce, whatever it found before: a
        # rank that stopped would leave the others waiting in the collective
        found = checked_sum(torch, dist, rank, world, device, nbytes, group)
        wrong = wrong or found
    return points, wrong
