# SPDX-License-Identifier: Apache-2.0
"""The producer and consumer loops, and where each kills itself.

Hand-off i: the producer makes a tensor, sends a header (i, the consumer's
kill point or none) and the tool's message, waits for the consumer's answer
and drops its own reference. Whether hand-off i has a kill, on which side
and at which point, is drawn from (seed, i) alone, so a replacement process
never repeats its predecessor's kill: the producer claims i on the board
before the hand-off starts. A kill is SIGKILL sent by the process to itself
at that point (so the point is exact); "during_release" is SIGKILL from a
second thread after a random 0-200 µs while the release runs."""

from __future__ import annotations

import os
import random
import signal
import struct
import sys
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Optional, Tuple

from census import board as B
from census import proc
from census.tools import TOOLS, Tool

PRODUCER_POINTS = ("after_make", "after_send", "after_return")
CONSUMER_POINTS = ("before_map", "while_held", "during_release", "after_release")
HEADER = struct.Struct("<qb")


def plan(seed: int, i: int, rate: float) -> Tuple[str, str]:
    """(side, point) of hand-off i's kill, or ("", "") for none."""
    r = random.Random(seed * 1_000_003 + i)
    if r.random() >= rate:
        return "", ""
    if r.random() < 0.5:
        return "producer", r.choice(PRODUCER_POINTS)
    return "consumer", r.choice(CONSUMER_POINTS)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached


def die_soon() -> None:
    """SIGKILL from another thread after 0-200 µs: a random point of what
    the calling thread does next."""
    delay = random.random() * 200e-6
    sys.setswitchinterval(1e-6)

    def kill() -> None:
        t = time.perf_counter() + delay
        while time.perf_counter() < t:
            pass
        die()

    threading.Thread(target=kill, daemon=True).start()


def first_handoff(board: B.Board, slot: int) -> None:
    """What this incarnation holds after its first hand-off: the baseline
    its growth is measured from."""
    time.sleep(0.01)  # the hand-off's return (libhurray's watcher thread) lands first
    pid = os.getpid()
    board.put(slot, B.FD0, proc.fd_count(pid))
    board.put(slot, B.RSS0, proc.rss_kib(pid))
    board.put(slot, B.MAP0, proc.shared_mapped_bytes(pid))
    board.put(slot, B.STARTED, 1)


def before_killed_handoff(board: B.Board, slot: int) -> None:
    """A process about to be killed in this hand-off records what it grew by
    since its first one, at the start of this hand-off (between hand-offs:
    nothing of this one is held yet), so that the census covers every
    incarnation, not only the survivors."""
    if board.slot(slot, B.STARTED):
        pid = os.getpid()
        board.put(slot, B.KILLED_FDS, proc.fd_count(pid) - board.slot(slot, B.FD0))
        board.put(slot, B.KILLED_MAP, proc.shared_mapped_bytes(pid) - board.slot(slot, B.MAP0))


def register(board: B.Board, slot: int, role: int, tool: str) -> Tool:
    board.put(slot, B.PID, os.getpid())
    board.put(slot, B.ROLE, role)
    return TOOLS[tool](board, slot)


# ---------------------------------------------------------------- producer


def produce_one(tool: Tool, conn: Connection, i: int, seed: int, rate: float) -> None:
    side, point = plan(seed, i, rate)
    mine = point if side == "producer" else ""
    theirs = CONSUMER_POINTS.index(point) + 1 if side == "consumer" else 0
    if mine:
        before_killed_handoff(tool.board, tool.slot)
    obj = tool.make()
    tool.board.add(tool.slot, B.ALLOCS)
    try:
        if mine == "after_make":
            die()
        conn.send_bytes(HEADER.pack(i, theirs))
        tool.send(conn, obj)
        if mine == "after_send":
            die()
        conn.recv_bytes()
        if mine == "after_return":
            die()
    finally:
        tool.drop(obj)
        del obj


def producer(
    tool_name: str, addr: str, board_path: str, slot: int, n: int, seed: int, rate: float
) -> None:
    board = B.Board(board_path)
    tool = register(board, slot, B.PRODUCER, tool_name)
    try:
        os.unlink(addr)
    except FileNotFoundError:
        pass
    listener = Listener(addr, "AF_UNIX")
    conn: Optional[Connection] = None
    while board.get(B.NEXT) < n:
        conn = listener.accept()
        try:
            while (i := board.get(B.NEXT)) < n:
                board.set(B.NEXT, i + 1)
                produce_one(tool, conn, i, seed, rate)
                board.add(slot, B.HANDOFFS)
                if board.slot(slot, B.STARTED) == 0:
                    first_handoff(board, slot)
            conn.send_bytes(HEADER.pack(-1, 0))
        except (EOFError, OSError):
            conn.close()  # the consumer died: wait for its replacement
            conn = None
    board.set(B.DONE, 1)
    idle(board, tool, report=True)


def idle(board: B.Board, tool: Tool, report: bool) -> None:
    """A survivor after the run: keeps what it holds until the supervisor
    has counted (the producer writing its release counts meanwhile)."""
    while not board.get(B.QUIT):
        if report:
            tool.report()
        time.sleep(0.05)
    os._exit(0)


# ---------------------------------------------------------------- consumer


def connect(addr: str, board: B.Board) -> Connection:
    while True:
        try:
            return Client(addr, "AF_UNIX")
        except OSError:  # the producer is being replaced
            if board.get(B.QUIT):
                os._exit(0)
            time.sleep(0.002)


def consume_one(tool: Tool, conn: Connection, point: str) -> None:
    if point:
        before_killed_handoff(tool.board, tool.slot)
    raw = tool.receive(conn)
    if point == "before_map":
        die()
    h: Any = None
    try:
        h = tool.open(conn, raw)
        tool.read(h)
    except (EOFError, ConnectionError):
        raise
    except Exception:  # e.g. the producer died before the fds were fetched
        tool.board.add(tool.slot, B.FAILED)
    if point == "while_held":
        die()
    if point == "during_release":
        die_soon()
    if h is not None:
        tool.release(h)
        del h
    if point == "after_release":
        die()
    conn.send_bytes(b"d")


def consumer(tool_name: str, addr: str, board_path: str, slot: int) -> None:
    board = B.Board(board_path)
    tool = register(board, slot, B.CONSUMER, tool_name)
    while True:
        conn = connect(addr, board)
        board.add(slot, B.CONNECTS)
        try:
            while True:
                i, p = HEADER.unpack(conn.recv_bytes())
                if i < 0:
                    idle(board, tool, report=False)
                consume_one(tool, conn, CONSUMER_POINTS[p - 1] if p else "")
                board.add(slot, B.HANDOFFS)
                if board.slot(slot, B.STARTED) == 0:
                    first_handoff(board, slot)
        except (EOFError, OSError):
            conn.close()
