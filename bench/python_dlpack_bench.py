"""Per-tensor cost of the hop through Hurray, next to plain NumPy DLPack.

    python bench/python_dlpack_bench.py [--rounds N] [--calls N]

Times, in the same process and interleaved round by round:

  plain   np.from_dlpack(a)                        (NumPy -> NumPy)
  hurray  np.from_dlpack(hurray.from_dlpack(a))    (NumPy -> Hurray -> NumPy)

plus the two halves of the hurray hop on their own. Each round runs every
case `calls` times and records the mean per call; the report gives the
median over rounds, the ratio hurray/plain and the added time per tensor
(target: under 1 microsecond). Every array and Buffer made is dropped inside
the loop, so release costs are included.
"""
import argparse
import gc
import platform
import statistics
import sys
import time

import numpy as np

import hurray


def per_call_ns(fn, calls):
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--shape", default="1024,1024", help="array shape (default 1024,1024 float32)")
    args = ap.parse_args(argv)

    shape = tuple(int(x) for x in args.shape.split(","))
    a = np.zeros(shape, dtype=np.float32)
    buf = hurray.from_dlpack(a)
    from_dlpack = np.from_dlpack
    h_from_dlpack = hurray.from_dlpack

    cases = {
        "plain   np.from_dlpack(a)": lambda: from_dlpack(a),
        "hurray  np.from_dlpack(hurray.from_dlpack(a))": lambda: from_dlpack(h_from_dlpack(a)),
        "  half  hurray.from_dlpack(a)": lambda: h_from_dlpack(a),
        "  half  np.from_dlpack(buffer)": lambda: from_dlpack(buf),
    }
    # Sanity: the hop is zero-copy.
    assert from_dlpack(h_from_dlpack(a)).ctypes.data == a.ctypes.data

    for fn in cases.values():  # warm up
        per_call_ns(fn, max(1, args.calls // 10))
    samples = {name: [] for name in cases}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(args.rounds):
            names = list(cases)
            if r % 2:
                names.reverse()  # alternate the order: no case always runs first
            for name in names:
                samples[name].append(per_call_ns(cases[name], args.calls))
    finally:
        if gc_was_enabled:
            gc.enable()

    med = {name: statistics.median(v) for name, v in samples.items()}
    names = list(cases)
    plain, hop = med[names[0]], med[names[1]]
    print(f"python {platform.python_version()}, numpy {np.__version__}, hurray {hurray.__version__}, "
          f"{platform.machine()}; array {a.shape} {a.dtype}; "
          f"{args.rounds} rounds x {args.calls} calls, median of per-round means")
    for name in names:
        v = samples[name]
        print(f"  {name:<48} {med[name]:8.1f} ns/call   (min {min(v):7.1f}, max {max(v):7.1f})")
    added = hop - plain
    # Paired per round (both cases ran back to back): robust to load drifting.
    paired = statistics.median(h - p for h, p in zip(samples[names[1]], samples[names[0]]))
    print(f"  ratio hurray/plain: {hop / plain:.2f}x; added by the hop through Hurray: "
          f"{added:.1f} ns per tensor (paired per round: {paired:.1f} ns) -> "
          f"{'under' if max(added, paired) < 1000 else 'OVER'} the 1 us target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
