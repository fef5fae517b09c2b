"""Time loading + validating + completing + rendering the whole default matrix.

Usage: python -m bench.bench_render [--repeat 20]
Prints a table and writes bench/results/render.json. Target: well under a second.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat
from imagekit.render.dockerfile import render_all

ROOT = Path(__file__).resolve().parent.parent


def once() -> tuple[float, float, int]:
    compat.read.cache_clear()  # cold: the compat data is read and parsed each run
    start = time.perf_counter()
    cells = load_cells([ROOT / "envs"])
    loaded = time.perf_counter()
    rendered = render_all(cells, root=ROOT)  # each file with its ownership line and digest
    done = time.perf_counter()
    return loaded - start, done - loaded, len(rendered)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    runs = [once() for _ in range(args.repeat)]
    load = [r[0] for r in runs]
    rend = [r[1] for r in runs]
    total = [a + b for a, b in zip(load, rend, strict=True)]
    cells = runs[0][2]
    rows = [("load+validate+complete", load), ("render", rend), ("total", total)]
    print(f"{'phase':<24}{'median ms':>10}{'max ms':>10}   ({cells} cells, {args.repeat} runs)")
    for name, values in rows:
        print(f"{name:<24}{statistics.median(values) * 1e3:>10.1f}{max(values) * 1e3:>10.1f}")
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} Python {platform.python_version()}",
        "cells": cells,
        "median_total_s": statistics.median(total),
        "max_total_s": max(total),
        "median_render_s": statistics.median(rend),
    }
    out = ROOT / "bench" / "results" / "render.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
