"""Compatibility lookups and `compat refresh` against a recorded PyPI (no network)."""

from __future__ import annotations

import functools
import io
import json
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.cli import main
from imagekit.errors import CompatError
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat, compat_refresh
from imagekit.matrix.compat_refresh import RefreshError, refresh
from imagekit.matrix.compat_show import show

DATA = compat.COMPAT_FILE.read_text()
ENVS = Path(__file__).resolve().parent.parent / "envs"


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


def wheel_bytes(name: str, version: str, metadata: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "x" * 5000)
        z.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return buf.getvalue()


def fake_pypi(version: str, pythons: list[str], pin_line: str, side_file: bool) -> object:
    """An in-memory PyPI with one torch release and no torchvision: METADATA either as a
    PEP 658 side file or only inside the wheel (read by range requests)."""
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{pin_line}\n"
    wheel = wheel_bytes("torch", version, metadata)
    files = [
        {
            "filename": f"torch-{version}-{tag(p)}-{tag(p)}-manylinux_2_28_x86_64.whl",
            "url": f"https://files.example/torch-{p}.whl",
            "size": len(wheel),
        }
        for p in [*pythons, "3.13t"]  # the free-threaded build shares the tag: ignored
    ]
    files[-1]["filename"] = f"torch-{version}-cp313-cp313t-manylinux_2_28_x86_64.whl"
    ranges: list[str] = []

    def fetch(url: str, headers: dict[str, str]) -> bytes:
        if url.endswith("/torch/"):
            return json.dumps({"files": files}).encode()
        if url.endswith("/torchvision/"):
            return json.dumps({"files": []}).encode()
        if url.endswith(".metadata"):
            if side_file:
                return metadata.encode()
            raise RefreshError("404")
        start, end = (int(x) for x in headers["Range"].removeprefix("bytes=").split("-"))
        ranges.append(headers["Range"])
        return wheel[start : end + 1]

    fetch.ranges = ranges  # type: ignore[attr-defined]
    return fetch


def row_line(path: Path, version: str) -> str:
    return next(line for line in path.read_text().splitlines() if line.startswith(f'  "{version}"'))


@pytest.mark.parametrize("side_file", [True, False])
def test_refresh_prints_diff_and_writes_only_when_asked(tmp_path: Path, side_file: bool) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text(DATA)
    fetch = fake_pypi(
        "2.7.1", ["3.10", "3.11"], "Requires-Dist: nvidia-cuda-runtime-cu12 (==12.8.90)", side_file
    )
    out = refreshed(["2.7.1"], write=False, fetch=fetch, path=path)  # type: ignore[arg-type]
    assert "-" + row_line(path, "2.7.1") in out
    assert '+  "2.7.1": {python: ["3.10", "3.11"], pypi_cuda: "12.8"' in out
    assert "not written" in out and path.read_text() == DATA
    if not side_file:
        assert fetch.ranges  # type: ignore[attr-defined]
    out = refreshed(["2.7.1"], write=True, fetch=fetch, path=path, today="2027-01-02")  # type: ignore[arg-type]
    assert "wrote" in out
    row = compat.parse(yaml.safe_load(path.read_text())).torch["2.7.1"]
    assert row.pypi_cuda == "12.8" and row.torchvision is None
    assert row.source["pypi"] == "2027-01-02"  # the date it was read
    assert row.source["pytorch-release"] == "2026-11-23"  # what it did not read keeps its date


def test_refresh_reads_cuda_toolkit_pins_and_reports_current(tmp_path: Path) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text(DATA.replace('torchvision: "0.26.0"', "torchvision: null"))
    fetch = fake_pypi(
        "2.11.0",
        ["3.10", "3.11", "3.12", "3.13", "3.14"],
        'Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"',
        True,
    )
    out = refreshed(["2.11.0"], fetch=fetch, path=path)  # type: ignore[arg-type]
    assert "compat data is current for torch 2.11.0" in out
    assert "--index" in out  # says what PyPI cannot tell, and where it comes from


