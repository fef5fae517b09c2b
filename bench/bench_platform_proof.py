"""What proving an image's platform from its files costs (issue 49): the same image read
through the engine (a local build) and back from its registry (a push without --load), beside
decompressing its largest layer alone, the floor of the registry read.

Usage: python -m bench.bench_platform_proof --image REGISTRY/NAME:TAG [--repeat 3]
The image must be on the running engine and in its registry (e.g. the real suite's session
image, 127.0.0.1:5000/imagekit-test:2.13.0-cpu-py3.11-debian12-slim). Prints a table and
writes bench/results/platform-proof.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from imagekit.builder.platform_proof import prove
from imagekit.contract.refs import parse
from imagekit.engine import image_registry
from imagekit.engine.docker import DockerEngine
from imagekit.engine.emulation import host_platform
from imagekit.engine.interface import Layer
from imagekit.text_table import render_table

ROOT = Path(__file__).resolve().parent.parent


def timed(run: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def decompress(reference: str, layer: Layer) -> int:
    """The layer's blob fetched and decompressed, nothing else."""
    total = 0
    with image_registry._blob_stream(image_registry.by_digest(reference, layer.digest)) as raw:
        stream = image_registry._decompressing(raw, layer.media_type)
        while chunk := stream.read(1 << 20):
            total += len(chunk)
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    own = host_platform() or "linux/amd64"
    engine = DockerEngine()
    python = engine.inspect(args.image).labels.get("io.imagekit.python", "3.11")  # type: ignore[union-attr]

    def local() -> None:
        with engine.image_files(args.image) as files:
            assert prove(own, files, python).ok

    image = image_registry.pushed_image(args.image, own.rsplit("/", 1)[1])
    by_digest = str(parse(args.image).by_digest(image.digest))

    def from_registry() -> None:
        assert prove(own, image_registry.files(by_digest, image.layers), python).ok

    largest = max(image.layers, key=lambda layer: layer.size)
    unpacked = decompress(by_digest, largest)
    rows = [
        ("local, through the engine", timed(local, args.repeat)),
        ("pushed, from the registry", timed(from_registry, args.repeat)),
        ("largest layer decompressed", timed(lambda: decompress(by_digest, largest), args.repeat)),
    ]
    compressed = sum(layer.size for layer in image.layers)
    print(
        f"{args.image}: {len(image.layers)} layers, {compressed / 1e9:.2f} GB as pushed; "
        f"largest {largest.size / 1e9:.2f} GB ({unpacked / 1e9:.2f} GB unpacked)"
    )
    header = ("READ", "MEDIAN S", "MAX S")
    cells = [(n, f"{statistics.median(v):.2f}", f"{max(v):.2f}") for n, v in rows]
    print("\n".join(render_table(header, cells, right=header[1:])), f"({args.repeat} runs)")
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} Python {platform.python_version()}",
        "image": args.image,
        "layers": len(image.layers),
        "compressed_bytes": compressed,
        "largest_layer_bytes": largest.size,
        "largest_layer_unpacked_bytes": unpacked,
        "median_s": {name: statistics.median(values) for name, values in rows},
    }
    out = ROOT / "bench" / "results" / "platform-proof.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
