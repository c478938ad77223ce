# SPDX-License-Identifier: Apache-2.0
"""The stats board: a small file mapped by the supervisor and every producer
and consumer incarnation (a regular file under the run's /tmp directory, so
it is no /dev/shm entry and no memfd). A process killed with SIGKILL leaves
what it wrote; its replacement reads where the run stands."""

from __future__ import annotations

import ctypes
import mmap
import os

# global words
NEXT = 0  # index of the next hand-off to start (claimed before it starts)
DONE = 1  # set by the producer once every hand-off was started
QUIT = 2  # set by the supervisor: survivors exit
SLOTS_AT = 8
SLOT_WORDS = 16
MAX_SLOTS = 8192

# words of a slot (one per incarnation of a producer or a consumer)
PID, ROLE, HANDOFFS, ALLOCS, RELEASES, FD0, RSS0, MAP0 = range(8)
FAILED, STARTED, EXPORTS, RETURNS, MEMFD_MAPS, CONNECTS = range(8, 14)
KILLED_FDS, KILLED_MAP = 14, 15  # growth at the start of the hand-off it was killed in
PRODUCER, CONSUMER = 1, 2


class Board:
    def __init__(self, path: str, create: bool = False) -> None:
        self.path = path
        size = (SLOTS_AT + SLOT_WORDS * MAX_SLOTS) * 8
        if create:
            with open(path, "wb") as f:
                f.truncate(size)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.words = (ctypes.c_int64 * (size // 8)).from_buffer(self._mm)

    def get(self, word: int) -> int:
        return int(self.words[word])

    def set(self, word: int, value: int) -> None:
        self.words[word] = value

    def slot(self, n: int, word: int) -> int:
        return int(self.words[SLOTS_AT + n * SLOT_WORDS + word])

    def put(self, n: int, word: int, value: int) -> None:
        self.words[SLOTS_AT + n * SLOT_WORDS + word] = value

    def add(self, n: int, word: int, by: int = 1) -> None:
        """Only the slot's own process writes it, so no lock is needed."""
        self.words[SLOTS_AT + n * SLOT_WORDS + word] += by
