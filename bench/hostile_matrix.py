"""Hostile matrix files against the clock: each must end in well under a second, start-up
included (issue 36, part 3). Runs `imagekit list` as a subprocess in a scratch folder whose
envs/m.yaml is one hostile matrix, several times each, and compares the median wall time
with start-up alone (`imagekit --version`) and a trivial one-cell matrix.

Usage: python -m bench.hostile_matrix [--repeat 5] [--timeout 60] [--only NAME ...] [--out F]
Prints a table and writes bench/results/hostile-matrix.json (or --out). A run past
--timeout is recorded as it is and not repeated. Removes its scratch folder.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = 10_000
CELL = "  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
HEAD = "matrix:\n" + CELL


def _entries(section: str, entry: Callable[[int], str], n: int = N) -> str:
    return f"{HEAD}{section}:\n" + "".join(entry(i) for i in range(n))


def _axis(prefix: str, n: int = 20) -> str:
    return "[" + ", ".join(f"'{prefix}{i}'" for i in range(n)) + "]"


def _issue(i: int) -> str:
    """The issue's override: one match key, one package."""
    return f"  - match: {{torch: '9.{i}.0'}}\n    apt: [curl]\n"


def _alias_bomb() -> str:
    names = "abcdefghij"
    lines = [f"a: &a [{', '.join(['x'] * 9)}]"]
    lines += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in itertools.pairwise(names)]
    return "\n".join(lines) + "\n"


ALL_FIELDS = (
    "apt: [curl, git], build_apt: [gcc], pip: ['p{i}>=1.0', numpy], features: [onnx], "
    "profile: single-node, env: {{K{i}: v}}, size_budget: 9GB, installer: uv, "
    "torchvision: true, tf32: false, compile: true, venv_layers: split, "
    "base: 'r.io/b:1', source: ., source_default_ignore: true, inherit: {{apt: append}}"
)
# name -> (entries, the file's text). Override shapes: what a real file holds, 10,000 times.
MATRICES: dict[str, tuple[int, Callable[[], str]]] = {
    "one-cell": (1, lambda: HEAD),
    "exclude exact": (N, lambda: _entries("exclude", lambda i: f"  - {{torch: '9.{i}.0'}}\n")),
    "exclude glob": (N, lambda: _entries("exclude", lambda i: f"  - {{torch: '9.{i}.*'}}\n")),
    "overrides apt (issue)": (N, lambda: _entries("overrides", _issue)),
    "overrides 3 keys glob, pip+env": (
        N,
        lambda: _entries(
            "overrides",
            lambda i: (
                f"  - match: {{cuda: '12.*', torch: '9.{i}.*', python: '3.1?'}}\n"
                f"    pip: ['p{i}>=1']\n    env: {{V{i}: x}}\n"
            ),
        ),
    ),
    "overrides 5 keys glob": (
        N,
        lambda: _entries(
            "overrides",
            lambda i: (
                f"  - {{match: {{cuda: '[c1]*', torch: '2.{i}*', python: '3.1?', "
                f"os: d*, flavor: slim}}, installer: pip}}\n"
            ),
        ),
    ),
    "overrides every field (3,000: 1 MiB)": (
        3_000,
        lambda: _entries(
            "overrides",
            lambda i: (
                f"  - {{match: {{torch: '9.{i}.*', os: deb*}}, " + ALL_FIELDS.format(i=i) + "}\n"
            ),
            3_000,
        ),
    ),
    "overrides all match the cell": (
        N,
        lambda: _entries(
            "overrides",
            lambda i: (
                f"  - {{match: {{os: 'deb*'}}, pip: ['p{i}'], env: {{V{i}: x}}, "
                "inherit: {pip: append}}\n"
            ),
        ),
    ),
    "10 cells, all 10,000 match each": (
        N,
        lambda: (
            "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: ['3.10', '3.11', '3.12', "
            "'3.13', '3.14'], os: [debian12, ubuntu24.04], flavor: slim}\noverrides:\n"
            + "".join(
                f"  - {{match: {{flavor: 's*'}}, apt: [a{i}], inherit: {{apt: append}}}}\n"
                for i in range(N)
            )
        ),
    ),
    "globs x values (1,000 x 10,000)": (
        N,
        lambda: (
            "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: ["
            + ", ".join(f"'3.{i}'" for i in range(1_000))
            + "], os: debian12, flavor: slim}\nexclude:\n"
            + "".join(f"  - {{python: '?.{i}?'}}\n" for i in range(N))
        ),
    ),
    "distinct [set] globs (9,500 x 5 axes)": (
        47_500,
        lambda: _entries(
            "exclude",
            lambda i: (
                f"  - {{torch: '[2]*{i}', cuda: '[1]*{i}', python: '[3]*{i}', "
                f"os: '[d]*{i}', flavor: '[s]*{i}'}}\n"
            ),
            9_500,
        ),
    ),
    "bomb 20x20x20x20": (
        160_000,
        lambda: (
            f"matrix:\n  - {{cuda: {_axis('12.')}, torch: {_axis('2.')}, "
            f"python: {_axis('3.')}, os: {_axis('os')}, flavor: slim}}\n"
        ),
    ),
    "alias bomb": (9**10, _alias_bomb),
    "values cap (1 MiB of `1, `)": (340_000, lambda: "a: [" + "1, " * 339_999 + "1]\n"),
    "overrides, error on last line": (N, lambda: _entries("overrides", _issue) + "  - [\n"),
    "deep nesting": (600, lambda: "a: " + "[" * 600 + "]" * 600 + "\n"),
    "size cap (1 MiB + 1)": (1, lambda: "#" * (1 << 20) + "\n"),
}


