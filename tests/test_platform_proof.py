"""An image's platform proven from its own files (issue 49): ELF machines and wheel tags read
from the first bytes of files, a layer stack read as the engine would unpack it (whiteouts,
opaque folders, links on the way), and the proof's verdict over each kind of image."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
import zstandard

from imagekit.builder.platform_proof import elf_machine, prove, wheel_machines
from imagekit.engine.fake import elf_head, fake_root
from imagekit.engine.image_files import Entry, LayerScan, TarIndex, resolve, scan_layer
from imagekit.engine.image_registry import _decompressing
from imagekit.platforms import AMD64, ARM64


def elf(machine: int, order: str = "little", bits: int = 2) -> bytes:
    data = 1 if order == "little" else 2
    return b"\x7fELF" + bytes([bits, data, 1]) + bytes(11) + machine.to_bytes(2, order)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("head", "machine"),
    [
        (elf(62), "x86_64"),
        (elf(183), "aarch64"),
        (elf(3, bits=1), "i386"),
        (elf(40, bits=1), "arm"),
        (elf(21, "big"), "ppc64"),
        (elf(22, "big"), "s390x"),
        (elf(243), "riscv64"),
        (elf(9999), "ELF machine 9999"),
        (elf(183)[:19], None),  # too short to hold e_machine
        (b'#!/bin/sh\nexec python3 "$@"\n' + bytes(40), None),
        (b"", None),
    ],
)
def test_the_elf_machine_is_read_from_the_header_in_its_byte_order(
    head: bytes, machine: str | None
) -> None:
    assert elf_machine(head) == machine


@pytest.mark.parametrize(
    ("wheel", "machines"),
    [
        ("Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_aarch64\n", ["aarch64"]),
        ("Tag: cp311-cp311-linux_x86_64\n", ["x86_64"]),
        (
            "Tag: cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64\n",
            ["x86_64"],
        ),
        (
            "Tag: cp312-cp312-manylinux_2_28_aarch64\nTag: cp312-cp312-linux_x86_64\n",
            ["aarch64", "x86_64"],
        ),
        ("Tag: py3-none-any\n", []),
        ("Generator: bdist_wheel\nRoot-Is-Purelib: false\n", []),
    ],
)
def test_a_wheels_machines_come_from_its_tag_lines(wheel: str, machines: list[str]) -> None:
    assert wheel_machines(wheel) == machines


def test_an_image_of_its_own_platform_is_proven_by_each_file() -> None:
    for platform in (AMD64, ARM64):
        proof = prove(platform, fake_root(platform), "3.11")
        assert proof.ok and proof.problem() == ""
        assert [c.what for c in proof.checks] == [
            "the OS's shell, /bin/sh",
            "the venv's Python",
            "torch's native code",
            "torch's wheel tag",
        ]
        assert proof.checks[0].path == "/usr/bin/dash"  # /bin -> usr/bin, sh -> dash


def test_an_arm64_config_over_x86_64_files_fails_naming_each_file_and_both_machines() -> None:
    proof = prove(ARM64, fake_root(AMD64), "3.11")
    assert not proof.ok and len(proof.failures) == 4
    text = proof.problem()
    assert text.startswith("the linux/arm64 image's files are not linux/arm64's: ")
    assert "/usr/bin/dash (the OS's shell, /bin/sh) is x86_64, not aarch64" in text
    assert "/usr/bin/python3.11 (the venv's Python) is x86_64, not aarch64" in text
    assert "torch-2.13.0+cpu.dist-info/WHEEL (torch's wheel tag) is x86_64, not aarch64" in text
    assert "--bootstrap-base" in text and "never push or promote" in text
    assert proof.as_list()[0] == {
        "what": "the OS's shell, /bin/sh",
        "path": "/usr/bin/dash",
        "found": "x86_64",
        "expected": "aarch64",
        "ok": False,
    }


def index(*entries: Entry) -> TarIndex:
    return TarIndex([LayerScan({e.path: e for e in entries}, set(), set())])


def test_one_package_of_another_platform_is_enough_to_fail() -> None:
    good = fake_root(ARM64)
    cuda = Entry(
        "/opt/imagekit/cuda/nvidia/cublas/lib/libcublas.so.12", "file", head=elf_head(AMD64)
    )
    link = Entry(
        "/opt/venv/lib/python3.11/site-packages/nvidia", "link", "/opt/imagekit/cuda/nvidia"
    )
    files = TarIndex(
        [
            LayerScan({e.path: e for e in (cuda, link)}, set(), set()),
            *[LayerScan(dict(good.entries), set(), set())],
        ]
    )
    proof = prove(ARM64, files, "3.11")
    (failed,) = proof.failures
    assert failed.what == "the CUDA libraries" and failed.path == cuda.path  # through the link
    assert failed.found == "x86_64"


def test_an_os_stage_is_proven_by_its_shell_and_the_oss_python() -> None:
    files = index(
        Entry("/bin/sh", "link", target="dash"),
        Entry("/bin/dash", "file", head=elf_head(ARM64)),
        Entry("/usr/bin/python3", "link", target="python3.11"),
        Entry("/usr/bin/python3.11", "file", head=elf_head(ARM64)),
    )
    proof = prove(ARM64, files, "3.11")
    assert proof.ok and [c.what for c in proof.checks] == [
        "the OS's shell, /bin/sh",
        "the OS's Python",
    ]


def test_an_image_with_nothing_to_read_is_not_proven() -> None:
    proof = prove(ARM64, index(Entry("/etc/os-release", "file", head=b"NAME=x")), "3.11")
    assert not proof.ok and "has none of the files that prove its platform" in proof.problem()


def test_a_shell_that_is_not_an_elf_file_fails() -> None:
    files = index(Entry("/bin/sh", "file", head=b"#!/bin/busybox\n" + bytes(30)))
    (check,) = prove(AMD64, files, "3.11").checks
    assert check.found == "not an ELF file" and not check.ok


def test_a_link_loop_proves_nothing_and_does_not_hang() -> None:
    files = index(
        Entry("/bin/sh", "link", target="/bin/ash"), Entry("/bin/ash", "link", target="sh")
    )
    assert resolve(files, "/bin/sh") is None
    assert prove(AMD64, files, "3.11").checks == ()


# -- layers, as the engine stacks them -------------------------------------------------------
def layer(*members: tuple[str, str, bytes | str]) -> bytes:
    """A layer tar: (name, kind, data) with kind file, link (data: target), hard, dir."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                payload = data if isinstance(data, bytes) else data.encode()
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {"link": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "dir": tarfile.DIRTYPE}[
                kind
            ]
            info.linkname = str(data)
            tar.addfile(info)
    return out.getvalue()


