"""OMP_NUM_THREADS computed when the venv's Python starts (imagekit/runtime/threads.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.runtime import threads


@pytest.mark.parametrize(
    ("visible", "quota", "ranks", "expected"),
    [
        (16, None, 1, 16),
        (16, 4.0, 1, 4),  # --cpus 4
        (16, 1.5, 1, 1),  # a fraction rounds down
        (2, 8.0, 1, 2),  # --cpuset-cpus 0,1 with a large quota
        (16, None, 4, 4),  # torchrun --nproc-per-node 4
        (2, None, 4, 1),  # never zero
        (16, 0.5, 1, 1),
    ],
)
def test_threads_for(visible: int, quota: float | None, ranks: int, expected: int) -> None:
    assert threads.threads_for(visible, quota, ranks) == expected


def test_cgroup_v2_and_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_quota(str(tmp_path)) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(str(tmp_path)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_quota(str(v1)) == 2.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_quota(str(v1)) is None
    assert threads.cgroup_quota(str(tmp_path / "none")) is None


def test_the_users_value_is_kept_and_imagekits_is_recomputed_per_rank() -> None:
    mine = {"OMP_NUM_THREADS": "3"}
    threads.apply(mine)
    assert mine == {"OMP_NUM_THREADS": "3"}
    env: dict[str, str] = {}
    threads.apply(env)
    assert env["IMAGEKIT_OMP_AUTO"] == "1" and int(env["OMP_NUM_THREADS"]) >= 1
    whole = int(env["OMP_NUM_THREADS"])
    worker = {**env, "LOCAL_WORLD_SIZE": "64"}  # a torchrun worker inherits the parent's
    threads.apply(worker)
    assert worker["OMP_NUM_THREADS"] == str(max(1, whole // 64))
