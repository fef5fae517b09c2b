"""The layer scan cache (engine/scan_cache.py): a pushed layer is read back from its registry
once per machine, by its blob's digest; what the cache cannot give is read again."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from imagekit.builder.platform_proof import elf_machine
from imagekit.engine import image_registry, scan_cache
from imagekit.engine.fake import elf_head
from imagekit.engine.image_files import Entry, LayerScan
from imagekit.platforms import AMD64, ARM64

from .test_platform_proof import GZIP_LAYER, REF, fake_oras, layer, pushed_layers

BASE = "sha256:" + "a" * 64
TOP = "sha256:" + "b" * 64


def blobs() -> dict[str, bytes]:
    base = layer(("bin", "link", "usr/bin"), ("usr/bin/dash", "file", elf_head(AMD64)))
    top = layer(
        ("usr/bin/dash", "file", elf_head(ARM64) + bytes(1000)),
        ("torch/version.py", "file", "__version__ = '2.7.1'\n"),
        ("etc/.wh.motd", "file", b""),
        ("var/.wh..wh..opq", "file", b""),
    )
    return {BASE: gzip.compress(base), TOP: gzip.compress(top)}


def dash_machine(files: image_registry.TarIndex) -> str:
    return elf_machine(files.entry("/bin/dash").head)  # type: ignore[union-attr]


@pytest.mark.subprocess
def test_a_layer_read_once_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = blobs()
    monkeypatch.setenv("IMAGEKIT_ORAS", fake_oras(tmp_path, data))
    layers = pushed_layers(data, GZIP_LAYER)
    first = image_registry.files(REF, layers)
    assert scan_cache.scan_path(TOP).is_file()  # type: ignore[union-attr]
    # no oras any more: the second proof comes from the kept scans alone
    monkeypatch.setenv("IMAGEKIT_ORAS", str(tmp_path / "no-oras-here"))
    second = image_registry.files(REF, layers)
    assert dash_machine(second) == dash_machine(first) == "aarch64"
    assert second.entries == first.entries


@pytest.mark.subprocess
def test_a_failed_read_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = blobs()
    monkeypatch.setenv("IMAGEKIT_ORAS", fake_oras(tmp_path, data, "fail:" + "b" * 64))
    with pytest.raises(image_registry.ImagekitError):
        image_registry.files(REF, pushed_layers(data, GZIP_LAYER))
    assert not scan_cache.scan_path(TOP).is_file()  # type: ignore[union-attr]


def sample() -> LayerScan:
    entries = {
        "/usr/bin/dash": Entry("/usr/bin/dash", "file", size=1064, head=elf_head(ARM64)),
        "/bin": Entry("/bin", "link", target="usr/bin"),
        "/opt": Entry("/opt", "dir"),
        "/t/version.py": Entry("/t/version.py", "file", size=22, head=b"__v", text="v = 1\n"),
    }
    return LayerScan(entries, {"/etc/motd"}, {"/var"})


def test_a_kept_scan_reads_back_the_same() -> None:
    scan_cache.store(TOP, sample())
    assert scan_cache.load(TOP) == sample()
    assert scan_cache.load(BASE) is None  # another blob: nothing kept


@pytest.mark.parametrize(
    "spoil",
    [
        lambda path: path.write_bytes(b"not gzip"),
        lambda path: path.write_bytes(gzip.compress(b"{not json")),
        lambda path: path.write_bytes(gzip.compress(json.dumps({"format": 1}).encode())),
        lambda path: rewrite(path, head_bytes=16),  # kept by a version that kept less
        lambda path: rewrite(path, format=0),
        lambda path: rewrite(path, digest=BASE),  # another blob's scan under this name
    ],
)
def test_a_kept_scan_that_does_not_read_as_this_version_is_none(spoil) -> None:  # type: ignore[no-untyped-def]
    scan_cache.store(TOP, sample())
    spoil(scan_cache.scan_path(TOP))
    assert scan_cache.load(TOP) is None


def rewrite(path: Path, **changes: object) -> None:
    data = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps({**data, **changes}).encode()))


def test_scans_not_read_for_30_days_go_on_the_next_store() -> None:
    scan_cache.store(BASE, sample())
    old = scan_cache.scan_path(BASE)
    assert old is not None
    month = time.time() - scan_cache.KEEP_SECONDS - 60
    os.utime(old, (month, month))
    scan_cache.store(TOP, sample())
    assert not old.exists() and scan_cache.load(TOP) == sample()


def test_a_read_keeps_a_scan_another_30_days() -> None:
    scan_cache.store(BASE, sample())
    path = scan_cache.scan_path(BASE)
    assert path is not None
    month = time.time() - scan_cache.KEEP_SECONDS + 3600
    os.utime(path, (month, month))
    assert scan_cache.load(BASE) is not None
    assert path.stat().st_mtime > time.time() - 60


def test_a_cache_that_cannot_be_written_fails_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("IMAGEKIT_CACHE_DIR", str(blocked))
    scan_cache.store(TOP, sample())  # no error
    assert scan_cache.load(TOP) is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"IMAGEKIT_CACHE_DIR": "/c"}, "/c/layer-scans/sha256/" + "b" * 64 + ".json.gz"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/imagekit/layer-scans/sha256/" + "b" * 64 + ".json.gz"),
        ({"HOME": "/h"}, "/h/.cache/imagekit/layer-scans/sha256/" + "b" * 64 + ".json.gz"),
    ],
)
def test_where_scans_are_kept(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("IMAGEKIT_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert str(scan_cache.scan_path(TOP)) == expected
    assert scan_cache.scan_path("md5:abc") is None  # not a sha256 digest: never kept
