"""How much memory this process may still use: the host's MemAvailable, and the room left under
every memory cgroup limit above the process (v2 `memory.max`, v1 `memory.limit_in_bytes`), so
that a container's limit is respected, not only the machine's."""

from __future__ import annotations

from pathlib import Path

from kvplan.errors import KvplanError

PROC_MEMINFO = Path("/proc/meminfo")
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT = 1 << 60     # v1 writes "no limit" as a page-rounded 2**63


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def meminfo_available_bytes(meminfo: Path = PROC_MEMINFO) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_dirs(proc_cgroup: Path, root: Path) -> list[tuple[Path, str, str]]:
    """(directory, limit file, usage file) of every memory cgroup from the process's up to the root."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, relative = parts
        if controllers == "":            # cgroup v2: one unified hierarchy
            base, limit, usage = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit, usage = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        path = Path(relative.lstrip("/"))
        # inside a cgroup namespace the mount is already the process's own cgroup
        for start in (base / path, base):
            directory = start
            while True:
                if (directory / limit).is_file():
                    found.append((directory, limit, usage))
                if directory == base:
                    break
                directory = directory.parent
    return found


def cgroup_room_bytes(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """The least room (limit - usage) under the memory cgroup limits that hold this process."""
    rooms = []
    for directory, limit_file, usage_file in _cgroup_dirs(proc_cgroup, root):
        limit = _read_int(directory / limit_file)
        usage = _read_int(directory / usage_file)
        if limit is None or limit >= _NO_LIMIT or usage is None:
            continue
        rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


def available_memory_bytes() -> int | None:
    """Memory this process can still take without swapping or being killed; None when unknown."""
    known = [value for value in (meminfo_available_bytes(), cgroup_room_bytes()) if value is not None]
    return min(known) if known else None


def require_memory(needed: int, what: str, advice: str) -> None:
    """Refuse, before allocating, work whose memory the host (within its limits) does not have."""
    available = available_memory_bytes()
    if available is not None and needed > available:
        raise KvplanError(f"{what} needs about {needed / 2**30:.1f} GiB of memory and {available / 2**30:.1f} GiB "
                          f"are free: {advice}")
