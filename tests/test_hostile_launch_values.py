"""Every launcher delivers values as written (issue 36, part 2): `--env` values and COMMAND
reach the program byte for byte on Kubernetes (TrainJob and JobSet), Slurm with Pyxis and
with Apptainer, and `imagekit test --nodes`.

Kubernetes manifests are read the way a cluster reads them: YAML into strings (PyYAML for
1.1, the 1.2 core schema's and Go's number rules for kubectl), then kubelet's `$(NAME)`
expansion, ported below from k8s.io/kubernetes third_party/forked/golang/expansion, and the
container's argv run against recording stand-ins. Slurm scripts run under bash against the
stand-ins of test_launch_run.py; `imagekit test --nodes` is read from the request the Docker
SDK would send.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.cli import cli
from imagekit.errors import UsageError
from imagekit.launch import render
from imagekit.launch.kubernetes import plain_is_safe

from .test_launch import CELL, pod_spec, run_main, spec_of
from .test_launch_run import argv_of, container_env, sbatch, stand_ins

# -- Kubernetes' expansion, ported -----------------------------------------------------------

OPERATOR, OPENER, CLOSER = ord("$"), ord("("), ord(")")
MappingFunc = Callable[[str], str]


def expand(text: str, mapping: MappingFunc) -> str:
    """Expand(input, mapping), byte for byte as Go indexes a string (UTF-8 bytes)."""
    data = text.encode("utf-8")
    out = bytearray()
    checkpoint = 0
    cursor = 0
    while cursor < len(data):
        if data[cursor] == OPERATOR and cursor + 1 < len(data):
            out += data[checkpoint:cursor]
            read, is_var, advance = try_read_variable_name(data[cursor + 1 :])
            out += mapping(read.decode("utf-8", "surrogateescape")).encode() if is_var else read
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return (bytes(out) + data[checkpoint:]).decode("utf-8", "surrogateescape")


def try_read_variable_name(data: bytes) -> tuple[bytes, bool, int]:
    """tryReadVariableName: what was read, whether it names a variable, bytes consumed."""
    if data[0] == OPERATOR:  # `$$`: the escaped operator
        return data[0:1], False, 1
    if data[0] == OPENER:
        for i in range(1, len(data)):
            if data[i] == CLOSER:
                return data[1:i], True, i + 1
        return b"$(", False, 1  # an incomplete reference, as written
    # Go's string(input[0]) makes the byte a rune of that number: the first byte of a
    # multi-byte character comes out as another character (`$é` is mangled).
    return b"$" + chr(data[0]).encode("utf-8"), False, 1


def mapping_func_for(*contexts: Mapping[str, str]) -> MappingFunc:
    """MappingFuncFor: the first context that defines the name, else `$(NAME)` as written."""

    def mapping(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"$({name})"

    return mapping


class EveryName(Mapping[str, str]):
    """A context that defines every name: the strictest world for a value to survive."""

    def __getitem__(self, name: str) -> str:
        return f"<{name}>"

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)$(VAR_B)", "AB"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$$(VAR_A)", "$(VAR_A)"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("$(VAR_A", "$(VAR_A"),
        ("$VAR_A", "$VAR_A"),
        ("$", "$"),
        ("$$", "$"),
        ("foo$", "foo$"),
        ("$()", "$()"),
        ("x$(PET_NNODES)y", "x2y"),  # the issue's: what an unescaped value became
        ("$$literal", "$literal"),
        ("$é", "$\u00c3\udca9"),  # Go's byte-as-rune: another reason to double every `$`
    ],
)
def test_the_port_expands_as_kubernetes_does(text: str, want: str) -> None:
    mapping = mapping_func_for({"VAR_A": "A", "VAR_B": "B", "PET_NNODES": "2"})
    assert expand(text, mapping) == want


# -- reading a manifest as a cluster does ----------------------------------------------------

RANK = "1"  # this pod's completion index
INTS = {"numNodes", "numProcPerNode", "parallelism", "completions", "backoffLimit", "replicas"}
INTS |= {"maxRestarts", "containerPort"}


def trainer_env(doc: dict[str, Any]) -> dict[str, str]:
    """What the Trainer injects into a TrainJob's pods (kubelet sees it as container env)."""
    nodes = str(doc["spec"]["trainer"]["numNodes"])
    procs = str(doc["spec"]["trainer"]["numProcPerNode"])
    master = f"{doc['metadata']['name']}-node-0-0.{doc['metadata']['name']}"
    return {
        "PET_NNODES": nodes, "PET_NPROC_PER_NODE": procs, "PET_NODE_RANK": RANK,
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": "29500",
    }  # fmt: skip