def test_a_layer_scan_keeps_heads_links_and_what_it_deletes() -> None:
    data = layer(
        ("./usr/bin/dash", "file", elf_head(ARM64) + bytes(10_000)),
        ("./usr/bin/sh", "hard", "./usr/bin/dash"),
        ("./bin", "link", "usr/bin"),
        (
            "./opt/venv/lib/python3.11/site-packages/torch/version.py",
            "file",
            "__version__ = '2.7.1'\n",
        ),
        ("./etc/.wh.motd", "file", b""),
        ("./var/cache/.wh..wh..opq", "file", b""),
    )
    scan = scan_layer(io.BytesIO(data))
    dash = scan.entries["/usr/bin/dash"]
    assert dash.head == elf_head(ARM64)[:64] and dash.size == 10_064 and dash.elf
    assert scan.entries["/usr/bin/sh"].head == dash.head  # a hard link is the same file
    assert scan.entries["/bin"] == Entry("/bin", "link", target="usr/bin")
    assert scan.entries["/opt/venv/lib/python3.11/site-packages/torch/version.py"].text == (
        "__version__ = '2.7.1'\n"
    )
    assert scan.deleted == {"/etc/motd"} and scan.opaque == {"/var/cache"}


def test_the_newest_layer_wins_and_whiteouts_hide_what_is_below() -> None:
    base = scan_layer(
        io.BytesIO(
            layer(
                ("usr/bin/dash", "file", elf_head(AMD64)),
                ("usr/bin/python3.11", "file", elf_head(AMD64)),
                ("var/cache/apt/pkgcache.bin", "file", elf_head(AMD64)),
                ("opt/old/lib.so", "file", elf_head(AMD64)),
                ("bin", "link", "usr/bin"),
            )
        )
    )
    top = scan_layer(
        io.BytesIO(
            layer(
                ("usr/bin/dash", "file", elf_head(ARM64)),
                ("usr/bin/.wh.python3.11", "file", b""),
                ("var/cache/.wh..wh..opq", "file", b""),
                ("opt/.wh.old", "file", b""),
            )
        )
    )
    files = TarIndex([top, base])
    assert files.entry("/bin/dash") is not None
    assert elf_machine(files.entry("/bin/dash").head) == "aarch64"  # type: ignore[union-attr]
    assert files.entry("/usr/bin/python3.11") is None
    assert files.entry("/var/cache/apt/pkgcache.bin") is None  # under an opaque folder
    assert files.first_native("/opt/old") is None
    assert files.first_native("/usr/bin").path == "/usr/bin/dash"  # type: ignore[union-attr]


