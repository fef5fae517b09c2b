"""The engine record (issue 50): `.ci/engines.sh start` writes engine.env, and a new shell's
imagekit uses that engine's client with no `eval`. The reading and the choice are pure over
tmp files; one test runs the script's own writer (bash, no engine) against the reader."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.engine import discover
from imagekit.engine.discover import (
    Choice,
    Recorded,
    choose,
    daemon_hint,
    parse_record,
    read_record,
    record_path,
    unusable,
    usable_record,
)

from .conftest import ROOT

RECORD = """\
# a comment line
IMAGEKIT_ENGINE=containerd
IMAGEKIT_DOCKER=/opt/imagekit-engines/docker28/usr/bin/docker
DOCKER_HOST=unix:///var/run/docker.sock
DOCKER_CONFIG=/var/lib/imagekit-engines/docker28-cli
"""


def recorded(docker: str = "/x/docker", host: str = "unix:///s.sock", config: str = "") -> Recorded:
    return Recorded(Path("/etc/imagekit/engine.env"), "containerd", docker, host, config)


@pytest.fixture
def client(tmp_path: Path) -> str:
    """An executable standing in for the recorded docker CLI (never run here)."""
    path = tmp_path / "docker"
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[str]:
    """A unix socket that accepts connections: an engine that answers."""
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(1)
        yield f"unix://{path}"


# -- the file ---------------------------------------------------------------------------------
def test_the_record_is_parsed_key_by_key() -> None:
    record = parse_record(RECORD, Path("/r"))
    assert record == Recorded(
        Path("/r"),
        "containerd",
        "/opt/imagekit-engines/docker28/usr/bin/docker",
        "unix:///var/run/docker.sock",
        "/var/lib/imagekit-engines/docker28-cli",
    )
    assert record.environment() == {
        "IMAGEKIT_ENGINE": "containerd",
        "IMAGEKIT_DOCKER": "/opt/imagekit-engines/docker28/usr/bin/docker",
        "DOCKER_HOST": "unix:///var/run/docker.sock",
        "DOCKER_CONFIG": "/var/lib/imagekit-engines/docker28-cli",
    }


def test_shell_quoted_values_and_an_empty_config_are_read_as_the_shell_would() -> None:
    # printf %q's quoting: a path with a space, and '' for Docker 20.10's default config
    text = "IMAGEKIT_DOCKER=/opt/my\\ engines/docker\nDOCKER_HOST=unix:///s\nDOCKER_CONFIG=''\n"
    record = parse_record(text, Path("/r"))
    assert record.docker == "/opt/my engines/docker" and record.config == ""
    assert "DOCKER_CONFIG" not in record.environment()  # the CLI's own default folder


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("IMAGEKIT_DOCKER=/d\nDOCKER_HOST=unix:///s\nPATH=/evil\n", "line 3 ('PATH=/evil') is not"),
        ("IMAGEKIT_DOCKER=/d\njust words\n", "line 2 ('just words') is not"),
        ("IMAGEKIT_DOCKER=/a /b\nDOCKER_HOST=unix:///s\n", "line 1: IMAGEKIT_DOCKER's value"),
        ("IMAGEKIT_DOCKER='/d\nDOCKER_HOST=unix:///s\n", "No closing quotation"),
        ("DOCKER_HOST=unix:///s\n", "no IMAGEKIT_DOCKER"),
        ("", "no IMAGEKIT_DOCKER and no DOCKER_HOST"),
    ],
)
def test_a_malformed_record_says_which_line(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_record(text, Path("/r"))
    assert needle in str(info.value)


def test_a_missing_record_is_silent_and_a_broken_one_has_a_note(tmp_path: Path) -> None:
    assert read_record(tmp_path / "none.env") == (None, "")
    broken = tmp_path / "engine.env"
    broken.write_text("nonsense\n")
    record, note = read_record(broken)
    assert record is None and note.startswith(f"the engine record {broken} is not engines.sh's")
    broken.write_bytes(b"IMAGEKIT_DOCKER=\xff\n")
    assert read_record(broken)[0] is None
    broken.write_text("# " + "x" * discover.RECORD_LIMIT)
    assert "over 65536 bytes" in read_record(broken)[1]


NOT_REGULAR = "not a regular file (a FIFO, a device or a folder)"


@pytest.mark.subprocess
@pytest.mark.timeout(20)
def test_a_fifo_a_folder_or_a_device_at_the_record_path_is_ignored_with_a_note(
    tmp_path: Path,
) -> None:
    """Opened non-blocking and checked before a byte is read: a FIFO would hang every
    command (open blocks until a writer comes), /dev/zero would never end."""
    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.env"
    folder.mkdir()
    device = tmp_path / "zero.env"
    device.symlink_to("/dev/zero")
    for path in (fifo, folder, device):
        assert read_record(path) == (
            None,
            f"the engine record {path} cannot be read: {NOT_REGULAR}; ignored",
        )
    choice = choose(None, {}, lambda: usable_record({"IMAGEKIT_ENGINE_FILE": str(fifo)}))
    assert choice.cli is None and choice.source == "PATH"
    assert NOT_REGULAR in choice.note and choice.note.endswith("using the docker CLI on PATH")
    # a whole process that reads the record (as every command does) ends
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("IMAGEKIT_DOCKER", *discover.EXPLICIT)}
    code = "from imagekit.engine.discover import engine_choice as c; print(c().note)"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**env, "IMAGEKIT_ENGINE_FILE": str(fifo)},
        capture_output=True, text=True, timeout=15, check=True,
    )  # fmt: skip
    assert NOT_REGULAR in done.stdout, done.stderr


def test_where_the_record_is_looked_for(tmp_path: Path) -> None:
    named = {"IMAGEKIT_ENGINE_FILE": "/somewhere/e.env", "HOME": str(tmp_path)}
    assert record_path(named) == Path("/somewhere/e.env")
    home = {"HOME": str(tmp_path)}
    assert record_path(home) == discover.SYSTEM_RECORD  # no user's own file: /etc's
    own = tmp_path / ".config" / "imagekit" / "engine.env"
    own.parent.mkdir(parents=True)
    own.write_text(RECORD)
    assert record_path(home) == own
    xdg = tmp_path / "xdg" / "imagekit" / "engine.env"
    xdg.parent.mkdir(parents=True)
    xdg.write_text(RECORD)
    assert record_path({**home, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == xdg


# -- stale or usable --------------------------------------------------------------------------
def test_a_record_whose_client_is_gone_or_whose_socket_is_silent_is_stale(
    client: str, listening: str, tmp_path: Path
) -> None:
    assert unusable(recorded(client, listening)) == ""
    assert unusable(recorded(str(tmp_path / "gone"), listening)) == (
        f"its client {tmp_path / 'gone'} is gone"
    )
    assert unusable(recorded("docker", listening)) == "its client docker is gone"  # not a path
    silent = f"unix://{tmp_path / 'nobody.sock'}"
    assert unusable(recorded(client, silent)) == f"nothing answers on {silent}"
    assert unusable(recorded(client, "ssh://me@host"), answers=lambda host: True) == ""


def test_socket_answers_reads_unix_and_tcp_hosts(listening: str) -> None:
    assert discover.socket_answers(listening)
    assert not discover.socket_answers("unix:///nonexistent/docker.sock")
    assert not discover.socket_answers("tcp://127.0.0.1:notaport")
    assert discover.socket_answers("ssh://me@host")  # left to the CLI


def test_a_stale_record_is_passed_over_with_a_note_never_an_error(
    tmp_path: Path, listening: str
) -> None:
    path = tmp_path / "engine.env"
    path.write_text(
        f"IMAGEKIT_ENGINE=classic\nIMAGEKIT_DOCKER={tmp_path}/gone\nDOCKER_HOST={listening}\n"
    )
    record, note = usable_record({"IMAGEKIT_ENGINE_FILE": str(path)})
    assert record is None
    assert note == (
        f"the engine record {path} (classic) is stale: its client {tmp_path}/gone is gone; "
        "using the docker CLI on PATH"
    )


def test_a_usable_record_is_returned(tmp_path: Path, client: str, listening: str) -> None:
    path = tmp_path / "engine.env"
    path.write_text(f"IMAGEKIT_DOCKER={client}\nDOCKER_HOST={listening}\n")
    record, note = usable_record({"IMAGEKIT_ENGINE_FILE": str(path)})
    assert note == "" and record is not None and record.docker == client


# -- the order --------------------------------------------------------------------------------
def never() -> tuple[Recorded | None, str]:
    raise AssertionError("the record was read where something before it decided")


@pytest.mark.parametrize(
    ("chosen", "env", "cli", "source"),
    [
        ("/my/docker", {"IMAGEKIT_DOCKER": "/env/docker"}, "/my/docker", "--docker"),
        (
            None,
            {"IMAGEKIT_DOCKER": "/env/docker", "DOCKER_HOST": "x"},
            "/env/docker",
            "$IMAGEKIT_DOCKER",
        ),
        (
            None,
            {"DOCKER_HOST": "tcp://h:2375"},
            None,
            "PATH ($DOCKER_HOST is set, so no engine record is read)",
        ),
        (
            None,
            {"DOCKER_CONFIG": "/c"},
            None,
            "PATH ($DOCKER_CONFIG is set, so no engine record is read)",
        ),
        (
            None,
            {"DOCKER_CONTEXT": "rootless"},
            None,
            "PATH ($DOCKER_CONTEXT is set, so no engine record is read)",
        ),
    ],
)
def test_what_the_user_chose_comes_before_the_record(
    chosen: str | None, env: dict[str, str], cli: str | None, source: str
) -> None:
    assert choose(chosen, env, never) == Choice(cli, source)


def test_the_record_comes_before_path() -> None:
    record = recorded("/opt/d/docker", "unix:///var/run/docker.sock", "/var/lib/cli")
    choice = choose(None, {}, lambda: (record, ""))
    assert choice.cli == "/opt/d/docker"
    assert choice.source == "containerd recorded in /etc/imagekit/engine.env"
    assert choice.env == record.environment() and choice.note == ""


def test_no_record_or_a_stale_one_is_path_with_its_note() -> None:
    assert choose(None, {}, lambda: (None, "")) == Choice(None, "PATH")
    assert choose(None, {}, lambda: (None, "stale")) == Choice(None, "PATH", note="stale")


def test_adopting_sets_what_the_readme_eval_set_and_says_a_note_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("IMAGEKIT_DOCKER", "IMAGEKIT_ENGINE", "DOCKER_HOST", "DOCKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(discover, "_NOTED", set())
    record = recorded("/opt/d/docker", "unix:///var/run/docker.sock", "/var/lib/cli")
    discover.adopt(Choice(record.docker, "r", record.environment()))
    assert os.environ["IMAGEKIT_DOCKER"] == "/opt/d/docker"
    assert os.environ["DOCKER_CONFIG"] == "/var/lib/cli"
    # adopted, the next choice is the same client, by $IMAGEKIT_DOCKER
    assert discover.engine_choice().cli == "/opt/d/docker"
    discover.adopt(Choice(None, "PATH", note="the record is stale"))
    discover.adopt(Choice(None, "PATH", note="the record is stale"))
    assert capsys.readouterr().err == "imagekit: the record is stale\n"


def test_the_daemon_hint_names_the_recorded_engine_to_start(tmp_path: Path) -> None:
    path = tmp_path / "engine.env"
    path.write_text(RECORD)
    env = {"IMAGEKIT_ENGINE_FILE": str(path)}
    hint = daemon_hint(env)
    assert hint.startswith("cannot reach the Docker daemon at unix:///var/run/docker.sock")
    assert hint.endswith(
        f"{path} says .ci/engines.sh started containerd there: "
        "`sudo bash .ci/engines.sh start containerd` in imagekit's checkout"
    )
    # another daemon asked for: the record is not about it
    other = daemon_hint({**env, "DOCKER_HOST": "tcp://h:2375"})
    assert "engines.sh" not in other and "at tcp://h:2375" in other


# -- the writer (.ci/engines.sh) and the reader agree -------------------------------------------
@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("engine", "docker", "config"),
    [
        ("containerd", "/p/docker28/usr/bin/docker", "/s/docker28-cli"),
        ("classic", "/p/docker28/usr/bin/docker", "/s/docker28-cli"),
        ("docker20", "/usr/bin/docker", ""),
    ],
)
def test_engines_sh_writes_the_record_imagekit_reads(
    tmp_path: Path, engine: str, docker: str, config: str
) -> None:
    path = tmp_path / "conf" / "engine.env"
    env = {
        **os.environ,
        "IMAGEKIT_ENGINE_FILE": str(path),
        "IMAGEKIT_ENGINES_PREFIX": "/p",
        "IMAGEKIT_ENGINES_STATE": "/s",
    }
    script = f"source {ROOT / '.ci/engines.sh'} && write_record {engine}"
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # every user's imagekit reads it
    assert not path.with_name("engine.env.tmp").exists()
    assert parse_record(path.read_text(), path) == Recorded(
        path, engine, docker, "unix:///var/run/docker.sock", config
    )
    assert f"recorded {engine} in {path}" in done.stderr


# -- on the real engines (the lead's suite): a new shell, no eval -------------------------------
@pytest.mark.docker
def test_a_new_shell_uses_the_client_of_the_engine_engines_sh_started(tmp_path: Path) -> None:
    import sys

    engines = ["bash", str(ROOT / ".ci/engines.sh")]
    engine = subprocess.run([*engines, "current"], capture_output=True, text=True, check=True)
    if not engine.stdout.strip():
        pytest.skip("none of .ci/engines.sh's engines runs (bash .ci/engines.sh start containerd)")
    record = tmp_path / "engine.env"
    # the record `start` writes, here in a file of the test's own (engines.sh record: no restart)
    named = {**os.environ, "IMAGEKIT_ENGINE_FILE": str(record)}
    subprocess.run([*engines, "record"], env=named, capture_output=True, check=True)
    # a new login shell: Debian's PATH (its 20.10 client first), nothing of the README's eval
    shell = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    shell["IMAGEKIT_ENGINE_FILE"] = str(record)
    code = "from imagekit.engine.discover import find_builder as f; b = f(); print(b.cli, b.kind)"
    found = subprocess.run(
        [sys.executable, "-c", code], env=shell, capture_output=True, text=True, check=True
    )
    client = parse_record(record.read_text(), record).docker
    kind = "buildkit" if engine.stdout.strip() == "docker20" else "buildx"
    assert found.stdout.split() == [client, kind], found.stderr
