# SPDX-License-Identifier: Apache-2.0
"""One tool's run: start a producer and a consumer (forked from this
supervisor, which imported the tool first, so a replacement starts in
milliseconds), replace whichever is killed until every hand-off was made,
wait for returns to settle, count what is left behind, and stop."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import wait
from typing import Any, Dict, List, Set

from census import board as B
from census import proc, roles
from census.tools import TOOLS


class Run:
    def __init__(self, tool: str, n: int, seed: int, rate: float) -> None:
        self.tool, self.n, self.seed, self.rate = tool, n, seed, rate
        self.dir = tempfile.mkdtemp(prefix="census-")
        self.addr = os.path.join(self.dir, "sock")
        self.board = B.Board(os.path.join(self.dir, "board"), create=True)
        self.ctx = mp.get_context("fork")
        self.slots = 0
        self.procs: Dict[str, Any] = {}
        self.slot_of: Dict[str, int] = {}
        self.kills = {"producer": 0, "consumer": 0}
        self.other_exits: List[str] = []

    def start(self, role: str) -> None:
        slot, self.slots = self.slots, self.slots + 1
        if role == "producer":
            args: tuple = (
                self.tool,
                self.addr,
                self.board.path,
                slot,
                self.n,
                self.seed,
                self.rate,
            )
            target = roles.producer
        else:
            args, target = (self.tool, self.addr, self.board.path, slot), roles.consumer
        p = self.ctx.Process(target=target, args=args, daemon=True)
        p.start()
        self.procs[role], self.slot_of[role] = p, slot

    def replace_dead(self) -> None:
        for role, p in list(self.procs.items()):
            if p.is_alive():
                continue
            p.join()
            if p.exitcode == -9:
                self.kills[role] += 1
            else:
                self.other_exits.append(f"{role} exit {p.exitcode}")
                if len(self.other_exits) > 20:
                    raise RuntimeError(f"{self.tool}: processes keep failing: {self.other_exits}")
            self.start(role)

    def drive(self, progress_s: float = 15.0) -> float:
        """Until the producer has made every hand-off; returns the seconds."""
        t0 = last = time.monotonic()
        self.start("producer")
        self.start("consumer")
        while not self.board.get(B.DONE):
            wait([p.sentinel for p in self.procs.values()], timeout=0.2)
            self.replace_dead()
            if time.monotonic() - last > progress_s:
                last = time.monotonic()
                print(
                    f"  {self.tool}: {self.board.get(B.NEXT)}/{self.n} hand-offs, "
                    f"kills {self.kills}",
                    file=sys.stderr,
                )
        return time.monotonic() - t0

    def settle(self, limit_s: float) -> float:
        """Waits until the surviving producer has no allocation left
        unreleased, at most limit_s; returns the seconds waited."""
        slot, t0 = self.slot_of["producer"], time.monotonic()
        while time.monotonic() - t0 < limit_s:
            time.sleep(0.1)  # the producer's report loop writes every 50 ms
            b = self.board
            left = b.slot(slot, B.ALLOCS) - b.slot(slot, B.RELEASES)
            if left == 0 and b.slot(slot, B.MEMFD_MAPS) == 0:
                break
        time.sleep(0.2)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.board.set(B.QUIT, 1)
        for p in self.procs.values():
            p.join(3)
            if p.is_alive():
                p.kill()
                p.join()
        shutil.rmtree(self.dir, ignore_errors=True)


def slot_totals(board: B.Board, nslots: int, role: int, word: int) -> int:
    return sum(board.slot(s, word) for s in range(nslots) if board.slot(s, B.ROLE) == role)


def slot_max(board: B.Board, nslots: int, role: int, word: int) -> int:
    """The largest value of word over the role's killed incarnations (the
    survivor, never killed, has 0 there)."""
    return max(
        (board.slot(s, word) for s in range(nslots) if board.slot(s, B.ROLE) == role), default=0
    )


def baseline_slot(run: Run, role: str) -> int:
    """The survivor's own slot when it completed a hand-off; else the first
    incarnation of its role that did (every incarnation holds the same
    after its first hand-off: the same code, forked from the same
    supervisor)."""
    b, own = run.board, run.slot_of[role]
    if b.slot(own, B.STARTED):
        return own
    want = B.PRODUCER if role == "producer" else B.CONSUMER
    for s in range(run.slots):
        if b.slot(s, B.ROLE) == want and b.slot(s, B.STARTED):
            return s
    return own


def count(run: Run, shm_before: Set[str], settled_s: float) -> Dict[str, Any]:
    """What is left behind after the run, per kind (see report.COLUMNS)."""
    b = run.board
    out: Dict[str, Any] = {"settle_s": round(settled_s, 2)}
    for role in ("producer", "consumer"):
        pid, slot = run.procs[role].pid, run.slot_of[role]
        base = baseline_slot(run, role)
        out[role] = {
            "pid": pid,
            "handoffs": b.slot(slot, B.HANDOFFS),
            "baseline_own": base == slot,
            "fds": proc.fd_count(pid) - b.slot(base, B.FD0),
            "memfds": proc.memfd_links(pid),
            "mapped_bytes": proc.shared_mapped_bytes(pid) - b.slot(base, B.MAP0),
            "rss_kib": proc.rss_kib(pid) - b.slot(base, B.RSS0),
            "fd_kinds": proc.fd_kinds(pid),
            "connections_made": b.slot(slot, B.CONNECTS),
        }
    ours = proc.tree(os.getpid())
    out["memfds_all"] = proc.memfds_in(ours)
    out["processes"] = len(ours)
    new = sorted(proc.dev_shm() - shm_before)
    out["dev_shm_new"] = new
    ps = run.slot_of["producer"]
    out["allocs"] = b.slot(ps, B.ALLOCS)
    out["releases"] = b.slot(ps, B.RELEASES)
    out["memfd_maps_producer"] = b.slot(ps, B.MEMFD_MAPS)
    out["exports"] = b.slot(ps, B.EXPORTS)
    out["returns"] = b.slot(ps, B.RETURNS)
    out["allocs_all"] = slot_totals(b, run.slots, B.PRODUCER, B.ALLOCS)
    out["failed_receives"] = slot_totals(b, run.slots, B.CONSUMER, B.FAILED)
    for role, word in (("producer", B.PRODUCER), ("consumer", B.CONSUMER)):
        out[role]["killed_fds_max"] = slot_max(b, run.slots, word, B.KILLED_FDS)
        out[role]["killed_mapped_max"] = slot_max(b, run.slots, word, B.KILLED_MAP)
    out["consumer_handoffs"] = slot_totals(b, run.slots, B.CONSUMER, B.HANDOFFS)
    return out


def cleanup_dev_shm(names: List[str], pids: Set[int]) -> List[str]:
    """Unlinks what this run left in /dev/shm: shared_memory's census-shm-*
    and torch's torch_<pid>_* of this run's processes; returns them."""
    gone = []
    for n in names:
        mine = n.startswith("census-shm-") or (
            n.startswith("torch_") and n.split("_")[1].isdigit() and int(n.split("_")[1]) in pids
        )
        if mine:
            if n.startswith("census-shm-"):
                from multiprocessing import resource_tracker

                resource_tracker.unregister("/" + n, "shared_memory")
            try:
                os.unlink(os.path.join("/dev/shm", n))
                gone.append(n)
            except OSError:
                pass
    return gone


def run_tool(tool: str, n: int, seed: int, rate: float, settle_s: float) -> Dict[str, Any]:
    TOOLS[tool].prepare()
    shm_before = proc.dev_shm()
    run = Run(tool, n, seed, rate)
    load0 = os.getloadavg()[0]
    try:
        secs = run.drive()
        settled = run.settle(settle_s)
        res = count(run, shm_before, settled)
    finally:
        pids = {run.procs[r].pid for r in run.procs}
        run.stop()
    res.update(
        tool=tool,
        label=TOOLS[tool].label,
        counts=TOOLS[tool].counts,
        handoffs=n,
        seconds=round(secs, 1),
        kills=dict(run.kills),
        other_exits=run.other_exits,
        load=[round(load0, 1), round(os.getloadavg()[0], 1)],
    )
    res["dev_shm_unlinked_after"] = cleanup_dev_shm(res["dev_shm_new"], pids | run_pids(run))
    return res


def run_pids(run: Run) -> Set[int]:
    return {run.board.slot(s, B.PID) for s in range(run.slots)}