def test_a_gzip_or_zstd_layer_blob_is_read_as_its_tar(tmp_path: Path) -> None:
    data = layer(("bin/sh", "file", elf_head(ARM64)))
    for media_type, blob in (
        ("application/vnd.oci.image.layer.v1.tar+gzip", gzip.compress(data)),
        ("application/vnd.oci.image.layer.v1.tar+zstd", zstandard.ZstdCompressor().compress(data)),
        ("application/vnd.oci.image.layer.v1.tar", data),
    ):
        scan = scan_layer(_decompressing(io.BytesIO(blob), media_type))
        assert scan.entries["/bin/sh"].elf, media_type


# -- a local image, through the engine's archive endpoint ------------------------------------
class Response:
    """What the engine's `GET /containers/{id}/archive?path=` answers: a tar of the path and
    its stat in a header."""

    def __init__(self, data: bytes, stat: dict[str, object], status: int = 200) -> None:
        import base64
        import json

        self.raw = io.BytesIO(data)
        self.status_code = status
        self.headers = {"X-Docker-Container-Path-Stat": base64.b64encode(json.dumps(stat).encode())}
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Api:
    def __init__(self, tree: dict[str, tuple[bytes, dict[str, object]]]) -> None:
        self.tree, self.asked, self.responses = tree, [], []  # type: ignore[var-annotated]

    def _url(self, template: str, *args: str) -> str:
        return template.format(*args)

    def _get(
        self, url: str, params: dict[str, str], stream: bool, headers: dict[str, str]
    ) -> Response:
        assert stream and headers == {"Accept-Encoding": "identity"}
        self.asked.append(params["path"])
        data, stat = self.tree.get(params["path"], (b"", {}))
        response = Response(data, stat, 200 if params["path"] in self.tree else 404)
        self.responses.append(response)
        return response

    def _raise_for_status(self, response: Response) -> None:
        assert response.status_code == 200


class Client:
    def __init__(self, api: Api) -> None:
        self.api, self.removed = api, False
        outer = self

        class Container:
            id = "c0ffee"

            def remove(self, force: bool) -> None:
                outer.removed = force

        class Containers:
            def create(self, image: str, **kwargs: object) -> Container:
                assert kwargs["command"] == ["true"] and kwargs.get("platform") == ARM64
                return Container()

        self.containers = Containers()


def test_a_local_image_is_read_one_path_at_a_time_and_links_where_the_engine_resolved_them() -> (
    None
):
    from imagekit.engine.local_files import LocalFiles

    site = "/opt/venv/lib/python3.11/site-packages"
    api = Api(
        {
            "/bin/sh": (layer(("sh", "link", "dash")), {"linkTarget": "/usr/bin/dash"}),
            "/usr/bin/dash": (layer(("dash", "file", elf_head(ARM64))), {}),
            "/usr/bin/python3": (layer(("python3", "file", elf_head(ARM64))), {}),
            f"{site}/torch": (
                layer(
                    ("torch/_C", "dir", ""),
                    ("torch/_C/__init__.pyi", "file", "# stubs\n" * 20),
                    ("torch/_C.cpython-311-aarch64-linux-gnu.so", "file", elf_head(ARM64)),
                    ("torch/lib/libtorch_cpu.so", "file", elf_head(AMD64) + bytes(10**6)),
                ),
                {},
            ),
        }
    )
    client = Client(api)
    with LocalFiles(client, "sha256:built", ARM64) as files:
        proof = prove(ARM64, files, "3.11")
    assert client.removed  # the container, created and never started, is gone
    assert [(c.what, c.path, c.found) for c in proof.checks] == [
        ("the OS's shell, /bin/sh", "/usr/bin/dash", "aarch64"),
        ("the OS's Python", "/usr/bin/python3", "aarch64"),
        ("torch's native code", f"{site}/torch/_C.cpython-311-aarch64-linux-gnu.so", "aarch64"),
    ]
    assert all(r.closed for r in api.responses)  # the rest of a folder is never read
    assert api.responses[api.asked.index(f"{site}/torch")].raw.tell() < len(
        api.tree[f"{site}/torch"][0]
    )


