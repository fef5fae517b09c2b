"""The self-check's distributed part across nodes, one process per rank under torchrun:
`imagekit test IMAGE --nodes N` starts it in N containers.

Every rank records its host, then one DDP step runs and the gradients and parameters must
be the same on every rank, then an all-reduce is timed for bus bandwidth, and the transport
NCCL used is read from its INFO log (nccl_log.py; gloo's is TCP: "gloo/TCP"); a
multi-node-ib image fails where any hop between nodes used anything but InfiniBand, or where
the log shows no link between nodes at all (transports.py). Each rank writes
rank-R.json when it has joined (so the host can tell a node that never arrived from one that
died later); rank 0 writes the report, multinode.json (both records of contract/multinode.py).
The verdict is made here, once: the host takes it as written. Standard library and torch only.

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint node0:29400 \\
        -m imagekit.selfcheck.nodes_check --report-dir /imagekit-reports
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from imagekit.contract import exits
from imagekit.contract import labels as label
from imagekit.contract.checks import ENV_PROFILE, FAILED, PASSED
from imagekit.contract.multinode import FORMAT, REPORT, AllReduce, NodesReport, Rank
from imagekit.contract.text import shown
from imagekit.contract.tolerances import DDP_GRAD_SPREAD
from imagekit.contract.transports import GLOO_TRANSPORT, transport_problem
from imagekit.selfcheck.probes.ddp import nccl_log_env
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
from imagekit.selfcheck.readers.promises import labels
from imagekit.selfcheck.verdicts.rules import differs, launched_by_torchrun

GRAD_TOLERANCE = DDP_GRAD_SPREAD  # the single-node ddp check's: contract/tolerances.py


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m imagekit.selfcheck.nodes_check")
    parser.add_argument("--report-dir", type=Path, default=Path("/imagekit-reports"))
    parser.add_argument(
        "--timeout", type=float, default=120, help="seconds any one collective may wait"
    )
    parser.add_argument("--megabytes", type=int, default=64, help="all-reduce buffer size")
    parser.add_argument("--iterations", type=int, default=5, help="timed all-reduces")
    return parser.parse_args(argv)


def rank_env(env: dict[str, str]) -> dict[str, int]:
    """torchrun's numbers for this process; GROUP_RANK is the node's rank in the job."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    return {name.lower(): int(env.get(name, "0")) for name in names}


def bandwidth(nbytes: int, seconds: float, world: int) -> dict[str, float]:
    """nccl-tests' figures: algbw is data per second, busbw what each link carried
    (2(n-1)/n of it for a ring all-reduce), comparable across world sizes."""
    algbw = nbytes / seconds / 1e9
    return {
        "seconds": round(seconds, 4),
        "algbw_GBps": round(algbw, 3),
        "busbw_GBps": round(bus_bandwidth(algbw, world), 3),
    }


def verdict(grad_diff: float, param_diff: float, transport: str = "") -> tuple[str, str]:
    """`transport`: what transport_problem said of NCCL's transport, or what the checked
    all-reduce found wrong on this rank ("" when neither)."""
    if differs(grad_diff, GRAD_TOLERANCE):
        return FAILED, f"gradients differ across ranks by {grad_diff:g} after a DDP step"
    if differs(param_diff, GRAD_TOLERANCE):
        return FAILED, f"parameters differ across ranks by {param_diff:g} after a DDP step"
    if transport:
        return FAILED, transport
    return PASSED, ""


def image_profile(env: dict[str, str], promise: dict[str, str]) -> str:
    """The image's NCCL profile: its IMAGEKIT_PROFILE, else its io.imagekit.profile label."""
    return env.get(ENV_PROFILE) or promise.get(label.PROFILE, "")


def transport_of(backend: str, log: Path | None) -> str | None:
    """What moved the data: NCCL's own log says for NCCL; gloo has only TCP (GLOO_TRANSPORT)."""
    if backend != "nccl":
        return GLOO_TRANSPORT
    try:
        return transport_from_log(log.read_text(errors="replace")) if log else None
    except OSError:
        return None