@pytest.mark.parametrize(
    ("filename", "read"),
    [
        # file names as PyPI and download.pytorch.org list them
        ("torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl", ("torch", "2.7.1", None, "3.11")),
        ("torch-2.4.1-cp38-cp38-manylinux1_x86_64.whl", ("torch", "2.4.1", None, "3.8")),
        (
            "torch-2.7.1+cu126-cp313-cp313-manylinux_2_28_x86_64.whl",
            ("torch", "2.7.1", "cu126", "3.13"),
        ),
        (
            "torchvision-0.22.1-cp310-cp310-manylinux_2_28_x86_64.whl",
            ("torchvision", "0.22.1", None, "3.10"),
        ),
        ("torch-2.7.1-cp313-cp313t-manylinux_2_28_x86_64.whl", None),  # free-threaded
        ("torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl", None),
        ("torch-2.7.1-cp311-cp311-win_amd64.whl", None),
        ("torch-2.7.1-cp311-none-macosx_11_0_arm64.whl", None),
        ("torch-2.7.1.tar.gz", None),
        ("torch-2.16.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl", None),  # still quoted
    ],
)
def test_wheel_file_names_are_read_by_packaging(
    filename: str, read: tuple[str, str, str | None, str] | None
) -> None:
    wheel = compat_refresh.linux_wheel(filename)
    got = wheel and (wheel.name, wheel.version.public, wheel.version.local, wheel.python)
    assert got == read


@pytest.mark.parametrize(
    ("lines", "cuda"),
    [
        # torch 2.1.2's METADATA (the parenthesised form), 2.7.1's, a cuda-toolkit pin
        (
            'Requires-Dist: nvidia-cuda-nvrtc-cu12 (==12.1.105) ; platform_system == "Linux"\n'
            'Requires-Dist: nvidia-cuda-runtime-cu12 (==12.1.105) ; platform_system == "Linux"',
            "12.1",
        ),
        (
            'Requires-Dist: nvidia-cuda-runtime-cu12==12.6.77; platform_system == "Linux" and '
            'platform_machine == "x86_64"\nRequires-Dist: cuda-toolkit==13.0.2',
            "12.6",  # the runtime wheel's pin wins over a toolkit pin
        ),
        ("Requires-Dist: Cuda_Toolkit[cublas]==13.0.2", "13.0"),  # names compared normalized
        ("Requires-Dist: nvidia-cuda-runtime-cu12>=12.6", None),  # a range pins nothing
        ("Requires-Dist: filelock\nRequires-Dist: not a requirement ((", None),
    ],
)
def test_cuda_pin_is_read_from_requires_dist(lines: str, cuda: str | None) -> None:
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: 2.7.1\n{lines}\n"
    assert compat_refresh.cuda_pin(metadata) == cuda


def test_torchvision_pin_on_torch_is_read_from_requires_dist() -> None:
    metadata = (
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.22.1\n"
        "Requires-Dist: numpy\nRequires-Dist: torch==2.7.1\nRequires-Dist: pillow>=5.3.0,!=8.3.*\n"
    )
    assert str(compat_refresh.torch_pin(metadata)) == "==2.7.1"
    assert str(compat_refresh.torch_pin("Metadata-Version: 2.1\nName: x\n")) == ""