def test_a_file_where_a_folder_was_hides_the_folders_old_files() -> None:
    old = scan_layer(io.BytesIO(layer(("opt/lib/a.so", "file", elf_head(AMD64)))))
    new = scan_layer(
        io.BytesIO(
            layer(("opt/lib", "link", "/usr/lib"), ("usr/lib/b.so", "file", elf_head(ARM64)))
        )
    )
    files = TarIndex([new, old])
    assert files.entry("/opt/lib/a.so") is None
    assert files.first_native("/opt/lib").path == "/usr/lib/b.so"  # type: ignore[union-attr]


def test_an_opaque_folder_keeps_what_its_own_layer_put_in_it() -> None:
    old = scan_layer(io.BytesIO(layer(("opt/venv/old.so", "file", elf_head(AMD64)))))
    new = scan_layer(
        io.BytesIO(
            layer(
                ("opt/venv/.wh..wh..opq", "file", b""), ("opt/venv/new.so", "file", elf_head(ARM64))
            )
        )
    )
    files = TarIndex([new, old])
    assert files.entry("/opt/venv/old.so") is None and files.entry("/opt/venv/new.so") is not None


def test_folder_links_that_loop_or_climb_above_the_root_end() -> None:
    files = index(
        Entry("/a", "link", target="b"),
        Entry("/b", "link", target="a"),
        Entry("/c", "link", target="../../../usr"),
        Entry("/usr/bin/dash", "file", head=elf_head(AMD64)),
    )
    assert files.entry("/a/x") is None and files.first_native("/a") is None
    assert files.entry("/c/bin/dash").path == "/usr/bin/dash"  # type: ignore[union-attr]


def test_object_files_and_gpu_code_are_not_a_packages_native_code() -> None:
    rel = bytearray(elf_head(AMD64))
    rel[16] = 1  # ET_REL: an object file
    cubin = bytearray(elf_head(AMD64))
    cubin[18:20] = (190).to_bytes(2, "little")  # EM_CUDA
    site = "/opt/venv/lib/python3.11/site-packages"
    files = index(
        Entry(f"{site}/triton/a.o", "file", head=bytes(rel)),
        Entry(f"{site}/triton/b.cubin", "file", head=bytes(cubin)),
        Entry(f"{site}/triton/c.so", "file", head=elf_head(ARM64)),
    )
    assert files.first_native(f"{site}/triton").path == f"{site}/triton/c.so"  # type: ignore[union-attr]


def test_pypi_torch_names_its_dist_info_without_the_local_version() -> None:
    site = "/opt/venv/lib/python3.12/site-packages"
    files = index(
        Entry(f"{site}/torch/version.py", "file", text="__version__ = '2.7.1+cu126'\n"),
        Entry(
            f"{site}/torch-2.7.1.dist-info/WHEEL",
            "file",
            text="Tag: cp312-cp312-manylinux_2_28_x86_64\n",
        ),
    )
    (tag,) = prove(AMD64, files, "3.12").checks
    assert (
        tag.what == "torch's wheel tag"
        and tag.path.endswith("torch-2.7.1.dist-info/WHEEL")
        and tag.ok
    )


def test_a_uv_python_behind_a_minor_version_link_and_cuda_13s_layout_are_read() -> None:
    site = "/opt/venv/lib/python3.12/site-packages"
    files = index(
        Entry(
            "/opt/venv/bin/python",
            "link",
            target="/opt/python/cpython-3.12-linux-aarch64-gnu/bin/python3.12",
        ),
        Entry(
            "/opt/python/cpython-3.12-linux-aarch64-gnu",
            "link",
            target="cpython-3.12.11-linux-aarch64-gnu",
        ),
        Entry(
            "/opt/python/cpython-3.12.11-linux-aarch64-gnu/bin/python3.12",
            "file",
            head=elf_head(ARM64),
        ),
        Entry(f"{site}/nvidia", "link", target="/opt/imagekit/cuda/nvidia"),
        Entry(
            "/opt/imagekit/cuda/nvidia/cu13/include/cuda.h", "file", head=b"/* cuda */" + bytes(30)
        ),
        Entry("/opt/imagekit/cuda/nvidia/cu13/lib/libcudart.so.13", "file", head=elf_head(ARM64)),
    )
    checks = {c.what: c for c in prove(ARM64, files, "3.12").checks}
    assert (
        checks["the venv's Python"].path
        == "/opt/python/cpython-3.12.11-linux-aarch64-gnu/bin/python3.12"
    )
    assert checks["the CUDA libraries"].path == "/opt/imagekit/cuda/nvidia/cu13/lib/libcudart.so.13"
    assert all(c.ok for c in checks.values())


