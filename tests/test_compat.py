"""Compatibility lookups and `compat refresh` against a recorded PyPI (no network)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import yaml

from imagekit.errors import CompatError
from imagekit.matrix import compat
from imagekit.matrix.compat_refresh import RefreshError, refresh

DATA = compat.COMPAT_FILE.read_text()


def test_lookups() -> None:
    data = compat.load()
    assert data.torch_release("2.7").version == "2.7.1"
    assert data.torch_index("12.6", "2.7.1") is None  # PyPI's default wheel is cu126
    assert data.torch_index("12.8", "2.7.1") == "https://download.pytorch.org/whl/cu128"
    assert data.torch_index("cpu", "2.13.0") == "https://download.pytorch.org/whl/cpu"
    assert compat.variant_of("12.6") == "cu126"
    with pytest.raises(CompatError, match=r"known: 11\.8, 12\.1"):
        data.cuda_release("12.7")


def test_loaded_data_is_read_only() -> None:
    with pytest.raises(TypeError):
        compat.load().torch["9.9"] = compat.load().torch["2.7.1"]  # type: ignore[index]


def tag(python: str) -> str:
    return "cp" + python.replace(".", "")


def fake_pypi(version: str, pythons: list[str], pin_line: str, side_file: bool) -> object:
    """A PyPI with one torch release: simple JSON index, and METADATA either as a PEP 658
    side file or only inside the wheel (read by range requests)."""
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{pin_line}\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("torch/__init__.py", "x" * 5000)
        z.writestr(f"torch-{version}.dist-info/METADATA", metadata)
    wheel = buf.getvalue()
    files = [
        {
            "filename": f"torch-{version}-{tag(p)}-{tag(p)}-manylinux_2_28_x86_64.whl",
            "url": f"https://files.example/torch-{p}.whl",
            "size": len(wheel),
        }
        for p in pythons
    ]
    files.append(
        {
            "filename": f"torch-{version}-cp313-cp313t-manylinux_2_28_x86_64.whl",
            "url": "https://files.example/t.whl",
            "size": len(wheel),
        }
    )
    ranges: list[str] = []

    def fetch(url: str, headers: dict[str, str]) -> bytes:
        if url.endswith("/torch/"):
            return json.dumps({"files": files}).encode()
        if url.endswith(".metadata"):
            if side_file:
                return metadata.encode()
            raise RefreshError("404")
        start, end = (int(x) for x in headers["Range"].removeprefix("bytes=").split("-"))
        ranges.append(headers["Range"])
        return wheel[start : end + 1]

    fetch.ranges = ranges  # type: ignore[attr-defined]
    return fetch


@pytest.mark.parametrize("side_file", [True, False])
def test_refresh_prints_diff_and_writes_only_when_asked(tmp_path: Path, side_file: bool) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text(DATA)
    fetch = fake_pypi(
        "2.7.1", ["3.10", "3.11"], "Requires-Dist: nvidia-cuda-runtime-cu12 (==12.8.90)", side_file
    )
    out = refresh(["2.7.1"], write=False, fetch=fetch, path=path)  # type: ignore[arg-type]
    assert '-  "2.7.1": {python: ["3.9", "3.10", "3.11", "3.12", "3.13"], pypi_cuda: "12.6"' in out
    assert '+  "2.7.1": {python: ["3.10", "3.11"], pypi_cuda: "12.8"' in out
    assert "not written" in out and path.read_text() == DATA
    if not side_file:
        assert fetch.ranges  # type: ignore[attr-defined]
    out = refresh(["2.7.1"], write=True, fetch=fetch, path=path)  # type: ignore[arg-type]
    assert "wrote" in out
    assert compat.parse(yaml.safe_load(path.read_text())).torch["2.7.1"].pypi_cuda == "12.8"


def test_refresh_reads_cuda_toolkit_pins_and_reports_current(tmp_path: Path) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text(DATA)
    fetch = fake_pypi(
        "2.11.0",
        ["3.10", "3.11", "3.12", "3.13", "3.14"],
        'Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"',
        True,
    )
    out = refresh(["2.11.0", "2.99.0"], fetch=fetch, path=path)  # type: ignore[arg-type]
    assert "compat data is current for torch 2.11.0" in out
    assert "torch 2.99.0 is not in the data" in out


def test_label_requirement_and_driver_verdict_agree_for_every_cuda_row() -> None:
    """io.imagekit.min-driver, NVIDIA_REQUIRE_CUDA and the self-check's driver verdict say
    the same thing: the major's floor under minor-version compatibility."""
    from imagekit.selfcheck import gpu

    data = compat.load()
    for version, row in data.cuda.items():
        major = int(version.split(".")[0])
        assert row.require_cuda == f"cuda>={major}.0"
        assert row.min_driver == gpu.MAJOR_DRIVER_FLOOR[major], version
        labels = {"io.imagekit.cuda": version, "io.imagekit.min-driver": row.min_driver}
        need = gpu.min_driver(labels, version)
        assert gpu.driver_problem(row.min_driver, need, version) is None
        below = row.min_driver.split(".")
        below[0] = str(int(below[0]) - 1)
        assert gpu.driver_problem(".".join(below), need, version) is not None
        # an R535 host runs every CUDA 12 row's wheels, and is refused by none of them
        if major == 12:
            assert gpu.driver_problem("535.104.05", need, version) is None


def test_nvidia_cuda_tags_use_each_releases_cudnn_word() -> None:
    data = compat.load()
    assert data.cuda["11.8"].cudnn_tag == "cudnn8" and data.cuda["12.1"].cudnn_tag == "cudnn8"
    assert data.cuda["12.6"].cudnn_tag == "cudnn"