def kubelet_env(entries: list[dict[str, Any]], *given: Mapping[str, str]) -> dict[str, str]:
    """makeEnvironmentVariables: each value expanded with the variables before it and the
    ones given (service links, the Trainer's); valueFrom (the rank) is not expanded."""
    env: dict[str, str] = {}
    for entry in entries:
        if entry.get("value"):
            env[entry["name"]] = expand(entry["value"], mapping_func_for(env, *given))
        else:
            env[entry["name"]] = RANK if "valueFrom" in entry else ""
    return env


def kubelet_view(doc: dict[str, Any], given: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The container's environment and argv as kubelet starts it; `given` defines more names
    (EveryName: all of them)."""
    injected: dict[str, str] = {}
    if doc["kind"] == "TrainJob":
        fields = doc["spec"]["trainer"]
        injected = trainer_env(doc)
    else:
        fields = pod_spec(doc)["containers"][0]
    env = {**injected, **kubelet_env(fields.get("env", []), injected, given)}
    mapping = mapping_func_for(env, given)  # ExpandContainerCommandAndArgs: the final env
    argv = [expand(word, mapping) for word in [*fields.get("command", []), *fields["args"]]]
    return env, argv


def strings_are_strings(doc: Any, key: str = "", parent: str = "") -> None:
    """Every leaf a string after loading, but the counts (ints) and enableDNSHostnames."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            assert isinstance(k, str), k
            strings_are_strings(v, k, key)
    elif isinstance(doc, list):
        for item in doc:
            strings_are_strings(item, key, parent)
    elif key in INTS or parent in ("limits", "requests"):
        assert type(doc) is int, (key, doc)
    elif key == "enableDNSHostnames":
        assert doc is True
    else:
        assert isinstance(doc, str), (key, doc)


# YAML 1.2.2's core schema (10.3.2), which kubectl's reader follows for what is not a string,
# and Go's strconv (ParseInt base 0, ParseFloat) that it uses for numbers.
CORE_NOT_STR = re.compile(
    r"null|Null|NULL|~|true|True|TRUE|false|False|FALSE"
    r"|[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
    r"|[-+]?(\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN"
)


def read_as_number_by_go(text: str) -> bool:
    if not text[:1] or text[0] not in "0123456789+-.":
        return False
    plain = text.replace("_", "")
    for parse in (lambda t: int(t, 0), float, float.fromhex):
        try:
            parse(plain)
        except ValueError:
            continue
        return True
    return False


def plain_scalars(text: str) -> Iterator[str]:
    """The scalars written without quotes (PyYAML's str tag) anywhere in the manifest."""
    stack = [yaml.compose(text)]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.style is None and node.tag == "tag:yaml.org,2002:str":
                yield node.value
        elif isinstance(node, yaml.MappingNode):
            stack += [part for pair in node.value for part in pair]
        else:
            stack += node.value


def read_like_a_cluster(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)  # YAML 1.1 (PyYAML), with every string a str
    strings_are_strings(doc)
    for word in plain_scalars(text):  # YAML 1.2 and Go would read the same strings
        assert not CORE_NOT_STR.fullmatch(word) and not read_as_number_by_go(word), word
    assert isinstance(doc, dict)
    return doc


# -- running what kubelet starts -------------------------------------------------------------


def run_container(folder: Path, env: dict[str, str], argv: list[str]) -> Path:
    """Start the container's argv (the script, then torchrun) with the stand-ins on PATH."""
    tools = stand_ins(folder)
    record = folder / "record"
    record.mkdir()
    full = {**env, "PATH": f"{tools}:/usr/bin:/bin", "RECORD": str(record)}
    result = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return record


def delivered(record: Path) -> tuple[list[str], dict[str, str]]:
    """torchrun's arguments and environment, as the program got them."""
    (args,) = argv_of(record, "torchrun")
    return args, container_env(record, "torchrun")


# -- the issue's example ---------------------------------------------------------------------

ISSUE_ENV = ("IK_A=x$(PET_NNODES)y", "IK_B=$$literal", "hostname=evil")
ISSUE_COMMAND = ("train.py", "--tag", "$(PET_NODE_RANK)", "$$literal", "$(hostname)")


def issue_manifest(kind: str) -> str:
    args = [
        "launch", "--scheduler", "kubernetes", "--kind", kind, "--nodes", "2",
        "--gpus-per-node", "8", "--profile", "multi-node-ethernet", "--cell", CELL,
        *[x for env in ISSUE_ENV for x in ("--env", env)], "--", *ISSUE_COMMAND,
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_the_issues_values_reach_the_pod_as_written(kind: str, tmp_path: Path) -> None:
    doc = read_like_a_cluster(issue_manifest(kind))
    env, argv = kubelet_view(doc, {})  # the names the pod really defines
    assert env["PET_NNODES"] == "2"
    assert env["IK_A"] == "x$(PET_NNODES)y" and env["IK_B"] == "$$literal"
    assert argv[-5:] == list(ISSUE_COMMAND)
    # Unescaped, Kubernetes would have rewritten them:
    assert expand("x$(PET_NNODES)y", mapping_func_for(env)) == "x2y"
    assert expand("$(hostname)", mapping_func_for(env)) == "evil"
    args, got = delivered(run_container(tmp_path, env, argv))
    assert args == list(ISSUE_COMMAND)
    assert (got["IK_A"], got["IK_B"], got["hostname"]) == ("x$(PET_NNODES)y", "$$literal", "evil")


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_the_container_script_survives_a_variable_named_like_its_commands(kind: str) -> None:
    # `$(hostname)` in the script is bash's; an env var `hostname` must not replace it.
    doc = read_like_a_cluster(render(spec_of(kind=kind, env=("hostname=evil",))))
    _, argv = kubelet_view(doc, EveryName())
    assert "$(hostname) is node ${PET_NODE_RANK}" in argv[2]
    assert 'exec torchrun "$@"' in argv[2] and "<" not in argv[2]


# -- the property: every launcher, generated values ------------------------------------------

CONTROL = "".join(map(chr, [*range(0x20), 0x7F]))
HOSTILE = [
    "'", '"', "$", "$(", "$$", "$(PET_NNODES)", "$(PET_NODE_RANK)", "$(hostname)", "${HOME}",
    "$HOME", "`id`", "\\", "\\n", ",", "=", " ", "-", "--x", "yes", "no", "on", "null", "Null",
    "~", "0o17", "1e3", "0x1F", "+1", "1_000", ".inf", "2001-12-14", "12:30", "<<", "#", ": ",
    "- ", "*a", "&a", "!t", "%", "@", "|", ">", "{", "[", "é", "€", "日本", "😀", "\u00a0",
    "\u0085", "\u2028", "\ufeff", "\u202e", "\u200d", "\ue000", "\U000e0001", "\U0010fffd",
    "IMAGEKIT_ENV", "EOF",
]  # fmt: skip
TEXT = st.characters(codec="utf-8", exclude_characters=CONTROL)
PIECE = st.one_of(st.sampled_from(HOSTILE), st.text(TEXT, max_size=3))
VALUE = st.lists(PIECE, max_size=6).map("".join)
# A COMMAND word may also hold control characters (a newline, a tab, \r\n); not NUL.
WORD_PIECE = st.one_of(PIECE, st.sampled_from(["\n", "\r\n", "\t", "\x1b[0m", "\x7f", "\x01"]))
WORD = st.lists(WORD_PIECE, max_size=5).map("".join)
# Names the scripts once used for their own variables (prefix, node, ...) among them.
NAMES = st.sampled_from(
    ["IK_A", "IK_B", "hostname", "prefix", "node", "head_node", "preflight", "sif", "name"]
)
ENV = st.dictionaries(NAMES, VALUE, max_size=3)
COMMAND = st.lists(WORD, min_size=1, max_size=4)


def printable_lines(text: str) -> str:
    """The file as `imagekit launch` prints it: no line holds a character the terminal output
    (imagekit/terminal.py) would escape, so what is printed is what --out writes."""
    assert all(line.isprintable() for line in text.split("\n")), [
        line for line in text.split("\n") if not line.isprintable()
    ]
    return text


def env_args(env: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"{name}={value}" for name, value in env.items())


def check_delivery(record: Path, env: dict[str, str], command: list[str], args: list[str]) -> None:
    """The program's arguments are COMMAND, and every --env value is in its environment."""
    assert args == command
    got = container_env(record, "torchrun")
    assert {name: got.get(name) for name in env} == env


@pytest.mark.subprocess
@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["trainjob", "jobset"]), env=ENV, command=COMMAND)
def test_kubernetes_delivers_values_byte_for_byte(
    kind: str, env: dict[str, str], command: list[str]
) -> None:
    spec = spec_of(kind=kind, env=env_args(env), command=tuple(command), nodes=2)
    doc = read_like_a_cluster(printable_lines(render(spec)))
    # Every name defined: a `$(NAME)` left unescaped anywhere would be replaced.
    pod_env, argv = kubelet_view(doc, EveryName())
    assert argv[3:] == ["imagekit-launch", *command]
    assert {name: pod_env[name] for name in env} == env
    with tempfile.TemporaryDirectory() as folder:
        record = run_container(Path(folder), pod_env, argv)
        args, _ = delivered(record)
        check_delivery(record, env, command, args)


