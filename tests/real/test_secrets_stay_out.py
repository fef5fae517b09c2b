"""Nothing secret reaches an image: source ignores, the CA bundle, index credentials."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from devkit.pypi_mirror import Mirror
from devkit.realengine import (
    MARKER,
    build_args,
    docker,
    imagekit,
    make_project,
    strings_in_saved_image,
)

from .conftest import STACK, TAG, cell_of, run_in_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_source_reaches_the_image_without_its_env_file(project: Path) -> None:
    listing = run_in_image("--entrypoint", "ls", TAG, "-A", "/workspace").split()
    assert "train.py" in listing and ".env" not in listing  # tests/data/app/.env stays out


def test_ca_bundle_is_in_no_layer(project: Path) -> None:
    """The marked CA bundle the session build was given reaches no layer, no config and no
    history. The scan reads every layer as the engine stores it: the containerd store saves
    the zstd blobs a `--push --load` build made as they are, and a scan of raw bytes there
    found nothing at all (it passed only after a rebuild had added a plain-tar layer)."""
    history = docker("history", "--no-trunc", TAG).stdout
    assert MARKER not in history
    code = (project / "app" / "train.py").read_text().strip()  # as the image holds it now
    torch_file = "def is_tensor(obj"  # in torch/__init__.py: the venv's largest layer is read
    found, unread = strings_in_saved_image(TAG, [MARKER, code, torch_file])
    assert unread == [] and {code, torch_file} <= found  # the scan does see file contents
    assert MARKER not in found


def test_index_mirror_with_credentials_is_used_and_kept_out_of_the_image(
    project: Path, tmp_path: Path
) -> None:
    """A private mirror on this host that requires Basic auth: the build installs through
    it with the credentials from --index-url, and the password reaches no layer, no
    report and no output. A rebuild with a changed pip list takes the file from the
    cache mount: a plain-http index is trusted, or pip would cache nothing from it."""
    import urllib.error
    import urllib.request

    password = f"pw-{uuid.uuid4().hex}"
    # on the default bridge's gateway, which a build's RUN steps reach on their default
    # network: with --network host their cache keys would differ from every other build's
    # (a cold build of the whole cell)
    gateway = json.loads(docker("network", "inspect", "bridge").stdout)[0]["IPAM"]["Config"][0]
    credentials = ("ci", password)
    with Mirror(
        tmp_path / "mirror", project / "ca-marked.pem", credentials, host=gateway["Gateway"]
    ) as mirror:
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
            args = ("--index-url", mirror.index_url())
            result = imagekit(*build_args(project / "ca-marked.pem", *args), cwd=root)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
            six = [f for f in mirror.stats.files if f.startswith("six-")]
            assert len(six) == 1, six  # the first build fetched it, the second did not
    tag = "127.0.0.1:5000/imagekit-mirror-test:2.13.0-cpu-py3.11-debian12-slim"
    assert run_in_image(tag, "python", "-c", "import six; print(six.__name__)") == "six"
    report_text = (root / "reports" / cell_of("imagekit-mirror-test") / "build.json").read_text()
    assert password not in result.stdout + result.stderr + report_text
    assert password not in docker("history", "--no-trunc", tag).stdout
    six_doc = "Utilities for writing code that runs on Python 2 and 3"  # six.py's docstring
    found, unread = strings_in_saved_image(tag, [password, six_doc])
    assert unread == [] and found == {six_doc}  # six's layer read, the password in none
    docker("rmi", tag, "127.0.0.1:5000/imagekit-mirror-test:" + STACK + "-latest")
