"""The GPU archs of PyTorch's aarch64 wheels: the compat data's `variant_archs.<v>.arm64`
lists, read per platform (Compat.archs_for), the arm64 image's own label and build
environment (a stage per platform, picked by BuildKit's TARGETARCH), and `compat show
--platform linux/arm64` judging a GPU against the aarch64 list, not the x86-64 one."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import dockerfile
import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli import cli
from imagekit.contract import labels as label
from imagekit.errors import CompatError, SpecError
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat, compat_refresh
from imagekit.matrix.cells import Cell
from imagekit.matrix.compat_show import parse_host, row_verdict
from imagekit.platforms import AMD64, ARM64
from imagekit.render.ci import bake, cell_json, github_builds
from imagekit.render.dockerfile import render

WriteEnv = Callable[..., Path]
DATA = compat.COMPAT_FILE.read_text(encoding="utf-8")

# What PyTorch's aarch64 build scripts compile, per release (the sources are in the data
# file's comments and its `pytorch-aarch64-build` source). 2.4-2.6 and 2.8 keep only what
# every source agrees on; 2.11 on claim no PTX, as the x86-64 wheels of the same script.
ARM64_FACTS = [
    ("2.4.1", "12.4", ("9.0",)),
    ("2.5.1", "12.4", ("9.0",)),
    ("2.6.0", "12.6", ("9.0",)),
    ("2.7.1", "12.8", ("9.0", "10.0", "12.0")),
    ("2.8.0", "12.9", ("9.0", "10.0", "12.0")),
    ("2.9.1", "12.6", ("8.0", "9.0")),
    ("2.9.1", "12.8", ("8.0", "9.0", "10.0", "12.0")),
    ("2.9.1", "13.0", ("8.0", "9.0", "10.0", "11.0", "12.0+PTX")),
    ("2.10.0", "12.6", ("8.0", "9.0")),
    ("2.10.0", "12.8", ("8.0", "9.0", "10.0", "12.0")),
    ("2.10.0", "13.0", ("8.0", "9.0", "10.0", "11.0", "12.0+PTX")),
    ("2.11.0", "12.8", ("8.0", "9.0", "10.0", "12.0")),
    ("2.11.0", "13.0", ("8.0", "9.0", "10.0", "11.0", "12.0")),
    ("2.12.1", "12.6", ("8.0", "9.0")),
    ("2.12.1", "13.2", ("8.0", "9.0", "10.0", "11.0", "12.0")),
    ("2.14.1", "13.0", ("8.0", "9.0", "10.0", "11.0", "12.0")),
    ("2.15.0", "13.2", ("8.0", "9.0", "10.0", "11.0", "12.0")),  # PyPI's aarch64 wheel
]


@pytest.mark.parametrize(("torch", "cuda", "archs"), ARM64_FACTS)
def test_aarch64_wheels_have_their_own_arch_list(
    torch: str, cuda: str, archs: tuple[str, ...]
) -> None:
    data = compat.load()
    assert data.archs_for(torch, cuda, ARM64) == archs
    assert data.archs_for(torch, cuda, ARM64) != data.archs_for(torch, cuda)  # x86-64's


@pytest.mark.parametrize(
    ("torch", "cuda", "archs"),
    [
        ("2.7.1", "12.8", ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX")),
        ("2.9.1", "12.6", ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")),
        ("2.14.1", "13.0", ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")),
    ],
)
def test_amd64_stays_the_default_platform(torch: str, cuda: str, archs: tuple[str, ...]) -> None:
    data = compat.load()
    assert data.archs_for(torch, cuda) == data.archs_for(torch, cuda, AMD64) == archs


def test_every_aarch64_cuda_wheel_in_the_data_has_an_arch_list() -> None:
    """Each variant a torch's `arm64` entry ships (and its PyPI CUDA) has a list of its own,
    with its source; each `by_torch` release is one that ships the variant on aarch64."""
    data = compat.load()
    shipped: dict[str, set[str]] = {}
    for release in data.torch.values():
        for cuda in data.cudas_of(release, ARM64):
            archs = data.archs_for(release.version, cuda, ARM64)  # raises where none
            assert archs and compat.arch_entries(archs), (release.version, cuda)
            shipped.setdefault(compat.variant_of(cuda), set()).add(release.version)
    for variant, releases in shipped.items():
        arm64 = data.variant_archs[variant].arm64
        assert arm64 is not None and "pytorch-aarch64-build" in arm64.source, variant
        assert set(arm64.by_torch) <= releases, variant


def data_without(variant: str) -> compat.Compat:
    raw = yaml.safe_load(DATA)
    del raw["variant_archs"][variant]["arm64"]
    return compat.parse(raw)


def test_a_variant_without_an_aarch64_list_is_refused_not_given_x86s() -> None:
    data = data_without("cu128")
    assert data.archs_for("2.9.1", "12.8") == compat.load().archs_for("2.9.1", "12.8")
    with pytest.raises(CompatError, match=r"variant_archs\.cu128\.arm64"):
        data.archs_for("2.9.1", "12.8", ARM64)
    assert data.archs_for("2.9.1", "cpu", ARM64) == ()  # a CPU wheel has no GPU code


def test_a_cell_of_such_a_variant_is_refused_naming_the_fix(
    write_env: WriteEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "compat.yaml"
    raw = yaml.safe_load(DATA)
    del raw["variant_archs"]["cu128"]["arm64"]
    broken.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(compat, "COMPAT_FILE", broken)
    block = {"cuda": "12.8", "torch": "2.9.1", "python": "3.12", "os": "ubuntu24.04"}
    block |= {"flavor": "slim", "platform": ["linux/amd64", "linux/arm64"]}
    folder = write_env(yaml.safe_dump({"matrix": [block]}))
    with pytest.raises(SpecError) as info:
        load_cells([folder])
    (msg,) = info.value.problems
    assert "platform linux/arm64: torch 2.9.1 cu128 on linux/arm64" in msg
    assert "no aarch64 arch list (variant_archs.cu128.arm64)" in msg
    assert "drop linux/arm64 from this cell's `platform`" in msg
    (alone,) = load_cells([write_env(yaml.safe_dump({"matrix": [block | {"platform": AMD64}]}))])
    assert alone.archs == compat.load().archs_for("2.9.1", "12.8")


# -- the cell and its Dockerfile -------------------------------------------------------------
def one_cell(write_env: WriteEnv, platform: list[str], **more: object) -> Cell:
    block = {"cuda": "13.0", "torch": "2.14.1", "python": "3.12", "os": "ubuntu24.04"}
    block |= {"flavor": "nvidia", "platform": platform, **more}
    (cell,) = load_cells([write_env(yaml.safe_dump({"matrix": [block]}))])
    return cell


AMD64_LIST = "7.5 8.0 8.6 9.0 10.0 12.0"
ARM64_LIST = "8.0 9.0 10.0 11.0 12.0"


def test_a_two_platform_cell_keeps_amd64s_archs_and_adds_arm64s(write_env: WriteEnv) -> None:
    cell = one_cell(write_env, [ARM64, AMD64])
    assert " ".join(cell.archs) == cell.label(label.ARCHS) == AMD64_LIST
    assert " ".join(cell.archs_on(ARM64)) == ARM64_LIST
    assert cell.arm64_labels == ((label.ARCHS, ARM64_LIST),)
    assert cell_json(cell)["archs"] == AMD64_LIST.split()  # CI's "archs": amd64's, as before
    assert cell_json(cell)["archs_by_platform"] == {
        AMD64: AMD64_LIST.split(),
        ARM64: ARM64_LIST.split(),
    }


def test_ci_says_each_platforms_archs_and_bake_leaves_the_label_to_the_dockerfile(
    write_env: WriteEnv,
) -> None:
    """bake sets a target's labels on every platform it builds: with io.imagekit.archs among
    them, the arm64 image would carry amd64's list over its own stage's LABEL."""
    cell = one_cell(write_env, [AMD64, ARM64])
    (target,) = bake([cell])["target"].values()
    assert label.ARCHS not in target["labels"] and label.CUDA in target["labels"]
    jobs = github_builds([cell], arm64_runner="ubuntu-24.04-arm")["include"]
    assert {job["platforms"]: job["archs"] for job in jobs} == {
        AMD64: AMD64_LIST.split(),
        ARM64: ARM64_LIST.split(),
    }
    single = one_cell(write_env, [AMD64])
    (plain,) = bake([single])["target"].values()
    assert plain["labels"] == dict(single.labels)  # one platform: every label, as before


def test_an_arm64_only_cell_is_one_platform_with_arm64s_archs(write_env: WriteEnv) -> None:
    cell = one_cell(write_env, [ARM64])
    assert cell.label(label.ARCHS) == ARM64_LIST and cell.arm64_archs is None
    text = render(cell)
    assert "TARGETARCH" not in text and "FROM os-base AS runtime\n" in text
    assert f'LABEL io.imagekit.archs="{ARM64_LIST}"' in text


def stages(text: str, tmp_path: Path) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Each stage's instructions (name, values), by stage, as BuildKit's own parser reads
    the file."""
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            name = command.value[-1]
            found[name] = []
        found[name].append((command.cmd, command.value))
    return found


