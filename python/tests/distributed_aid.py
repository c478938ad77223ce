# SPDX-License-Identifier: Apache-2.0
"""What the Ray and Dask tests run in their workers (importable there: the
tests put this folder on the workers' PYTHONPATH). Imports nothing of the
test suite's conftest."""

import gc
import importlib
import os
from typing import Any, Dict, Optional

import numpy as np

import hurray


def mapping_of(address: int) -> Optional[str]:
    """Permissions and path of this process's mapping that holds address
    (from /proc/self/maps), or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return f"{parts[1]} {parts[5] if len(parts) > 5 else '[anonymous]'}"
    return None


def in_object_store(mapping: Optional[str]) -> bool:
    """Ray's object store maps files under /dev/shm (plasma)."""
    return mapping is not None and ("plasma" in mapping or "/dev/shm" in mapping)


def inspect(buf: hurray.Buffer) -> Dict[str, Any]:
    """Converts buf with NumPy and torch, releases it, and says what it saw:
    read-only flags, sums, whether all three share one address, the mapping
    that holds the memory, and how many received views the release let go."""
    torch: Any = importlib.import_module("torch")  # untyped use: its stubs hide from_dlpack
    before = hurray._native._pickle_stats()
    a = np.from_dlpack(buf)
    t = torch.from_dlpack(buf)
    out: Dict[str, Any] = {
        "type": type(buf).__name__,
        "readonly": buf.readonly,
        "writeable": a.flags.writeable,
        "shape": buf.shape,
        "sum": float(a.sum()),
        "torch_sum": float(t.sum()),
        "same": a.ctypes.data == buf.data_ptr == t.data_ptr(),
        "mapping": mapping_of(buf.data_ptr),
        "pid": os.getpid(),
    }
    del a, t
    buf.release()
    gc.collect()
    out["released_now"] = hurray._native._pickle_stats()["released"] - before["released"]
    return out


def make_buffer(n: int) -> hurray.Buffer:
    return hurray.from_dlpack(np.full(n, 3, dtype=np.int32))


def fill_and_return(buf: hurray.Buffer, value: float) -> hurray.Buffer:
    """Writes value into a writable received Buffer and sends it back."""
    np.from_dlpack(buf)[:] = value
    return buf
