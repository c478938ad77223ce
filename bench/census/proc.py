# SPDX-License-Identifier: Apache-2.0
"""What /proc shows a process holding: open fds, memfd links, mappings of
shared tensor memory and their bytes, RSS; the tree of processes of a run;
/dev/shm entries."""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Set

# mappings that hold shared tensor memory, by the path /proc/PID/maps shows
SHARED_TAGS = ("/memfd:", "/dev/shm/", "/torch_", "/psm_", "plasma")


def fd_links(pid: int) -> List[str]:
    """The targets of /proc/PID/fd/* ([] when the process is gone)."""
    out = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for n in names:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{n}"))
        except OSError:
            pass
    return out


def fd_count(pid: int) -> int:
    return len(fd_links(pid))


def memfd_links(pid: int) -> int:
    return sum(1 for t in fd_links(pid) if t.startswith("/memfd:"))


def shared_mapped_bytes(pid: int) -> int:
    """Bytes of this process's mappings of shared tensor memory (memfd,
    /dev/shm, torch's and shared_memory's segments, Ray's plasma store)."""
    total = 0
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and any(t in parts[5] for t in SHARED_TAGS):
                    lo, hi = parts[0].split("-")
                    total += int(hi, 16) - int(lo, 16)
    except OSError:
        return 0
    return total


def memfd_mappings(pid: int, tag: str = "memfd:hurray") -> int:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return sum(1 for line in f if tag in line)
    except OSError:
        return 0


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ppids() -> Dict[int, int]:
    out = {}
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat") as f:
                s = f.read()
            out[int(n)] = int(s[s.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError):
            pass
    return out


def tree(root: int) -> Set[int]:
    """root and all its live descendants (torch_shm_manager, Ray's
    processes and the run's producers and consumers included)."""
    ppid = _ppids()
    found, todo = {root}, [root]
    while todo:
        p = todo.pop()
        for c, pp in ppid.items():
            if pp == p and c not in found:
                found.add(c)
                todo.append(c)
    return found


def memfds_in(pids: Iterable[int]) -> int:
    return sum(memfd_links(p) for p in pids)


def dev_shm() -> Set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def fd_kinds(pid: int) -> Dict[str, int]:
    """Open fds by what they are: socket, pipe, memfd, /dev/shm, anon_inode, file."""
    out: Dict[str, int] = {}
    for t in fd_links(pid):
        k = (
            t.split(":", 1)[0]
            if t.split(":", 1)[0] in ("socket", "pipe", "anon_inode")
            else (
                "memfd"
                if t.startswith("/memfd:")
                else ("/dev/shm" if t.startswith("/dev/shm/") else "file")
            )
        )
        out[k] = out.get(k, 0) + 1
    return out