class FakeIndexes:
    """A PyPI (simple JSON, PEP 658 side files) and a PyTorch-style wheel index (PEP 503
    HTML), written to a folder and served over real HTTP on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pypi: dict[str, list[dict[str, object]]] = {"torch": [], "torchvision": []}
        self.anchors: list[str] = []

    def wheel(self, name: str, version: str, python: str, requires: str) -> None:
        filename = f"{name}-{version}-{tag(python)}-{tag(python)}-manylinux_2_28_x86_64.whl"
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n"
        files = self.root / "files"
        files.mkdir(parents=True, exist_ok=True)
        (files / filename).write_bytes(wheel_bytes(name, version, metadata))
        (files / f"{filename}.metadata").write_text(metadata)
        self.pypi[name].append({"filename": filename, "url": f"{self.url}/files/{filename}"})

    def variant(self, version: str, local: str) -> None:
        name = f"torch-{version}+{local}-cp312-cp312-manylinux_2_28_x86_64.whl"
        self.anchors.append(
            f'<a href="/whl/{local}/{name.replace("+", "%2B")}#sha256=00">{name}</a>'
        )

    def publish(self) -> None:
        for project, files in self.pypi.items():
            folder = self.root / "simple" / project
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "index.html").write_text(json.dumps({"files": files}))
        folder = self.root / "whl" / "torch"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text("<html><body>\n" + "<br>\n".join(self.anchors))

    def __enter__(self) -> FakeIndexes:
        handler = functools.partial(QuietHandler, directory=str(self.root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_refresh_adds_a_release_with_its_torchvision_and_index_variants(tmp_path: Path) -> None:
    """A new torch on PyPI: refresh adds its row, in version order, with the Python range,
    the CUDA pin, the torchvision whose own pin admits it (not a later minor's loose pin),
    and, with --index, the cuXXX/cpu variants of a PyTorch-style index (not rocm)."""
    path = tmp_path / "compat.yaml"
    path.write_text(DATA)
    with FakeIndexes(tmp_path / "www") as www:
        for py in ("3.11", "3.12"):
            www.wheel("torch", "2.16.0", py, "Requires-Dist: cuda-toolkit[cudart]==13.4.1")
        www.wheel("torch", "2.15.0", "3.12", "Requires-Dist: cuda-toolkit[cudart]==13.2.2")
        www.wheel("torchvision", "0.31.0", "3.12", "Requires-Dist: torch (==2.16.0)")
        www.wheel("torchvision", "0.31.1", "3.12", "Requires-Dist: torch>=2.16.0")
        www.wheel("torchvision", "0.32.0", "3.12", "Requires-Dist: torch>=2.16.0")  # 2.17's
        for local in ("cu130", "cu134", "cpu", "rocm7.1"):
            www.variant("2.16.0", local)
        www.variant("2.15.0", "cu126")
        www.publish()
        fetch = compat_refresh.http_fetch
        out = refreshed(
            ["2.16.0"],
            write=True,
            fetch=fetch,
            path=path,
            index=f"{www.url}/simple",
            torch_index=f"{www.url}/whl",
            today="2027-01-02",
        )
    assert "torch 2.16.0 is new in the data" in out and "wrote" in out
    assert '+  "2.16.0": {python: ["3.11", "3.12"], pypi_cuda: "13.4"' in out
    data = compat.parse(yaml.safe_load(path.read_text()))
    row = data.torch["2.16.0"]
    assert row.variants == ("cu130", "cu134", "cpu")
    assert row.torchvision == "0.31.1"
    assert dict(row.source) == {"pypi": "2027-01-02", "pytorch-index": "2027-01-02"}
    assert list(data.torch)[-2:] == ["2.15.0", "2.16.0"]


def test_refresh_fails_clearly_when_pypi_is_unreachable(tmp_path: Path) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text(DATA)
    with pytest.raises(RefreshError, match="could not fetch http://127.0.0.1:9/simple/torch/"):
        refresh(["2.7.1"], path=path, index="http://127.0.0.1:9/simple")
    assert path.read_text() == DATA


def test_every_row_names_its_source_and_the_date_read() -> None:
    raw = yaml.safe_load(DATA)
    for table in ("torch", "cuda", "variant_archs", "os", "features"):
        for key, row in raw[table].items():
            assert row["source"] and set(row["source"]) <= set(raw["sources"]), (table, key)
    for key, row in raw["variant_archs"].items():  # the aarch64 lists have sources of their own
        if "arm64" in row:
            assert set(row["arm64"]["source"]) == {"pytorch-aarch64-build"}, key
    broken = DATA.replace('arm64: {archs: ["9.0"], source:', 'arm64: {archs: ["9.0"], sources:')
    with pytest.raises(CompatError, match=r"variant_archs\.cu124\.arm64\.sources: unknown key"):
        compat.parse(yaml.safe_load(broken))
    broken = DATA.replace('cuda-runfiles: "2026-11-23",', 'cuda-runfiles: "last year",', 1)
    with pytest.raises(CompatError, match=r"cuda\.11\.8 source cuda-runfiles: 'last year'"):
        compat.parse(yaml.safe_load(broken))


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (  # a key deleted
            '"12.6": {full: "12.6.3", min_driver: "525.60.13", ',
            '"12.6": {full: "12.6.3", ',
            "cuda.12.6.min_driver: missing; add it (the comment above its table says what it holds)",
        ),
        (  # a string where a list belongs
            '"2.7.1": {python: ["3.9", "3.10", "3.11", "3.12", "3.13"],',
            '"2.7.1": {python: "3.11",',
            "torch.2.7.1.python: '3.11': Input should be a valid list",
        ),
        (  # a misspelt key, which the loader used to ignore
            "forward_branches: [450, 470]",
            "forward_branch: [450, 470]",
            "cuda.11.8.forward_branch: unknown key; remove it, or fix its spelling",
        ),
        ("\nfeatures:\n", "\nfeature:\n", "features: missing"),  # a whole table
    ],
)
def test_a_broken_data_file_is_a_compat_error_naming_file_key_and_fix(
    old: str,
    new: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not a KeyError (exit 70, 'internal error'): the loader checks the file's shape first."""
    assert DATA.count(old) == 1
    broken = tmp_path / "compat.yaml"
    broken.write_text(DATA.replace(old, new))
    monkeypatch.setattr(compat, "COMPAT_FILE", broken)
    with pytest.raises(SystemExit) as exit_info:
        main(["compat", "show"])
    assert exit_info.value.code == CompatError.exit_code == 3
    err = capsys.readouterr().err
    assert f"imagekit: error: compat data {broken} is not valid:\n" in err
    assert f"  - {problem}" in err
    assert "internal error" not in err


def test_archs_are_keyed_by_release_where_builds_differ() -> None:
    data = compat.load()
    assert "7.0" not in data.archs_for("2.7.1", "12.8")  # 2.7's cu128 build has no Volta
    assert "7.0" in data.archs_for("2.9.1", "12.8")
    assert "7.0" not in data.archs_for("2.11.0", "12.8")
    assert compat.arch_entries(data.archs_for("2.7.1", "12.8"))[-2:] == ["sm_120", "compute_120"]


def test_nvidia_flavor_runs_on_the_base_image_and_compiles_on_devel() -> None:
    """No cuDNN image anywhere: the wheels bring cuDNN, and nvcc needs none."""
    cells = {c.id: c for c in load_cells([ENVS])}
    plain = cells["pytorch-train-cu126-torch2.7.1-py3.11-ubuntu24.04-nvidia"]
    assert plain.runtime_image == "nvidia/cuda:12.6.3-base-ubuntu24.04"
    assert plain.builder_image is None
    compiled = cells["pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia"]
    assert compiled.runtime_image == "nvidia/cuda:12.8.1-base-ubuntu24.04"
    assert compiled.builder_image == "nvidia/cuda:12.8.1-devel-ubuntu24.04"


def refreshed(*args: Any, **kwargs: Any) -> str:
    return "\n".join(refresh(*args, **kwargs))


def verdicts(lines: list[str]) -> dict[tuple[str, str], str]:
    rows = [line.split(None, 2) for line in lines[2:] if line[:1].isdigit()]
    return {(r[0], r[1]): r[2] for r in rows if len(r) == 3 and "." in r[1]}


def test_show_answers_which_builds_run_on_a_driver_and_gpu() -> None:
    lines = show(driver="535.104.05", gpu="H100")
    rows, text = verdicts(lines), "\n".join(lines)
    assert rows[("2.7.1", "12.6")] == "runs sm_90"
    refused = rows[("2.11.0", "13.0")]
    assert refused.startswith("REFUSED: driver 535.104.05 < 580.65.06")
    assert "the nvidia flavor runs (forward compatibility" in refused  # 13.0 lists R535
    assert "no forward compatibility" in rows[("2.15.0", "13.2")]  # 13.2's branches unread
    footnote = text.split("Why refused:")[1]
    assert "CUDA 13.x runs on drivers from 580.65.06 (minor-version compatibility)" in footnote
    assert "read 2026-11-23" in footnote


def test_show_refuses_builds_without_code_for_the_gpu_and_ptx_on_old_drivers() -> None:
    rows = verdicts(show(gpu="RTX 5090"))
    assert rows[("2.7.1", "12.6")].startswith("REFUSED: no code for sm_120")
    assert rows[("2.7.1", "12.8")] == "runs sm_120"
    # a GPU newer than every SASS entry runs 2.7.1+cu128 only through its compute_120 PTX,
    # which a driver older than the 12.8 toolkit's cannot JIT
    rows = verdicts(show(driver="560.35.05", gpu="sm_130"))
    assert "needs PTX JIT" in rows[("2.7.1", "12.8")]
    assert rows[("2.9.1", "12.8")].startswith("REFUSED: no code for sm_130")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--driver", "latest"], "--driver 'latest' is not a driver version"),
        (["--gpu", "Voodoo 5"], "--gpu 'Voodoo 5' is neither a compute capability"),
    ],
)
def test_show_names_the_option_and_the_fix_for_bad_input(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compat", "show", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