@pytest.mark.subprocess
@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["pyxis", "apptainer"]), env=ENV, command=COMMAND)
def test_slurm_delivers_values_byte_for_byte(
    kind: str, env: dict[str, str], command: list[str]
) -> None:
    spec = spec_of(
        scheduler="slurm", kind=kind, profile="multi-node-ethernet", shm_size="1Mi", nodes=2,
        env=env_args(env), command=tuple(command),
    )  # fmt: skip
    text = printable_lines(render(spec))
    assert "\r\n" not in text  # sbatch refuses a script with a DOS line break
    with tempfile.TemporaryDirectory() as folder:
        submit = Path(folder) / "submit"
        submit.mkdir()
        record = sbatch(Path(folder), text, submit)
        args, _ = delivered(record)
        assert args[:5] == [
            "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
            "--rdzv-endpoint=node-1:29500", "--rdzv-id=4242",
        ]  # fmt: skip
        check_delivery(record, env, command, args[5:])
        got = container_env(record, "python")  # and the self-check's environment
        assert {name: got[name] for name in env} == env


# -- what no launcher can carry is refused ---------------------------------------------------


@pytest.mark.parametrize("char", list(CONTROL))
def test_an_env_value_with_a_control_character_is_refused(char: str) -> None:
    with pytest.raises(UsageError, match="control character; one line"):
        spec_of(env=(f"IK_A=a{char}b",))


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x1bb", "a\x85b", "a\u2028b"])
def test_the_cli_refuses_a_control_character_in_env_naming_the_option(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--scheduler", "slurm", "--nodes", "1", "--gpus-per-node", "0"]
    code, out = run_main([*argv, "--cell", CELL, "--env", f"IK_A={value}", "--", "t.py"], capsys)
    assert code == 2 and "--env" in out, out


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"command": ("t.py", "a\0b")}, ["COMMAND word 2", "NUL"]),
        ({"command": ("t.py", "x", "\udcff")}, ["COMMAND word 3", "not UTF-8"]),
        ({"env": ("IK_A=\udcff",)}, ["--env IK_A=...", "not UTF-8"]),
    ],
)
def test_what_no_launcher_can_carry_is_refused(changes: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        spec_of(**changes)
    for word in words:
        assert word in str(info.value)


def test_a_command_with_control_characters_is_written_on_one_line() -> None:
    command = ("t.py", "a\nb", "c\r\nd", "e\tf'\\", "\u202e1", "ü")
    text = printable_lines(render(spec_of(scheduler="slurm", command=command)))
    want = "  t.py $'a\\x0ab' $'c\\x0d\\x0ad' $'e\\x09f\\'\\\\' $'\\xe2\\x80\\xae1' 'ü'\n"
    assert want in text


@pytest.mark.parametrize("name", ["imagekit_x", "IMAGEKIT_LAUNCHER", "Imagekit_head_node"])
def test_the_scripts_own_variable_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="launch script's variables are imagekit_"):
        spec_of(scheduler="slurm", env=(f"{name}=1",))