Row = tuple[str, int, int, list[float], str]  # name, entries, bytes, wall times, exit code


def _run(folder: Path, args: list[str], timeout: float) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "imagekit", *args],
            cwd=folder,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, "timeout"
    return time.perf_counter() - started, str(result.returncode)


def _measure(folder: Path, text: str | None, repeat: int, timeout: float) -> Row:
    """`imagekit list` on `text` (None: `imagekit --version`), `repeat` times; a run past
    `timeout` is not repeated."""
    envs = folder / "envs"
    shutil.rmtree(envs, ignore_errors=True)
    if text is not None:
        envs.mkdir()
        (envs / "m.yaml").write_text(text)
    args = ["list"] if text is not None else ["--version"]
    times: list[float] = []
    code = ""
    while len(times) < repeat and code != "timeout":
        wall, code = _run(folder, args, timeout)
        times.append(wall)
    return ("", 0, len(text.encode()) if text else 0, times, code)


def _rows(names: list[str], repeat: int, timeout: float) -> list[Row]:
    folder = Path(tempfile.mkdtemp(prefix="imagekit-hostile-"))
    try:
        rows = [("startup (--version)", *_measure(folder, None, repeat, timeout)[1:])]
        for name in names:
            entries, make = MATRICES[name]
            _, _, size, times, code = _measure(folder, make(), repeat, timeout)
            rows.append((name, entries, size, times, code))
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _table(rows: list[Row]) -> list[dict[str, object]]:
    base = statistics.median(rows[0][3])
    header = f"{'matrix':<38}{'entries':>14}{'KiB':>6}{'median s':>10}{'max s':>8}"
    print(f"{header}{'x start':>9}{'rc':>8}")
    results: list[dict[str, object]] = []
    for name, entries, size, times, code in rows:
        median = statistics.median(times)
        print(
            f"{name:<38}{entries:>14,}{size / 1024:>6.0f}{median:>10.3f}{max(times):>8.3f}"
            f"{median / base:>9.2f}{code:>8}"
        )
        results.append(
            {
                "matrix": name,
                "entries": entries,
                "bytes": size,
                "median_s": median,
                "max_s": max(times),
                "ratio_to_startup": median / base,
                "exit_code": code,
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds, per run")
    parser.add_argument("--only", nargs="*", default=None, help="names to run (substrings)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/hostile-matrix.json")
    args = parser.parse_args()
    names = [k for k in MATRICES if not args.only or any(o in k for o in args.only)]
    results = _table(_rows(names, args.repeat, args.timeout))
    document = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} Python {platform.python_version()}",
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "target_s": 1.0,
        "matrices": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
