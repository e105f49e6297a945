"""The memory a process may still take: the host's, and under every cgroup limit above it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.hostmem import cgroup_room_bytes, meminfo_available_bytes, require_memory


def test_meminfo(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  100 kB\nMemAvailable:   2048 kB\n")
    assert meminfo_available_bytes(meminfo) == 2048 * 1024
    assert meminfo_available_bytes(tmp_path / "missing") is None


def test_cgroup_v2_limit_and_usage(tmp_path: Path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/task\n")
    task = tmp_path / "root" / "job" / "task"
    task.mkdir(parents=True)
    (task / "memory.max").write_text("max\n")
    (task / "memory.current").write_text("100\n")
    (task.parent / "memory.max").write_text(str(8 << 30))
    (task.parent / "memory.current").write_text(str(6 << 30))
    assert cgroup_room_bytes(proc, tmp_path / "root") == 2 << 30    # the parent's limit holds


def test_cgroup_v1_without_limit(tmp_path: Path):
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/a\n3:cpu:/a\n")
    group = tmp_path / "root" / "memory" / "a"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text("9223372036854771712")
    (group / "memory.usage_in_bytes").write_text("5")
    assert cgroup_room_bytes(proc, tmp_path / "root") is None
    (group / "memory.limit_in_bytes").write_text("1000")
    assert cgroup_room_bytes(proc, tmp_path / "root") == 995


def test_work_that_does_not_fit_is_refused_before_it_starts():
    with pytest.raises(KvplanError, match=r"a pool needs about .* GiB of memory and .* GiB are free: smaller"):
        require_memory(1 << 62, "a pool", "smaller")
    require_memory(1, "a pool", "smaller")