def test_the_engines_errors_reading_a_local_image_are_imagekits() -> None:
    from imagekit.engine.local_files import LocalFiles
    from imagekit.errors import EngineError

    class Gone(Api):
        def _get(
            self, url: str, params: dict[str, str], stream: bool, headers: dict[str, str]
        ) -> Response:
            raise ConnectionError("the daemon went away")

    client = Client(Gone({}))
    with pytest.raises(EngineError) as info, LocalFiles(client, "sha256:built", ARM64) as files:
        files.entry("/bin/sh")
    assert (
        "reading the files of sha256:built (linux/arm64's) to prove its platform: reading /bin/sh"
        in str(info.value)
    )
    assert "ConnectionError: the daemon went away" in str(info.value) and client.removed
    truncated = Client(
        Api({"/bin/sh": (layer(("sh", "file", elf_head(ARM64) + bytes(4096)))[:600], {})})
    )
    with (
        pytest.raises(EngineError, match="reading /bin/sh failed"),
        LocalFiles(truncated, "x", ARM64) as files,
    ):
        files.entry("/bin/sh")


# -- a pushed image, streamed back from its registry with oras -------------------------------
def fake_oras(tmp_path: Path, blobs: dict[str, bytes], behave: str = "") -> str:
    """An `oras` that answers `blob fetch --output - NAME@DIGEST` from `blobs` (by digest),
    or, for a digest named in `behave` (`fail:` or `hang:`), fails with a registry's words or
    never finishes."""
    folder = tmp_path / "blobs"
    folder.mkdir()
    for digest, data in blobs.items():
        (folder / digest.split(":")[1]).write_bytes(data)
    script = tmp_path / "oras"
    script.write_text(
        "#!/bin/sh\n"
        "for last; do :; done\ndigest=${last#*@sha256:}\n"
        f'case "{behave}" in\n'
        '  fail:*"$digest"*) echo "Error: response status code 401: unauthorized" >&2; exit 1;;\n'
        '  hang:*"$digest"*) exec sleep 30;;\n'
        "esac\n"
        f'exec cat "{folder}/$digest"\n'
    )
    script.chmod(0o755)
    return str(script)


def pushed_layers(blobs: dict[str, bytes], media_type: str) -> list:  # type: ignore[type-arg]
    from imagekit.engine.interface import Layer

    return [
        Layer("RUN x", len(data), digest=digest, media_type=media_type)
        for digest, data in blobs.items()
    ]


GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
REF = "127.0.0.1:5000/x@sha256:" + "f" * 64


@pytest.mark.subprocess
def test_a_pushed_images_layers_are_streamed_back_newest_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.engine import image_registry

    base = gzip.compress(
        layer(("bin", "link", "usr/bin"), ("usr/bin/dash", "file", elf_head(AMD64)))
    )
    top = gzip.compress(layer(("usr/bin/dash", "file", elf_head(ARM64) + bytes(3 << 20))))
    blobs = {"sha256:" + "a" * 64: base, "sha256:" + "b" * 64: top}
    monkeypatch.setenv("IMAGEKIT_ORAS", fake_oras(tmp_path, blobs))
    files = image_registry.files(REF, pushed_layers(blobs, GZIP_LAYER))  # oldest first
    assert elf_machine(files.entry("/bin/dash").head) == "aarch64"  # type: ignore[union-attr]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("behave", "data", "said"),
    [
        ("fail:", None, "oras exited 1"),
        ("hang:", None, "not done after 1s; check that the registry is reachable"),
        ("", b"(\xb5/\xfd not really zstd" * 10, "a layer that does not read: zstd"),
    ],
)
def test_a_pushed_layer_that_cannot_be_read_is_said_with_its_words(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behave: str, data: bytes | None, said: str
) -> None:
    from imagekit.engine import image_registry
    from imagekit.errors import ImagekitError

    digest = "sha256:" + "c" * 64
    good = {digest: data or zstandard.ZstdCompressor().compress(layer(("a", "file", b"x")))}
    monkeypatch.setenv(
        "IMAGEKIT_ORAS", fake_oras(tmp_path, good, behave + "c" * 64 if behave else "")
    )
    monkeypatch.setattr(image_registry, "LAYER_STREAM_SECONDS", 1.0)
    with pytest.raises(ImagekitError) as info:
        image_registry.files(REF, pushed_layers(good, ZSTD_LAYER))
    text = str(info.value)
    assert said in text and f"x@{digest}" in text
    if behave == "fail:":
        assert "401: unauthorized" in text
