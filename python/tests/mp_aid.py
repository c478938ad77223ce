# SPDX-License-Identifier: Apache-2.0
"""Worker functions of test_multiprocessing.py (importable by spawned
processes: spawn passes the parent's sys.path)."""

import gc
import os
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

import hurray


def mapping_of(address: int) -> str:
    """'device inode path' of this process's mapping that holds address (''
    when none). Two processes mapping the same memfd show the same inode."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return " ".join([parts[3], parts[4]] + parts[5:]).strip()
    return ""


def inode_mapped(mapping: str) -> bool:
    """Whether this process still maps the file of `mapping` (from mapping_of)."""
    dev, inode = mapping.split()[:2]
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if parts[3] == dev and parts[4] == inode:
                return True
    return False


def write(buf: hurray.Buffer, value: float) -> Dict[str, Any]:
    """Fills buf with value through NumPy, says what it saw, releases it."""
    a = np.from_dlpack(buf)
    a[...] = value
    out = {
        "pid": os.getpid(),
        "readonly": buf.readonly,
        "shape": buf.shape,
        "dtype": buf.dtype,
        "mapping": mapping_of(buf.data_ptr),
        "first": float(a.flat[0]),
    }
    del a
    buf.release()
    return out


def write_from_queue(q: Any, results: Any, value: float) -> None:
    buf = q.get(timeout=60)
    results.put(write(buf, value))


def pipe_echo(conn: Any) -> None:
    """Receives Buffers and sends each back after adding 1 to it, until None."""
    while True:
        if not conn.poll(60):
            return
        buf = conn.recv()
        if buf is None:
            return
        a = np.from_dlpack(buf)
        np.add(a, 1, out=a)
        del a
        conn.send(buf)
        del buf


def hold_until(conn: Any) -> None:
    """Receives one Buffer, answers its first element, holds the Buffer until
    told to let go, then answers again."""
    buf = conn.recv()
    conn.send(float(np.from_dlpack(buf).flat[0]))
    conn.poll(60)
    conn.recv()
    buf.release()
    conn.send("released")


def hold_forever(conn: Any) -> None:
    """Receives Buffers and keeps them until killed."""
    kept = []
    while conn.poll(60):
        kept.append(conn.recv())
        conn.send(len(kept))


def shape_and_sum(buf: hurray.Buffer) -> Tuple[Tuple[int, ...], float]:
    return buf.shape, float(np.from_dlpack(buf).sum())


def put_and_return(q: Any) -> None:
    """Sends a new shared Buffer and returns at once: the process exits
    while the message may still wait to be fetched."""
    b = hurray.empty(4, "float64", shared=True)
    np.from_dlpack(b)[...] = 5
    q.put(b)


def inheritable_fds_after_receiving(conn: Any) -> None:
    """Receives one Buffer, starts a shell that leaves a background sleep
    behind (as os.system("... &") does), reports the fds that receiving made
    and a started program would inherit (the worker's own inheritable fds
    from before, the harness's and multiprocessing's, are not hurray's),
    then releases the Buffer."""
    before = _inheritable_now()
    buf = conn.recv()
    os.system("sleep 3 &")
    leaked = sorted(set(_inheritable_now()) - set(before))
    buf.release()
    del buf
    conn.send(leaked)


def _inheritable_now() -> List[str]:
    out = []
    for fd in map(int, os.listdir("/proc/self/fd")):
        if _inheritable(fd):
            out.append(f"{fd} -> {_target(fd)}")
    return out


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:  # the listing's own fd, closed by now
        return False


def _target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def send_one_and_exit(conn: Any) -> None:
    """Sends one shareable Buffer and exits (the sender goes away)."""
    b = hurray.empty(8, "float64", shared=True)
    conn.send(b)
    conn.recv()  # the parent has it
    b.release()


# --- sets of Buffers (BufferDict / BufferList: one message) -----------------


def set_facts(d: Any) -> Dict[str, Any]:
    """What a worker sees of a BufferDict / BufferList: its type, keys, each
    member's sum, and the distinct mappings ('dev inode') holding them."""
    items = list(d.items()) if isinstance(d, dict) else list(enumerate(d))
    return {
        "pid": os.getpid(),
        "type": type(d).__name__,
        "keys": [k for k, _ in items],
        "sums": {k: float(np.from_dlpack(b).sum()) for k, b in items},
        "inodes": sorted({" ".join(mapping_of(b.data_ptr).split()[:2]) for b in d.values()})
        if isinstance(d, dict)
        else sorted({" ".join(mapping_of(b.data_ptr).split()[:2]) for b in d}),
        "readonly": [b.readonly for _, b in items],
    }


def set_add_one(d: Any) -> Dict[str, Any]:
    """Adds 1 to every member (through NumPy), then reports set_facts."""
    for b in d.values() if isinstance(d, dict) else d:
        a = np.from_dlpack(b)
        np.add(a, 1, out=a)
    return set_facts(d)


def set_from_queue(q: Any, results: Any) -> None:
    results.put(set_add_one(q.get(timeout=60)))


def set_pipe_echo(conn: Any) -> None:
    """Receives one set, adds 1 to every member and sends the set back."""
    d = conn.recv()
    set_add_one(d)
    conn.send(d)
    del d
    conn.poll(60)


def set_hold(conn: Any) -> None:
    """Receives one set, says so, and keeps it until told to release it
    ('go'), to exit holding it ('exit': os._exit, no cleanup), or killed."""
    d = conn.recv()
    conn.send(len(d))
    conn.poll(60)
    if conn.recv() == "exit":
        os._exit(0)
    del d
    conn.send("released")


def wait_for(cond: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether cond() holds within `seconds` (collecting garbage between tries)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        gc.collect()
        if cond():
            return True
        time.sleep(0.01)
    return cond()