@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
def test_every_variable_the_script_sets_is_imagekit_s(kind: str) -> None:
    # What bash assigns (NAME=, read NAME, for NAME) in the script, the preflight and the drain.
    text = render(spec_of(scheduler="slurm", kind=kind, drain_on_fail=True, env=("IK_A=1",)))
    statements = [line for line in text.splitlines() if re.match(r"\s*\w+=", line)]
    names = {n for line in statements for n in re.findall(r"(?:^|\s)(\w+)=", line)}
    names |= set(re.findall(r"read -r (?:-a|-d '') (\w+)", text))
    names |= set(re.findall(r"\bfor (\w+) in", text))
    assert names and all(n.startswith("imagekit_") for n in names), names


@pytest.mark.parametrize(
    "word",
    ["yes", "No", "ON", "y", "null", "~", "", "0o17", "1e3", "0x1F", "+1", "1_000", ".inf",
     "-.5", "2001-12-14", "12:30:00", "<<", "=", "3e-4", "10", ".NaN", "-inf", "+Infinity"],
)  # fmt: skip
def test_no_typed_word_is_written_plain(word: str) -> None:
    assert not plain_is_safe(word)
    doc = read_like_a_cluster(render(spec_of(kind="jobset", command=("t.py", word))))
    assert pod_spec(doc)["containers"][0]["args"][-1] == word