def ddp_step(torch: Any, device: str, rank: int) -> tuple[Any, Any]:
    """One training step; returns (gradients, parameters after the step), flattened."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # the same start everywhere (DDP also broadcasts rank 0's)
    net = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)
    ).to(device)
    model = DistributedDataParallel(net, device_ids=[device] if device != "cpu" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(rank + 1)  # each rank its own data: only the all-reduce makes them agree
    model(torch.randn(32, 256, device=device)).square().mean().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()]).detach().clone()
    optimizer.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return grads, params


def time_allreduce(torch: Any, dist: Any, device: str, args: argparse.Namespace) -> AllReduce:
    world = dist.get_world_size()
    numel = args.megabytes * 2**20 // 4
    if world < 2:
        return AllReduce(megabytes=args.megabytes, note="1 rank: an all-reduce moves no data")
    buffer = torch.ones(numel, device=device)
    sync = sync_of(torch, device.partition(":")[0])  # cpu, or cuda:N
    seconds = timed(lambda: dist.all_reduce(buffer), args.iterations, sync)
    figures = bandwidth(numel * 4, seconds, world)
    # nccl-tests -c: the sum of values every rank knows, checked element by element on each
    # rank; every rank's finding gathered, so rank 0's report names a wrong sum on any rank
    found: list[Any] = [None] * world
    dist.all_gather_object(
        found, checked_sum(torch, dist, dist.get_rank(), world, device, numel * 4)
    )
    wrong = "; ".join(w for w in found if w)
    checked = {"checked": True, **({"wrong": wrong} if wrong else {})}
    return AllReduce(megabytes=args.megabytes, iterations=args.iterations, **figures, **checked)


def identity(ids: dict[str, int]) -> Rank:
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = ""
    return Rank(
        rank=ids["rank"],
        node_rank=ids["group_rank"],
        local_rank=ids["local_rank"],
        host=host,
        address=address,
        pid=os.getpid(),
    )


def transport_verdict(backend: str, profile: str, transport: str | None, hosts: set[str]) -> str:
    """What breaks the profile's promise of the link between nodes ("" when nothing does):
    the one judgement of the run's transport (contract/transports.py). gloo's TCP is not
    judged: a CPU run promises no network."""
    if backend != "nccl":
        return ""
    return transport_problem(profile, transport, len(hosts) > 1)


def run_rank(args: argparse.Namespace, ids: dict[str, int]) -> NodesReport:
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = f"cuda:{ids['local_rank']}" if backend == "nccl" else "cpu"
    log = None
    if backend == "nccl":
        torch.cuda.set_device(device)
        log = nccl_log(ids["rank"])
    started = time.time()
    # The timeout bounds every collective: a peer that hangs or vanishes (its container
    # killed: no TCP reset ever comes) fails the others instead of blocking them for 30 min.
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    try:
        dist.barrier()
        joined_at = time.time()
        me = identity(ids)
        write(args.report_dir / f"rank-{ids['rank']}.json", replace(me, joined_at=joined_at))
        host = shown(me.host)  # a node's name, as its kernel says it
        print(f"rank {ids['rank']} on {host}: joined ({ids['world_size']} ranks)", flush=True)
        ranks: list[Any] = [None] * ids["world_size"]
        dist.all_gather_object(ranks, me)
        inject_faults(ids)
        grads, params = ddp_step(torch, device, ids["rank"])
        grad_diff = max_difference(gather(torch, dist, grads, ids["world_size"]))
        param_diff = max_difference(gather(torch, dist, params, ids["world_size"]))
        allreduce = time_allreduce(torch, dist, device, args)
        profile = image_profile(dict(os.environ), labels())
        transport = transport_of(backend, log)
        hosts = {r.host for r in ranks}
        problem = transport_verdict(backend, profile, transport, hosts)
        status, reason = verdict(grad_diff, param_diff, problem or allreduce.wrong or "")
        dist.barrier()  # every rank done before any tears its group down
        return NodesReport(
            status=status,
            reason=reason,
            format=FORMAT,
            backend=backend,
            device=device.split(":")[0],
            world_size=ids["world_size"],
            procs_per_node=ids["local_world_size"],
            ranks=ranks,
            hosts=sorted(hosts),
            init_s=round(joined_at - started, 3),
            joined_at=joined_at,
            max_grad_difference=grad_diff,
            max_param_difference=param_diff,
            grads_identical=grad_diff <= GRAD_TOLERANCE and param_diff <= GRAD_TOLERANCE,
            allreduce=allreduce,
            transport=transport,
            profile=profile,
            torch=torch.__version__,
        )
    finally:
        dist.destroy_process_group()
        if log is not None:
            log.unlink(missing_ok=True)


def nccl_log(rank: int) -> Path:
    """A file for this rank's NCCL INFO log, set in the environment before the process group
    starts (NCCL reads it at its first initialisation)."""
    fd, name = tempfile.mkstemp(prefix=f"imagekit-nccl-rank{rank}-", suffix=".log")
    os.close(fd)
    os.environ.update(nccl_log_env(Path(name)))
    return Path(name)


def inject_faults(ids: dict[str, int]) -> None:
    """For imagekit's own tests (IMAGEKIT_SELFCHECK_FAULT): the last rank stalls after
    joining (the test kills its container) or dies."""
    if ids["rank"] != ids["world_size"] - 1:
        return
    if fault("multinode-stall"):
        time.sleep(3600)
    if fault("multinode-die"):
        os._exit(3)


def write(path: Path, record: Rank | NodesReport) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2, default=str) + "\n")
    tmp.replace(path)  # the host never reads half a file


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not launched_by_torchrun(os.environ):
        print("imagekit.selfcheck.nodes_check runs under torchrun (one process a rank)")
        return exits.CHECK_USAGE
    ids = rank_env(dict(os.environ))
    report = run_rank(args, ids)
    if ids["rank"] == 0:
        write(args.report_dir / REPORT, report)
        shown_keys = ("status", "reason", "hosts", "allreduce")
        print(json.dumps({k: v for k, v in report.to_json().items() if k in shown_keys}))
    return exits.CHECK_PASSED if report.passed else exits.CHECK_FAILED
