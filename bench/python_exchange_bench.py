# SPDX-License-Identifier: Apache-2.0
"""Per-tensor cost of the DLPack C exchange API next to the capsule protocol.

    python bench/python_exchange_bench.py [--rounds N] [--calls N]

Times, in one process and interleaved round by round (median over rounds of
the per-round mean per call; every object made is dropped inside the loop,
so release costs are included):

  consumer  hurray.from_dlpack(t)              t a torch.Tensor: torch's table
            hurray.from_dlpack(CapsuleOnly(t)) the same tensor behind a wrapper
                                               with only __dlpack__ and
                                               __dlpack_device__: capsule path
  producer  tvm_ffi.from_dlpack(buf)           Buffer's table
            tvm_ffi.from_dlpack(CapsuleOnly(buf))  capsule path
            torch.from_dlpack(buf)             torch 2.15 never reads a
            torch.from_dlpack(CapsuleOnly(buf))  producer's table: both rows
                                               are the capsule path (the gap
                                               is the wrapper's own cost)

Each capsule row also builds the wrapper and goes through its Python-level
__dlpack__; the "wrapper only" row times building the wrapper alone. Which
path each row takes is checked with hurray._native._exchange_api_stats()
before timing.
"""

import argparse
import gc
import platform
import statistics
import sys
import time

import torch
import tvm_ffi

import hurray
from hurray import _native


class CapsuleOnly:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def per_call_ns(fn, calls):
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def check_paths(t, buf):
    s0 = _native._exchange_api_stats()
    hurray.from_dlpack(t)
    hurray.from_dlpack(CapsuleOnly(t))
    tvm_ffi.from_dlpack(buf)
    tvm_ffi.from_dlpack(CapsuleOnly(buf))
    torch.from_dlpack(buf)
    s1 = _native._exchange_api_stats()
    d = {k: s1[k] - s0[k] for k in s1}
    assert d["consumer_table"] == 1 and d["consumer_capsule"] == 1, d
    assert d["managed_tensor_from_py_object_no_sync"] == 1, d  # tvm_ffi only


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--shape", default="1024,1024", help="tensor shape (default 1024,1024 float32)")
    args = ap.parse_args(argv)

    shape = tuple(int(x) for x in args.shape.split(","))
    t = torch.zeros(shape, dtype=torch.float32)
    buf = hurray.from_dlpack(t)
    check_paths(t, buf)
    h_from, tv_from, th_from = hurray.from_dlpack, tvm_ffi.from_dlpack, torch.from_dlpack

    cases = {
        "hurray.from_dlpack(torch)  table": lambda: h_from(t),
        "hurray.from_dlpack(torch)  capsule": lambda: h_from(CapsuleOnly(t)),
        "tvm_ffi.from_dlpack(Buffer) table": lambda: tv_from(buf),
        "tvm_ffi.from_dlpack(Buffer) capsule": lambda: tv_from(CapsuleOnly(buf)),
        "torch.from_dlpack(Buffer)  capsule": lambda: th_from(buf),
        "torch.from_dlpack(Buffer)  capsule+wrapper": lambda: th_from(CapsuleOnly(buf)),
        "  wrapper only CapsuleOnly(t)": lambda: CapsuleOnly(t),
    }
    for fn in cases.values():  # warm up
        per_call_ns(fn, max(1, args.calls // 10))
    samples = {name: [] for name in cases}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(args.rounds):
            names = list(cases)
            if r % 2:
                names.reverse()
            for name in names:
                samples[name].append(per_call_ns(cases[name], args.calls))
    finally:
        if gc_was_enabled:
            gc.enable()

    med = {name: statistics.median(v) for name, v in samples.items()}
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, tvm_ffi "
        f"{getattr(tvm_ffi, '__version__', '?')}, hurray {hurray.__version__}, "
        f"{platform.machine()}; tensor {tuple(t.shape)} {t.dtype}; "
        f"{args.rounds} rounds x {args.calls} calls, median of per-round means"
    )
    for name, v in samples.items():
        print(f"  {name:<44} {med[name]:8.1f} ns/call   (min {min(v):7.1f}, max {max(v):7.1f})")
    names = list(cases)
    for table, capsule in ((names[0], names[1]), (names[2], names[3])):
        paired = statistics.median(c - tb for tb, c in zip(samples[table], samples[capsule]))
        print(
            f"  {table.split()[0]}: table saves {med[capsule] - med[table]:.1f} ns per tensor "
            f"(paired per round: {paired:.1f} ns; the wrapper itself costs "
            f"{med[names[6]]:.1f} ns of that)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