# -- imagekit test --nodes -------------------------------------------------------------------


class Sent(Exception):
    """Raised by the stand-in API call with the container config it was given."""


@settings(max_examples=60, deadline=None)
@given(env=ENV)
def test_imagekit_test_nodes_sends_values_as_written(env: dict[str, str]) -> None:
    """The Docker SDK's create call (exec form command, Env as NAME=VALUE split at the first
    `=` by the engine): nothing in between is a shell."""
    command, config = nodes_create_config(env)
    sent = dict(item.split("=", 1) for item in config["Env"])
    assert {name: sent[name] for name in env} == env
    assert config["Cmd"] == command and config.get("Entrypoint") is None


def nodes_create_config(env: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
    """The plan's command for node 1, and the container config DockerEngine.start sends."""
    import docker

    from imagekit.engine.docker import DockerEngine
    from imagekit.imagetest.nodes_plan import NodesOptions, plan

    with tempfile.TemporaryDirectory() as folder:
        run = plan({}, NodesOptions(nodes=2, env=env), False, "0a1b2c3d", Path(folder))
    engine = DockerEngine()
    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")

    def capture(config: dict[str, Any], *args: object, **kwargs: object) -> None:
        raise Sent(config)

    client.api.create_container_from_config = capture
    engine._client = client
    with pytest.raises(Sent) as info:
        engine.start("img:1", run.nodes[1].command, run.nodes[1].options)
    config: dict[str, Any] = info.value.args[0]
    return list(run.nodes[1].command), config
