"""python -m imagekit.selfcheck: prove this image's stack on the hardware it runs on.

Exit 0 only when no check failed. A skip always says why; --require turns skips of the
named things into failures, and features the image's labels promise are required too.

Every reading the verdicts use goes into one host snapshot (docs/host-snapshot.md):
--snapshot FILE writes it, and --judge FILE judges a written one without a GPU, with the
same table and exit code as the live run that wrote it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from imagekit.contract import exits
from imagekit.contract.check_table import ORDER, probes_for
from imagekit.contract.checks import EMULATED_SLOWDOWN, ENV_TIMEOUT, CheckResult, RecordError
from imagekit.contract.host_snapshot import HostSnapshot
from imagekit.contract.records import or_default, or_none
from imagekit.contract.text import escape
from imagekit.selfcheck.probes.perf import ENV_SOAK
from imagekit.selfcheck.readers import snapshot
from imagekit.selfcheck.readers.nvml_counters import XidWatch
from imagekit.selfcheck.run import judge, processes, report
from imagekit.selfcheck.verdicts import emulated

# The snapshot's keys the JSON report repeats, beside the results.
CONTEXT = ("imagekit", "taken_at", "host", "python", "labels")
# A reading this run's own readers wrote that its record refuses: a bug of the readers, and
# no verdict; the image is not proven (exit 1), never passed.
UNPARSED = (
    "this run's host snapshot is not one ({}): nothing was judged; it is a bug in imagekit's "
    "readers: report it with the file --snapshot writes"
)
MAX_SOAK_S = 3600  # an hour: longer burn-ins are DCGM's (dcgmi diag -r 4) or a job's own


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m imagekit.selfcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checks",
        default=",".join(ORDER),
        help=f"comma list, from: {', '.join(ORDER)}",
    )
    parser.add_argument(
        "--require", default="", help=f"comma list, from: {', '.join(judge.REQUIREMENTS)}"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get(ENV_TIMEOUT, 0)) or None,
        help="seconds per check before it is killed and reported as timed out "
        "(default: each check's own limit)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(2, min(4, len(os.sched_getaffinity(0)))),
        help="functional checks run side by side; the timed ones (amp, ddp, flash, perf) alone",
    )
    parser.add_argument(
        "--expect-gpus",
        type=int,
        default=snapshot.expected_from_env(),
        metavar="N",
        help="the GPUs this container was given: torch, NVML and the device nodes must all "
        "see N (default: $IMAGEKIT_GPUS when it is a number, else what the container shows)",
    )
    parser.add_argument(
        "--soak",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="hold the GEMM on every GPU this long and judge its steady rate, the clocks, "
        "the power limit and the temperature under that load (default 0: the short run, "
        "about a minute in all)",
    )
    parser.add_argument("--snapshot", type=Path, help="also write the host snapshot (JSON)")
    parser.add_argument(
        "--judge",
        type=Path,
        metavar="FILE",
        help="run nothing: judge a host snapshot written by --snapshot, on any machine",
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    parser.add_argument("--junit", type=Path, help="write the results as JUnit XML")
    args = parser.parse_args(argv)
    _refuse_bad_values(parser, args)
    return args


def _refuse_bad_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse's own exit (code 2, with the usage) for values its types cannot refuse."""
    unknown = set(filter(None, args.checks.split(","))) - set(ORDER)
    unknown |= set(filter(None, args.require.split(","))) - set(judge.REQUIREMENTS)
    if unknown:
        parser.error(f"unknown check or requirement: {', '.join(sorted(unknown))}")
    if not 0 <= args.soak <= MAX_SOAK_S:
        parser.error(f"--soak {args.soak:g}: give the seconds to hold the load, 0 to {MAX_SOAK_S}")
    if args.expect_gpus is not None and args.expect_gpus < 0:
        parser.error(f"--expect-gpus {args.expect_gpus}: give the number of GPUs, 0 or more")


def _progress(name: str, result: CheckResult) -> None:
    print(f"  {name}: {result.status.value} ({result.seconds}s)", file=sys.stderr, flush=True)


def live(args: argparse.Namespace) -> HostSnapshot:
    """Read the host, run the probes the chosen checks need, and assemble the snapshot
    (written with --snapshot before it is parsed, so a reading its record refuses, which
    raises RecordError, can be reported with the file)."""
    names = [n for n in ORDER if n in args.checks.split(",")]
    # Torch and NVML are matched on each GPU's UUID (devices.match_devices); the PCI bus
    # order is the fallback where a torch gives no UUID, and makes torch's numbering NVML's.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    host = snapshot.read_host(args.expect_gpus, args.require)
    host["selected"] = names
    first = judge.typed(host)  # the first reading, parsed once for the run's decisions
    jobs, why = processes.jobs_for(first, args.jobs)
    if why:
        print(f"  running the checks one at a time: {escape(why)}", file=sys.stderr, flush=True)
    gpu = processes.gpu_possible(first)
    emulation = or_default(first.cpu.emulated, "") if first.cpu else ""
    slowdown = EMULATED_SLOWDOWN if emulation else 1
    if slowdown > 1:
        print(
            f"  under emulation ({escape(emulation)}): time limits x{slowdown}, "
            "and no timing here says anything of the hardware",
            file=sys.stderr,
            flush=True,
        )
    if args.soak:  # the perf probe, a child, reads it; its time limit grows by as much
        os.environ[ENV_SOAK] = f"{args.soak:g}"
    xids = XidWatch()  # Xid events from here to the last reading
    xids.start()
    extra = {"perf": args.soak}  # every GPU holds its load at once, in a thread of its own
    results = processes.run_all(
        probes_for(names), args.timeout, jobs, _progress, gpu, slowdown, extra
    )
    results = {n: emulated.unjudged_crash(r, emulation) for n, r in results.items()}
    again = snapshot.with_xids(snapshot.nvml_again(host), xids.stop())
    snap = snapshot.assemble(again, results)
    if args.snapshot:
        snapshot.write(snap, args.snapshot)
    return judge.typed(snap)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.judge:
        try:
            record = snapshot.load(args.judge)
        except snapshot.SnapshotError as exc:
            print(f"error: {escape(str(exc))}", file=sys.stderr)
            return exits.CHECK_USAGE
    else:
        try:
            record = live(args)
        except RecordError as exc:
            print(f"error: {escape(UNPARSED.format(exc))}", file=sys.stderr)
            return exits.CHECK_FAILED
    results = judge.judge(record)
    print(report.checks_table(results))
    context = {key: or_none(getattr(record, key)) for key in CONTEXT}
    context["emulated"] = or_default(record.cpu.emulated, "") if record.cpu else ""
    context["required"] = sorted(judge.requirements(record))
    if args.json:
        args.json.write_text(report.to_json(results, context) + "\n")
    if args.junit:
        args.junit.write_text(report.to_junit(results) + "\n")
    return judge.exit_code(results)
