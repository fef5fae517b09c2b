"""Real engine, real BuildKit, real registry, real containers (started by .ci/setup-host.sh).

One image is built for the module (a CPU torch cell from the local wheelhouse); the other
tests reuse it and BuildKit's cache.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from .pypi_mirror import Mirror
from .realengine import (
    MARKER,
    REGISTRY,
    build_args,
    docker,
    imagekit,
    make_project,
    marked_ca_bundle,
    require_engine,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]
CELL = "cpu-torch2.13.0-py3.11-debian12-slim"
TAG = f"{REGISTRY}/imagekit-test:2.13.0-cpu-py3.11-debian12-slim"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_engine()
    if docker("image", "inspect", "debian:bookworm-slim", check=False).returncode != 0:
        result = imagekit("base", "bootstrap", "--suite", "bookworm", cwd=Path.cwd())
        assert result.returncode == 0, result.stderr
    root = make_project(tmp_path_factory.mktemp("proj") / "p")
    result = imagekit(*build_args(marked_ca_bundle(root), "--push"), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root


def report(root: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((root / "reports" / CELL / "build.json").read_text())


def run_in_image(*args: str) -> str:
    return docker("run", "--rm", *args).stdout.strip()


def test_engine_discovery_picks_buildkit() -> None:
    from imagekit.engine.discover import find_builder
    from imagekit.engine.docker import DockerEngine

    require_engine()
    builder = find_builder()
    assert builder.kind in {"buildx", "buildkit"}
    assert "builds with" in DockerEngine().describe()


def test_newer_cli_without_buildx_is_refused_with_a_fix() -> None:
    from imagekit.engine.discover import cli_version, find_builder, has_buildx
    from imagekit.errors import EngineError

    new_cli = "/usr/local/bin/docker"
    version = cli_version(new_cli) if Path(new_cli).exists() else None
    if version is None or version.major < 23 or has_buildx(new_cli):
        pytest.skip("needs a Docker CLI >= 23 without buildx at /usr/local/bin/docker")
    with pytest.raises(EngineError, match="without the buildx plugin.*install the buildx plugin"):
        find_builder(new_cli)


def test_base_bootstrap_makes_a_real_debian_image() -> None:
    require_engine()
    tag = "imagekit-test/bookworm-bootstrap:test"
    result = imagekit("base", "bootstrap", "--suite", "bookworm", "--tag", tag, cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    assert run_in_image(tag, "cat", "/etc/debian_version").startswith("12.")
    docker("rmi", tag)


def test_torch_imports_in_the_built_image(project: Path) -> None:
    out = run_in_image(TAG, "python", "-c", "import torch, onnxruntime; print(torch.__version__)")
    assert out.startswith("2.13.0")
    assert report(project)["status"] == "built"


def test_labels_user_and_environment(project: Path) -> None:
    info = json.loads(docker("image", "inspect", TAG).stdout)[0]["Config"]
    labels = info["Labels"]
    assert labels["io.imagekit.torch"] == "2.13.0" and labels["io.imagekit.cell"] == CELL
    assert labels["io.imagekit.features"] == "onnx-tensorrt"
    assert labels["org.opencontainers.image.created"].startswith("20")
    assert info["User"] == "1000:1000"
    assert run_in_image(TAG, "id", "-u") == "1000"
    env = dict(e.split("=", 1) for e in info["Env"])
    assert env["IMAGEKIT_PROFILE"] == "single-node" and "OMP_NUM_THREADS" not in env
    assert run_in_image("--cpus", "1", TAG, "sh", "-c", "echo $OMP_NUM_THREADS") == "1"
    assert run_in_image("-e", "OMP_NUM_THREADS=3", TAG, "sh", "-c", "echo $OMP_NUM_THREADS") == "3"
    assert run_in_image(TAG, "cat", "/workspace/train.py").endswith('print("training code v1")')


def test_source_reaches_the_image_without_its_env_file(project: Path) -> None:
    listing = run_in_image("--entrypoint", "ls", TAG, "-A", "/workspace").split()
    assert "train.py" in listing and ".env" not in listing  # tests/data/app/.env stays out


def test_push_and_pull_by_digest(project: Path) -> None:
    pushed = report(project)["pushed"]
    assert len(pushed) == 2 and all("@sha256:" in ref for ref in pushed)
    image_id = json.loads(docker("image", "inspect", TAG).stdout)[0]["Id"]
    docker("rmi", pushed[0], check=False)
    docker("pull", pushed[0])
    assert json.loads(docker("image", "inspect", pushed[0]).stdout)[0]["Id"] == image_id


def _strings_in_saved_image(tag: str, dest: Path, needles: list[str]) -> set[str]:
    archive = dest / "image.tar"
    docker("save", "-o", str(archive), tag)
    found: set[str] = set()
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            data = outer.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for inner in layer.getmembers():
                        if inner.isfile():
                            content = layer.extractfile(inner).read()  # type: ignore[union-attr]
                            found |= {n for n in needles if n.encode() in content}
            found |= {n for n in needles if n.encode() in data}
    archive.unlink()  # over a GB; pytest keeps the last runs' temp folders
    return found


def test_ca_bundle_is_in_no_layer(project: Path, tmp_path: Path) -> None:
    history = docker("history", "--no-trunc", TAG).stdout
    assert MARKER not in history
    found = _strings_in_saved_image(TAG, tmp_path, [MARKER, "training code v1"])
    assert "training code v1" in found  # the scan does see file contents
    assert MARKER not in found


def test_index_mirror_with_credentials_is_used_and_kept_out_of_the_image(
    project: Path, tmp_path: Path
) -> None:
    """A private mirror on 127.0.0.1 that requires Basic auth: the build installs through
    it with the credentials from --index-url, and the password reaches no layer, no
    report and no output. A rebuild with a changed pip list takes the file from the
    cache mount: a plain-http index is trusted, or pip would cache nothing from it."""
    import urllib.error
    import urllib.request

    password = f"pw-{uuid.uuid4().hex}"
    with Mirror(tmp_path / "mirror", project / "ca-marked.pem", ("ci", password)) as mirror:
        with pytest.raises(urllib.error.HTTPError, match="401"):  # the mirror wants auth
            urllib.request.urlopen(mirror.index_url(with_credentials=False) + "six/")
        for attempt in range(2):
            nonce = uuid.uuid4().hex[:8]  # a new requirement, so the install layer really runs
            extra = (
                "overrides:\n  - match: {cuda: cpu}\n"
                f"    pip: ['six; platform_system != \"nonce-{nonce}\"']\n"
            )
            root = make_project(
                tmp_path / f"p{attempt}", repository="imagekit-mirror-test", extra=extra
            )
            args = ("--index-url", mirror.index_url(), "--network", "host")
            result = imagekit(*build_args(project / "ca-marked.pem", *args), cwd=root)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
            six = [f for f in mirror.stats.files if f.startswith("six-")]
            assert len(six) == 1, six  # the first build fetched it, the second did not
    tag = "127.0.0.1:5000/imagekit-mirror-test:2.13.0-cpu-py3.11-debian12-slim"
    assert run_in_image(tag, "python", "-c", "import six; print(six.__name__)") == "six"
    report_text = (root / "reports" / CELL / "build.json").read_text()
    assert password not in result.stdout + result.stderr + report_text
    assert password not in docker("history", "--no-trunc", tag).stdout
    assert _strings_in_saved_image(tag, tmp_path, [password, "import"]) == {"import"}
    docker("rmi", tag, "127.0.0.1:5000/imagekit-mirror-test:" + CELL + "-latest")


def _build_with_pip(
    project: Path,
    root: Path,
    repository: str,
    pip: list[str],
    build_apt: tuple[str, ...] = (),
    installer: str = "pip",
) -> subprocess.CompletedProcess[str]:
    extra = (
        f"overrides:\n  - match: {{cuda: cpu}}\n    pip: {json.dumps(pip)}\n"
        f"    installer: {installer}\n"
    )
    if build_apt:
        extra += f"    build_apt: {json.dumps(build_apt)}\n"
    make_project(root, repository=repository, extra=extra)
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result


def _cached_steps(root: Path) -> dict[str, bool]:
    return {s["step"].split("] ", 1)[-1]: s["cached"] for s in report(root)["steps"]}


# torch 2.13.0 brings a newer filelock: pinning this one replaces it in the user's layer.
FILELOCK_PROBE = (
    "import glob, importlib.metadata as m, torch; "
    "site = '/opt/venv/lib/python3.11/site-packages'; "
    "print(m.version('filelock'), len(glob.glob(site + '/filelock-*.dist-info')), "
    "torch.__version__)"
)


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_adding_a_package_rebuilds_only_the_pip_layer_with_cached_bytecode(
    project: Path, tmp_path: Path, installer: str
) -> None:
    """Adding a pip package reruns only the runtime's pip step (and what follows it), never
    the builder's venv (torch); the bytecode of packages already built comes from the cache
    mount, and the non-root runtime imports from it. A package that replaces the version
    torch brought in leaves no trace of it. uv runs from the builder (a bind mount): the
    runtime keeps none of it."""
    nonce = uuid.uuid4().hex[:8]  # a pip list no earlier build had
    first = [f'six; platform_system != "nonce-{nonce}"']
    repository = f"imagekit-{installer}-test"
    for pip in (first, [*first, "filelock==3.12.0"]):
        root = tmp_path / f"p{len(pip)}"
        result = _build_with_pip(project, root, repository, pip, installer=installer)
    steps = report(root)["steps"]
    assert not [s["step"] for s in steps if "[builder" in s["step"] and not s["cached"]]
    assert _cached_steps(root)["COPY --from=builder /opt/venv /opt/venv"] is True  # torch
    (install,) = [s for s in steps if "filelock==3.12.0" in s["step"]]
    assert install["step"].startswith("[runtime ") and install["cached"] is False
    hits = re.search(r"bytecode: \d+ files, (\d+) from the cache", result.stdout)
    assert hits and int(hits.group(1)) >= 1, result.stdout[-3000:]  # six.py, compiled before
    tag = f"127.0.0.1:5000/{repository}:2.13.0-cpu-py3.11-debian12-slim"
    assert run_in_image(tag, "python", "-c", FILELOCK_PROBE) == "3.12.0 1 2.13.0+cpu"
    verbose = docker("run", "--rm", tag, "python", "-v", "-c", "import six").stderr
    assert "__pycache__/six.cpython-311.pyc matches /opt/venv/" in verbose
    # BuildKit leaves the bind mount's target behind as an empty directory; nothing of uv.
    no_uv = "find /opt/uv -mindepth 1 2>/dev/null | wc -l; command -v uv || echo absent"
    assert run_in_image(tag, "sh", "-c", no_uv).split() == ["0", "absent"]
    docker("rmi", tag, f"127.0.0.1:5000/{repository}:{CELL}-latest")


def test_with_build_apt_an_sdist_compiles_in_the_builder_and_reaches_the_runtime_as_a_delta(
    project: Path, tmp_path: Path
) -> None:
    """crcmod ships only an sdist whose C extension builds when a compiler is there. With
    build_apt the builder has one; the runtime gets the compiled extension, not gcc, as a
    delta on the builder's venv: adding a package re-copies the delta, never torch, and
    a removal (torch's filelock, replaced) reaches the runtime too."""
    nonce = uuid.uuid4().hex[:8]
    first = [f'crcmod; platform_system != "nonce-{nonce}"']
    build_apt = ("build-essential", "python3-dev")
    for pip in (first, [*first, "filelock==3.12.0"]):
        root = tmp_path / f"p{len(pip)}"
        _build_with_pip(project, root, "imagekit-delta-test", pip, build_apt)
    cached = _cached_steps(root)
    assert cached["COPY --from=builder /opt/venv /opt/venv"] is True  # torch: reused
    assert cached["COPY --from=packages /opt/imagekit-delta/root/ /"] is False
    tag = "127.0.0.1:5000/imagekit-delta-test:2.13.0-cpu-py3.11-debian12-slim"
    probe = "import crcmod._crcfunext as c; print(c.__file__.endswith('.so'))"
    assert run_in_image(tag, "python", "-c", probe) == "True"
    assert run_in_image(tag, "sh", "-c", "command -v gcc cc || echo none") == "none"
    assert run_in_image(tag, "python", "-c", FILELOCK_PROBE) == "3.12.0 1 2.13.0+cpu"
    docker("rmi", tag, "127.0.0.1:5000/imagekit-delta-test:" + CELL + "-latest")


def test_a_no_op_rebuild_gives_the_same_image_id(project: Path) -> None:
    """No clock in the labels: a cached rebuild leaves nothing dangling and keeps the digest
    CI promotes. The creation time comes from SOURCE_DATE_EPOCH (or the commit)."""
    ids = []
    for _ in range(2):
        result = imagekit(
            *build_args(marked_ca_bundle(project)),
            cwd=project,
            env={"SOURCE_DATE_EPOCH": "1700000000"},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        ids.append(docker("image", "inspect", "--format", "{{.Id}}", TAG).stdout.strip())
    assert ids[0] == ids[1]
    labels = json.loads(docker("image", "inspect", TAG).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20+00:00"


def test_derived_images_keep_no_apt_downloads_and_no_baked_frontend(project: Path) -> None:
    """A user's `apt-get install` FROM our image behaves as on Debian's own images."""
    env = run_in_image("--entrypoint", "env", TAG)
    assert "DEBIAN_FRONTEND" not in env
    out = run_in_image(
        "-u", "0", "--entrypoint", "sh", TAG, "-c",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends tree >/dev/null && ls /var/cache/apt/archives/ | grep -c deb$ || true",
    )  # fmt: skip
    assert out.splitlines()[-1] == "0"


def test_source_only_change_rebuilds_only_the_last_layer(project: Path) -> None:
    unchanged = imagekit(*build_args(project / "ca-marked.pem"), cwd=project)
    assert unchanged.returncode == 0, unchanged.stdout[-2000:]
    token = uuid.uuid4().hex  # unique content: BuildKit's cache is content-addressed
    (project / "app" / "train.py").write_text(f'print("training code {token}")\n')
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=project)
    assert result.returncode == 0, result.stdout[-2000:]
    steps = report(project)["steps"]
    rebuilt = [s["step"] for s in steps if not s["cached"] and "FROM" not in s["step"]]
    assert len(rebuilt) == 1 and rebuilt[0].endswith("COPY --chown=1000:1000 source/ /workspace/")
    assert steps[-1]["step"] == rebuilt[0]  # the last layer, and only that one
    assert run_in_image(TAG, "cat", "/workspace/train.py").endswith(f'"training code {token}")')


def test_size_budget_names_the_layers(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("size_budget: 3GB", "size_budget: 300MB"))
    result = imagekit(*build_args(project / "ca-marked.pem", "--progress", "quiet"), cwd=root)
    assert result.returncode == 6
    assert (
        "over-budget" in result.stdout and "over the cell's size_budget of 0.30 GB" in result.stdout
    )
    assert "COPY /opt/venv" in result.stdout


def test_push_to_unreachable_registry_keeps_local_image(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p", registry="127.0.0.1:5999")
    result = imagekit(
        *build_args(project / "ca-marked.pem", "--push", "--progress", "quiet"), cwd=root
    )
    assert result.returncode == 6, result.stdout
    assert (
        "push of 127.0.0.1:5999/imagekit-test:2.13.0-cpu-py3.11-debian12-slim failed"
        in result.stdout
    )
    assert "is kept" in result.stdout
    docker("image", "inspect", "127.0.0.1:5999/imagekit-test:2.13.0-cpu-py3.11-debian12-slim")


def test_daemon_not_running_is_a_clear_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = imagekit(
        "build",
        "--envs",
        "envs",
        "--ca-bundle",
        str(marked_ca_bundle(root)),
        cwd=root,
        env={"DOCKER_HOST": "unix:///tmp/imagekit-no-daemon.sock"},
    )
    assert result.returncode == 5
    assert "cannot reach the Docker daemon at unix:///tmp/imagekit-no-daemon.sock" in result.stderr
    assert "Start it" in result.stderr


def test_a_cell_whose_base_cannot_be_had_stops_the_run_before_building(
    tmp_path: Path, project: Path
) -> None:
    unreachable = "  - {cuda: cpu, torch: '2.13.0', python: '3.12', os: debian12, flavor: slim,"
    unreachable += " installer: uv, base: '127.0.0.1:9/nothing/here:1'}\n"
    root = make_project(tmp_path / "p", repository="imagekit-preflight")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("matrix:\n", "matrix:\n" + unreachable))
    started = time.monotonic()
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=root)
    assert result.returncode == 6, result.stderr
    assert time.monotonic() - started < 60
    assert "cells cannot be built here; nothing was built" in result.stderr
    assert "127.0.0.1:9/nothing/here:1: not on this engine; its registry:" in result.stderr
    assert "Buildable here: cpu-torch2.13.0-py3.11-debian12-slim" in result.stderr
    assert "imagekit-preflight" not in docker("images", "--format", "{{.Repository}}").stdout


def test_bad_wheelhouse_fails_before_building(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = imagekit("build", "--envs", "envs", "--wheelhouse", str(tmp_path / "none"), cwd=root)
    assert result.returncode == 2 and "is not a directory" in result.stderr
    assert not (root / "reports").exists()


def test_ctrl_c_stops_the_build_and_leaves_no_tag(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p", repository="imagekit-interrupt")
    for ref in docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if "imagekit-interrupt" in ref:  # left by an earlier, failed run
            docker("rmi", ref)
    args = build_args(project / "ca-marked.pem", "--no-cache")
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=root,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # see each line as it is printed
        # As a shell that backgrounds a job starts it: SIGINT ignored. imagekit restores it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until BuildKit is in the long torch install step
        if ("[builder" in line and "torch==" in line) or time.monotonic() > deadline:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted" in rest
    images = docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout
    assert "imagekit-interrupt" not in images


def test_lock_pins_bases_from_a_real_registry(tmp_path: Path, project: Path) -> None:
    base = f"{REGISTRY}/debian:bookworm-slim"
    docker("tag", "debian:bookworm-slim", base)
    docker("push", base)
    root = make_project(tmp_path / "p")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(
        matrix.read_text().replace(
            "    source: ../app\n", f"    source: ../app\n    base: {base}\n"
        )
    )
    result = imagekit("lock", "--envs", "envs", cwd=root)
    assert result.returncode == 0, result.stderr
    pins = json.loads((root / "envs" / "images.lock").read_text())["images"]
    assert pins[base].startswith("sha256:")
    imagekit("render", "--envs", "envs", "--out", "df", cwd=root)
    dockerfile = next((root / "df").glob("*/Dockerfile")).read_text()
    assert f"FROM {base}@{pins[base]} AS os-base" in dockerfile


def test_keep_going_builds_the_rest_and_names_the_failed_cell(
    tmp_path: Path, project: Path
) -> None:
    # Python 3.12 on Debian 12 needs a uv-managed CPython, downloaded from GitHub: offline
    # here, so that cell really fails while the other one builds.
    broken = (
        '  - {cuda: cpu, torch: "2.13.0", python: "3.12", os: debian12, flavor: slim,'
        " installer: uv}\n"
    )
    root = make_project(tmp_path / "p")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("matrix:\n", "matrix:\n" + broken))
    result = imagekit(
        *build_args(
            project / "ca-marked.pem", "--keep-going", "--jobs", "2", "--progress", "quiet"
        ),
        cwd=root,
    )
    assert result.returncode == 6
    assert "of 2 cells, 1 failed: cpu-torch2.13.0-py3.12-debian12-slim" in result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith(CELL) and " built " in line for line in lines)
    assert "cpu-torch2.13.0-py3.12-debian12-slim failed:" in result.stdout
    assert "exit code" in result.stdout  # the tail of its log


# -- self-check in real containers ------------------------------------------------------


def test_selfcheck_passes_in_the_cpu_container(project: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    result = imagekit(
        "test",
        TAG,
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        cwd=project,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    functional = ("stack", "amp", "checkpoint", "compile", "ddp", "flash", "onnx", "int8")
    assert {n: checks[n]["status"] for n in functional} == dict.fromkeys(functional, "passed")
    # torch.compile works out of the box: the runtime carries g++ and the Python headers
    assert checks["compile"]["measurements"]["backend"] == "inductor"
    assert checks["int8"]["measurements"]["size_ratio_fp32_vs_int8"] > 3
    assert (
        checks["tensorrt"]["status"] == "skipped"
        and "tensorrt package is not installed" in checks["tensorrt"]["reason"]
    )
    assert (
        checks["ddp"]["measurements"]["backend"] == "gloo"
        and checks["ddp"]["measurements"]["world_size"] == 2
    )
    assert checks["onnx"]["measurements"]["provider_ran"] == "CPUExecutionProvider"
    assert "<testsuite" in (tmp_path / "r.xml").read_text()
    print(f"CPU self-check in a container: {elapsed:.1f}s")


def test_a_broken_promise_fails(project: Path) -> None:
    broken = f"{REGISTRY}/imagekit-test:broken-promise"
    container = docker("create", TAG).stdout.strip()
    docker("commit", "--change", 'LABEL io.imagekit.torch="2.7.1"', container, broken)
    docker("rm", container)
    result = imagekit("test", broken, "--checks", "stack", cwd=project)
    assert result.returncode == 8
    assert "label io.imagekit.torch promises torch 2.7.1, the image has torch 2.13.0" in (
        result.stdout  # the report first, on stdout
    )
    assert result.stderr.strip().splitlines()[-1] == (
        f"imagekit: error: the self-check of {broken} failed: stack (see the table above)"
    )
    docker("rmi", broken)


def test_a_hanging_check_times_out_and_the_others_run(project: Path) -> None:
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_SELFCHECK_FAULT=ddp-hang",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "ddp,flash",
        "--timeout",
        "20",
        check=False,
    )
    assert result.returncode == 1
    ddp = next(line for line in result.stdout.splitlines() if line.startswith("ddp"))
    assert "TIMEOUT" in ddp and "timed out after 20s" in ddp
    assert any(line.startswith("flash") and "PASSED" in line for line in result.stdout.splitlines())


def test_a_ddp_rank_that_dies_fails_the_check_without_waiting_for_its_limit(
    project: Path,
) -> None:
    started = time.monotonic()
    result = docker(
        "run", "--rm", "-e", "IMAGEKIT_SELFCHECK_FAULT=ddp-die", TAG,
        "python", "-m", "imagekit.selfcheck", "--checks", "ddp", check=False,
    )  # fmt: skip
    assert result.returncode == 1
    ddp = next(line for line in result.stdout.splitlines() if line.startswith("ddp"))
    assert "FAILED" in ddp and "rank 1 died with exit code 3" in ddp
    assert time.monotonic() - started < 60  # far below the check's 150 s limit


def test_a_crashing_check_reports_its_signal(project: Path) -> None:
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_SELFCHECK_FAULT=amp-crash",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "amp",
        check=False,
    )
    assert result.returncode == 1
    assert "crashed: killed by signal SIGSEGV (11)" in result.stdout


def test_an_image_without_the_self_check_is_refused_clearly(project: Path) -> None:
    result = imagekit("test", "debian:bookworm-slim", cwd=project)
    assert result.returncode == 2, result.stderr
    assert "has no imagekit self-check" in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("limit", [["--cpus", "1"], ["--cpuset-cpus", "0"]])
def test_threads_are_tuned_without_the_entrypoint(project: Path, limit: list[str]) -> None:
    """Kubernetes `command:`, `--entrypoint`, pyxis: the venv's Python sets the threads."""
    probe = "import os, torch; print(os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"
    out = run_in_image(*limit, "--entrypoint", "python", TAG, "-c", probe)
    assert out == "1 1"
    mine = run_in_image(
        *limit, "-e", "OMP_NUM_THREADS=2", "--entrypoint", "python", TAG, "-c", probe
    )
    assert mine == "2 2"  # a value the user set is kept


def test_threads_are_tuned_in_torchrun_workers_without_the_entrypoint(project: Path) -> None:
    script = (
        "import os, torch; print('omp', os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"
    )
    out = run_in_image(
        "--cpus", "1", "--entrypoint", "sh", TAG, "-c",
        f'echo "{script}" > /tmp/t.py && torchrun --nproc-per-node 1 /tmp/t.py',
    )  # fmt: skip
    assert "omp 1 1" in out.splitlines()


def test_stamp_marks_a_passing_image(project: Path) -> None:
    result = imagekit("test", TAG, "--checks", "stack,flash", "--stamp", cwd=project)
    assert result.returncode == 0, result.stderr
    labels = json.loads(docker("image", "inspect", f"{TAG}-validated").stdout)[0]["Config"][
        "Labels"
    ]
    assert labels["io.imagekit.validated"] == "true" and labels["io.imagekit.validated.on"] == "cpu"
    assert json.loads(labels["io.imagekit.selfcheck"]) == {
        "flash": {"device": "cpu", "status": "passed"},
        "stack": {"device": "cpu", "status": "passed"},
    }
    assert labels["io.imagekit.torch"] == "2.13.0"  # the image's own labels are kept


def test_a_cuda_image_given_gpus_that_torch_cannot_see_fails(project: Path) -> None:
    """The false green of a GPU host whose torch runs on the CPU: here GPUs were 'given'
    (IMAGEKIT_EXPECT_GPU=1, as `imagekit test --gpus` sets) to an image labelled CUDA."""
    labels = {"io.imagekit.cuda": "12.6", "io.imagekit.min-driver": "525.60.13"}
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_EXPECT_GPU=1",
        "-e",
        f"IMAGEKIT_LABELS={json.dumps(labels)}",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "stack",
        check=False,
    )
    assert result.returncode == 1
    stack = next(line for line in result.stdout.splitlines() if line.startswith("stack"))
    assert "FAILED" in stack and "torch runs on the CPU" in stack
    assert "no /dev/nvidia* devices" in stack and "nvidia-container-toolkit" in stack


def test_compile_without_a_compiler_fails_with_the_reason(project: Path) -> None:
    result = docker(
        "run", "--rm", "-e", "CXX=/usr/bin/no-such-g++", TAG,
        "python", "-m", "imagekit.selfcheck", "--checks", "compile", check=False,
    )  # fmt: skip
    assert result.returncode == 1
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("compile"))
    assert "FAILED" in line and "torch.compile failed" in line and "compiler" in line
