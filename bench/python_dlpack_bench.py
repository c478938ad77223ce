# SPDX-License-Identifier: Apache-2.0
"""Per-tensor cost of the Python DLPack hops through Hurray, beside NumPy, tvm_ffi and torch.

    python bench/python_dlpack_bench.py [--rounds N] [--calls N] [--only SUBSTR]

Every row is a pair (ours, peer) timed with timeit in the same process: each
round times ours and the peer back to back (`calls` calls each, the order
swapped every other round, so neither always runs first) and records the
mean per call of both. The report gives, per pair, the median over rounds
of ours, of the peer, and of the per-round difference ours - peer (the
paired difference: robust to load drifting between rounds), plus the ratio
of the medians. Every object made is dropped inside the statement, so
release costs are included. The two Python targets (docs/performance.md) are checked at the
end:

  hop      np.from_dlpack(hurray.from_dlpack(a)) - np.from_dlpack(a) <= 150 ns
  export   np.from_dlpack(buf) <= np.from_dlpack(tvm_ffi.from_dlpack(a))

A missing framework (torch, tvm_ffi) drops its rows with a note.
"""

import argparse
import gc
import platform
import statistics
import sys
import timeit

import numpy as np

import hurray

try:
    import tvm_ffi
except ImportError:  # pragma: no cover - reported in the header
    tvm_ffi = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def build_pairs(a, t):
    """(name, ours, peer, globals): ours/peer are timeit statements."""
    g = {"np": np, "hurray": hurray, "a": a, "buf": hurray.from_dlpack(a)}
    pairs = [
        # The hop: what hurray.from_dlpack adds to a NumPy -> NumPy hand-off.
        (
            "hop np->hurray->np vs np->np",
            "np.from_dlpack(hurray.from_dlpack(a))",
            "np.from_dlpack(a)",
        ),
    ]
    if tvm_ffi is not None:
        g["tvm_ffi"] = tvm_ffi
        g["tt"] = tvm_ffi.from_dlpack(a)
        pairs += [
            (
                "hop np->X->np, X=hurray vs tvm_ffi",
                "np.from_dlpack(hurray.from_dlpack(a))",
                "np.from_dlpack(tvm_ffi.from_dlpack(a))",
            ),
            ("import: X.from_dlpack(ndarray)", "hurray.from_dlpack(a)", "tvm_ffi.from_dlpack(a)"),
            ("export to numpy: np.from_dlpack(X)", "np.from_dlpack(buf)", "np.from_dlpack(tt)"),
            (
                "export to tvm_ffi: tvm_ffi.from_dlpack(X)",
                "tvm_ffi.from_dlpack(buf)",
                "tvm_ffi.from_dlpack(tt)",
            ),
        ]
    if torch is not None:
        g["torch"] = torch
        g["t"] = t
        g["tbuf"] = hurray.from_dlpack(t)
        pairs += [
            (
                "hop torch->hurray->torch vs torch->torch",
                "torch.from_dlpack(hurray.from_dlpack(t))",
                "torch.from_dlpack(t)",
            ),
        ]
        if tvm_ffi is not None:
            g["ttt"] = tvm_ffi.from_dlpack(t)
            pairs += [
                (
                    "hop torch->X->torch, X=hurray vs tvm_ffi",
                    "torch.from_dlpack(hurray.from_dlpack(t))",
                    "torch.from_dlpack(tvm_ffi.from_dlpack(t))",
                ),
                (
                    "import: X.from_dlpack(torch.Tensor)",
                    "hurray.from_dlpack(t)",
                    "tvm_ffi.from_dlpack(t)",
                ),
                (
                    "export to torch: torch.from_dlpack(X)",
                    "torch.from_dlpack(tbuf)",
                    "torch.from_dlpack(ttt)",
                ),
            ]
    # Parts of our own hop, against nothing (the peer is an empty statement:
    # timeit's loop alone).
    pairs += [
        (
            "part: buf.__dlpack__(max_version=(1, 3)) + drop",
            "buf.__dlpack__(max_version=mv)",
            "pass",
        ),
        ("part: buf.__dlpack_device__()", "buf.__dlpack_device__()", "pass"),
    ]
    g["mv"] = (1, 3)
    return pairs, g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--shape", default="1024,1024", help="array shape (default 1024,1024 float32)")
    ap.add_argument("--only", default=None, help="run only the pairs whose name contains this")
    args = ap.parse_args(argv)

    shape = tuple(int(x) for x in args.shape.split(","))
    a = np.zeros(shape, dtype=np.float32)
    t = torch.zeros(shape, dtype=torch.float32) if torch is not None else None
    pairs, g = build_pairs(a, t)
    if args.only:
        pairs = [p for p in pairs if args.only in p[0]]

    # Sanity: every hop is zero-copy.
    assert np.from_dlpack(hurray.from_dlpack(a)).ctypes.data == a.ctypes.data
    if torch is not None:
        assert torch.from_dlpack(hurray.from_dlpack(t)).data_ptr() == t.data_ptr()

    timers = [
        (name, timeit.Timer(ours, globals=g), timeit.Timer(peer, globals=g))
        for name, ours, peer in pairs
    ]
    for _, to, tp in timers:  # warm up
        to.timeit(max(1, args.calls // 10))
        tp.timeit(max(1, args.calls // 10))

    results = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name, to, tp in timers:
            so, sp = [], []
            for r in range(args.rounds):
                if r % 2:
                    vp = tp.timeit(args.calls)
                    vo = to.timeit(args.calls)
                else:
                    vo = to.timeit(args.calls)
                    vp = tp.timeit(args.calls)
                so.append(vo * 1e9 / args.calls)
                sp.append(vp * 1e9 / args.calls)
            results.append((name, so, sp))
    finally:
        if gc_was_enabled:
            gc.enable()

    vers = [
        f"python {platform.python_version()}",
        f"numpy {np.__version__}",
        f"hurray {hurray.__version__}",
    ]
    vers.append(f"tvm_ffi {getattr(tvm_ffi, '__version__', '?')}" if tvm_ffi else "no tvm_ffi")
    vers.append(f"torch {torch.__version__}" if torch else "no torch")
    print(
        ", ".join(vers) + f"; {platform.machine()}; array {shape} float32; "
        f"{args.rounds} rounds x {args.calls} calls; ns per call, medians over rounds"
    )
    print(
        f"| {'pair (ours vs peer)':<46} | {'ours':>8} | {'peer':>8} | {'paired diff':>11} |"
        f" {'ratio':>6} |"
    )
    print(f"|{'-' * 48}|{'-' * 9}:|{'-' * 9}:|{'-' * 12}:|{'-' * 7}:|")
    by_name = {}
    for name, so, sp in results:
        mo, mp = statistics.median(so), statistics.median(sp)
        d = statistics.median(o - p for o, p in zip(so, sp))
        by_name[name] = (mo, mp, d)
        print(f"| {name:<46} | {mo:8.1f} | {mp:8.1f} | {d:+11.1f} | {mo / mp:5.2f}x |")

    print()
    hop = by_name.get("hop np->hurray->np vs np->np")
    if hop:
        print(
            f"target hop: added by hurray.from_dlpack {hop[2]:.1f} ns (paired) -> "
            f"{'met' if hop[2] <= 150 else 'MISSED'} (<= 150 ns)"
        )
    exp = by_name.get("export to numpy: np.from_dlpack(X)")
    if exp:
        print(
            f"target export: np.from_dlpack(buf) - np.from_dlpack(tvm tensor) {exp[2]:+.1f} ns "
            f"(paired), ratio {exp[0] / exp[1]:.2f}x -> {'met' if exp[2] <= 0 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