def labels_of(instruction: tuple[str, tuple[str, ...]]) -> dict[str, str]:
    cmd, values = instruction
    assert cmd == "LABEL"
    return {k: v.strip('"') for k, v in zip(values[::2], values[1::2], strict=True)}


def test_the_arm64_image_is_built_from_a_stage_with_its_own_label(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    by_stage = stages(render(one_cell(write_env, [AMD64, ARM64])), tmp_path)
    assert list(by_stage)[-4:] == ["runtime-common", "runtime-amd64", "runtime-arm64", "runtime"]
    common = by_stage["runtime-common"]
    assert common[0] == ("FROM", ("os-base", "AS", "runtime-common"))
    assert labels_of(common[-1])[label.ARCHS] == AMD64_LIST  # amd64 builds on it as it is
    assert by_stage["runtime-amd64"] == [("FROM", ("runtime-common", "AS", "runtime-amd64"))]
    arm64 = by_stage["runtime-arm64"]
    assert [cmd for cmd, _ in arm64] == ["FROM", "LABEL", "RUN"]
    assert labels_of(arm64[1]) == {label.ARCHS: ARM64_LIST}
    assert "/etc/imagekit/labels.json" in arm64[2][1][0] and ARM64_LIST in arm64[2][1][0]
    final = by_stage["runtime"]
    assert final[0] == ("FROM", ("runtime-${TARGETARCH}", "AS", "runtime"))  # by platform
    assert final[1][0] == "USER" and "LABEL" not in [cmd for cmd, _ in final]


def test_a_one_platform_cell_renders_no_platform_stages(write_env: WriteEnv) -> None:
    text = render(one_cell(write_env, [AMD64]))
    assert "TARGETARCH" not in text and "runtime-common" not in text
    assert f'LABEL io.imagekit.archs="{AMD64_LIST}"' in text


@pytest.mark.subprocess
def test_the_arm64_stage_rewrites_the_self_checks_copy_of_the_labels(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    """The RUN of runtime-arm64, run on a copy of the context's labels.json."""
    text = render(one_cell(write_env, [AMD64, ARM64]))
    run = re.search(
        r"^RUN (PYTHONDONTWRITEBYTECODE=1 /opt/venv/bin/python .*?)\n\n", text, re.M | re.S
    )
    assert run is not None
    labels = tmp_path / "labels.json"
    before = {label.ARCHS: AMD64_LIST, label.CELL: "x", label.TORCH: "2.14.1"}
    labels.write_text(json.dumps(before, indent=2, sort_keys=True) + "\n")
    command = run.group(1).replace("/etc/imagekit/labels.json", str(labels))
    subprocess.run(["bash", "-euc", command.replace("/opt/venv/bin/python", "python3")], check=True)
    after = before | {label.ARCHS: ARM64_LIST}
    assert labels.read_text() == json.dumps(after, indent=2, sort_keys=True) + "\n"
    assert labels.stat().st_mtime == 315532800  # the layers' one date


def test_a_compiled_extension_builds_for_the_platforms_own_gpus(write_env: WriteEnv) -> None:
    cell = one_cell(write_env, [AMD64, ARM64], features=["flash-attn"])
    (step,) = cell.feature_steps
    assert dict(step.env)["TORCH_CUDA_ARCH_LIST"] == AMD64_LIST.replace(" ", ";")
    assert step.arm64_env == (
        ("TORCH_CUDA_ARCH_LIST", ARM64_LIST.replace(" ", ";")),
        ("FLASH_ATTN_CUDA_ARCHS", "80;90;100;120"),
    )
    builder = render(cell).split(" AS builder\n")[1].split("\nFROM ")[0]
    assert "\nARG TARGETARCH\n" in builder
    assert (
        '&& if [ "${TARGETARCH:-}" = arm64 ]; then export '
        f'TORCH_CUDA_ARCH_LIST="{ARM64_LIST.replace(" ", ";")}" '
        'FLASH_ATTN_CUDA_ARCHS="80;90;100;120"; fi'
    ) in builder


# -- compat show -----------------------------------------------------------------------------
def verdicts(*args: str) -> dict[tuple[str, str], str]:
    result = CliRunner().invoke(cli, ["compat", "show", *args])
    assert result.exit_code == 0, result.output
    rows = {}
    for line in result.output.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and re.fullmatch(r"\d+\.\d+\.\d+", parts[0]):
            rows[parts[0], parts[1]] = parts[2]
    return rows


def test_an_a100_on_a_grace_host_is_judged_against_the_aarch64_wheels() -> None:
    arm64 = verdicts("--gpu", "sm_80", "--platform", "linux/arm64")
    assert arm64["2.7.1", "12.8"].startswith("REFUSED: no code for sm_80 (built for 9.0 10.0 12.0)")
    assert arm64["2.9.1", "12.8"] == "runs sm_80"
    assert arm64["2.6.0", "12.6"].startswith("REFUSED: no code for sm_80 (built for 9.0)")
    assert verdicts("--gpu", "sm_80")["2.7.1", "12.8"] == "runs sm_80"  # x86-64's wheel has it
    gh200 = verdicts("--gpu", "GH200", "--platform", "linux/arm64")
    assert all(v.startswith("runs sm_90") for v in gh200.values())


def test_show_refuses_where_the_data_has_no_aarch64_list() -> None:
    data = data_without("cu128")
    row = row_verdict(data, data.torch["2.9.1"], data.cuda["12.8"], parse_host(None, "H100"), ARM64)
    assert not row.runs and row.why == "its arch list is not in the compat data"
    assert "variant_archs.cu128.arm64" in row.rule
    amd64 = row_verdict(data, data.torch["2.9.1"], data.cuda["12.8"], parse_host(None, "H100"))
    assert amd64.runs


def test_show_platform_lists_each_aarch64_wheels_archs() -> None:
    result = CliRunner().invoke(cli, ["compat", "show", "--platform", "linux/arm64"])
    lines = result.output.splitlines()
    assert any(re.fullmatch(r"2\.7\.1 +12\.8 +9\.0 10\.0 12\.0", line) for line in lines)
    assert any(re.fullmatch(r"2\.14\.1 +13\.0 +" + ARM64_LIST, line) for line in lines)


def test_refresh_says_which_new_aarch64_variants_have_no_arch_list() -> None:
    """`compat refresh` cannot derive an arch list (it is in PyTorch's build scripts): it says
    which aarch64 variants it found lack one."""
    data = compat.load()
    new = compat_refresh.DerivedBuilds(("3.12",), "13.4", ("cu130", "cu134", "cpu"))
    derived = compat_refresh.Derived("2.16.0", ("3.12",), "13.4", arm64=new)
    (note,) = compat_refresh._arm64_archs_note(derived, data)
    assert note.startswith("torch 2.16.0: no aarch64 arch list for cu134 (variant_archs.")
    known = compat_refresh.DerivedBuilds(("3.12",), "13.0", ("cu126", "cu130"))
    assert compat_refresh._arm64_archs_note(replace(derived, arm64=known), data) == []
