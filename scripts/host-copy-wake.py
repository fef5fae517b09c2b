"""The host copies fresh and in the wake of a large free, on each GPU (issue 52):

    python scripts/host-copy-wake.py > host-copy-wake.json

For each GPU, one after another: pinned host-to-device GB/s of one batch (copies.copy_gbps)
three times fresh; then right after allocating and freeing most of the free memory with
`empty_cache()` (as the memory test does); then 0.5 s later; then settled as the perf probe
times it (copies.measure_host, both ways). Run on a GPU machine (docs/selfcheck-gpu.md); it
needs torch with CUDA and imagekit importable.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from imagekit.selfcheck.probes import copies

WAKE_FRACTION = 0.9  # of the free memory, in 1 GiB blocks


def one_batch(torch: Any, index: int) -> float:
    host = torch.empty(copies.COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(copies.COPY_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
    with torch.cuda.device(index):
        return round(copies.copy_gbps(torch, host, device), 1)


def allocate_and_free(torch: Any, index: int) -> int:
    free, _ = torch.cuda.mem_get_info(index)
    blocks = [
        torch.empty(2**30, dtype=torch.uint8, device=f"cuda:{index}")
        for _ in range(int(free * WAKE_FRACTION) // 2**30)
    ]
    torch.cuda.synchronize(index)
    freed = len(blocks) * 2**30
    del blocks
    torch.cuda.empty_cache()
    return freed


def wake(torch: Any, index: int) -> dict[str, Any]:
    fresh = [one_batch(torch, index) for _ in range(3)]
    freed = allocate_and_free(torch, index)
    right_after = one_batch(torch, index)
    time.sleep(0.5)
    later = one_batch(torch, index)
    return {
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "h2d_fresh_gbps": fresh,
        "freed_bytes": freed,
        "h2d_right_after_free_gbps": right_after,
        "h2d_half_a_second_later_gbps": later,
        "settled": copies.measure_host(torch, index),
    }


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no GPU"}))
        return 2
    gpus = [wake(torch, i) for i in range(torch.cuda.device_count())]
    print(json.dumps({"conditions": copies.HOST_CONDITIONS, "gpus": gpus}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
