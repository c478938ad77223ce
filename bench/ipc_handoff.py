#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Handing a CPU tensor to another process: hurray vs torch.multiprocessing
vs multiprocessing.shared_memory, side by side in one run.

    python bench/ipc_handoff.py            # full run (several minutes)
    python bench/ipc_handoff.py --quick    # a few seconds: smoke check, no thresholds
    python bench/ipc_handoff.py --json out.json --chart docs/ipc_handoff.png
    python bench/ipc_handoff.py --from-json out.json --chart docs/ipc_handoff.png

Needs numpy, torch and hurray importable (e.g. PYTHONPATH=build/python/hurray-pkg
with the test venv). Every method talks to one consumer process (spawn
context) over a multiprocessing Pipe:

* handoff latency, 4 KiB / 1 MiB / 256 MiB (uint8): the producer sends the
  tensor, the consumer maps it, reads its first and last byte through NumPy,
  drops it and answers; the round trip is timed (median of --reps, after
  warm-up). The same tensor is sent every time (steady state):
    hurray  hurray.empty(n, 'uint8', shared=True) (a memfd), sent as a Buffer
            (hurray's ForkingPickler reducer: hurray_ipc_export, fds through
            the resource sharer, hurray_ipc_import);
    torch   torch.empty(n, dtype=torch.uint8).share_memory_(), sent as a
            tensor (torch.multiprocessing, 'file_descriptor' strategy);
    shm     one multiprocessing.shared_memory.SharedMemory, its name sent,
            opened and closed by the consumer;
    pipe    an empty message: the floor of the Pipe round trip itself.
* loop: --loop handoffs of a fresh 4 KiB tensor each (made, sent, dropped
  by the consumer, dropped by the producer): open fds and mappings of both
  processes at the start, in the middle and at the end.
* kill -9: the consumer keeps 1,000 fresh 4 KiB tensors and is killed with
  SIGKILL; the producer's own references were dropped after sending. For
  hurray: the time until the producer's mappings of them are all gone (each
  producer release ran); for torch: the same count (torch frees the
  producer's mapping when the producer drops the tensor, whether or not
  the consumer still holds it); /dev/shm entries left behind for both.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import signal
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

SIZES = [(4 << 10, "4 KiB"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB")]
KILL_HOLD = 1000


def counts() -> Tuple[int, int]:
    """(open fds, mappings) of this process."""
    nfds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/maps") as f:
        nmaps = sum(1 for _ in f)
    return nfds, nmaps


def tagged_maps(tag: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if tag in line)


def dev_shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# ---------------------------------------------------------------- consumer


def consumer(conn: Any, method: str) -> None:
    import numpy as np

    held: List[Any] = []
    if method == "torch":
        import torch.multiprocessing  # noqa: F401  (its rebuild functions)
    if method == "hurray":
        import hurray  # noqa: F401
    from multiprocessing import shared_memory

    while True:
        msg = conn.recv()
        op = msg[0]
        if op == "exit":
            return
        if op == "counts":
            held.clear()
            gc.collect()
            conn.send(counts())
            continue
        obj = msg[1]
        if op == "pipe":
            conn.send(0)
            continue
        if method == "shm":
            name, n = obj
            # (registers the name with the resource tracker the spawned
            # consumer shares with the producer; the producer's unlink
            # unregisters it)
            s = shared_memory.SharedMemory(name=name)
            a = np.frombuffer(s.buf, dtype=np.uint8, count=n)
            v = int(a[0]) + int(a[-1])
            if op == "hold":
                held.append(s)
            else:
                del a
                s.close()
        else:
            a = obj.numpy() if method == "torch" else np.from_dlpack(obj)
            v = int(a[0]) + int(a[-1])
            if op == "hold":
                held.append(obj)
            del a, obj
        conn.send(v)


# ---------------------------------------------------------------- producer


class Method:
    def __init__(self, name: str) -> None:
        self.name = name
        if name == "torch":
            import torch.multiprocessing as tmp

            tmp.set_sharing_strategy("file_descriptor")
            self.ctx: Any = tmp.get_context("spawn")
        else:
            self.ctx = mp.get_context("spawn")
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=consumer, args=(child, self.name), daemon=True)
        self.proc.start()
        child.close()
        self.conn.send(("pipe", None))
        self.conn.recv()

    def make(self, n: int) -> Any:
        if self.name == "hurray":
            import hurray

            return hurray.empty(n, "uint8", shared=True)
        if self.name == "torch":
            import torch

            return torch.zeros(n, dtype=torch.uint8).share_memory_()
        from multiprocessing import shared_memory

        return shared_memory.SharedMemory(create=True, size=n)

    def payload(self, obj: Any, n: int) -> Any:
        return (obj.name, n) if self.name == "shm" else obj

    def drop(self, obj: Any) -> None:
        if self.name == "shm":
            obj.close()
            obj.unlink()

    def roundtrip(self, op: str, obj: Any) -> None:
        self.conn.send((op, obj))
        self.conn.recv()

    def remote_counts(self) -> Tuple[int, int]:
        self.conn.send(("counts", None))
        r: Tuple[int, int] = tuple(self.conn.recv())  # type: ignore[assignment]
        return r

    def stop(self) -> None:
        try:
            self.conn.send(("exit", None))
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def median_us(fn: Callable[[], None], reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def bench_latency(m: Method, out: Dict[str, Any], reps: int, sizes: List[Tuple[int, str]]) -> None:
    out.setdefault("pipe", median_us(lambda: m.roundtrip("pipe", None), reps, 20))
    for n, label in sizes:
        obj = m.make(n)
        p = m.payload(obj, n)
        r = max(5, reps if n <= (1 << 20) else reps // 4)
        out[f"{m.name} {label}"] = median_us(lambda p=p: m.roundtrip("take", p), r, 5)
        del p
        m.drop(obj)
        del obj
        gc.collect()
    print(f"  latency {m.name} done", file=sys.stderr)


def bench_loop(m: Method, loops: int, settle: float) -> Dict[str, Any]:
    marks: List[Dict[str, Any]] = []
    secs = 0.0
    if True:
        for i in range(loops + 1):
            if i in (0, loops // 2, loops):
                gc.collect()
                time.sleep(settle)  # let the last releases come back
                marks.append({"i": i, "producer": counts(), "consumer": m.remote_counts()})
            if i == loops:
                break
            t0 = time.perf_counter()
            obj = m.make(4096)
            m.roundtrip("take", m.payload(obj, 4096))
            m.drop(obj)
            del obj
            secs += time.perf_counter() - t0
    return {"loops": loops, "seconds": secs, "marks": marks}


def bench_kill(name: str, hold: int) -> Dict[str, Any]:
    m = Method(name)
    shm_before = dev_shm()
    tag = "memfd:" if name == "hurray" else ("torch_" if name == "torch" else "psm_")
    gc.collect()
    base_maps = tagged_maps(tag)
    base_fds = counts()[0]
    objs = []
    for _ in range(hold):
        obj = m.make(4096)
        m.roundtrip("hold", m.payload(obj, 4096))
        if name == "shm":
            obj.close()  # the producer drops its mapping but cannot unlink (the consumer holds it)
        objs.append(obj)
    del obj
    objs.clear()
    gc.collect()
    time.sleep(0.1)
    # torch frees the producer's mapping when the producer drops a tensor,
    # whether or not the consumer still holds it: its count is near 0 here.
    held_maps = tagged_maps(tag) - base_maps
    base_maps = min(tagged_maps(tag), base_maps + (held_maps if held_maps < hold // 10 else 0))
    held_fds = counts()[0] - base_fds
    os.kill(m.proc.pid, signal.SIGKILL)
    t0 = time.perf_counter()
    m.proc.join()
    released_s: Optional[float] = None
    while time.perf_counter() - t0 < 10:
        if tagged_maps(tag) <= base_maps:
            released_s = time.perf_counter() - t0
            break
        time.sleep(0.001)
    time.sleep(0.1)
    left = sorted(dev_shm() - shm_before)
    out = {
        "held": hold,
        "producer_maps_while_held": held_maps,
        "producer_fds_while_held": held_fds,
        "all_released_s": released_s,
        "producer_maps_after": tagged_maps(tag) - base_maps,
        "producer_fds_after": counts()[0] - base_fds,
        "dev_shm_left": len(left),
    }
    for f in left:  # leave the machine clean
        try:
            os.unlink(os.path.join("/dev/shm", f))
        except OSError:
            pass
    m.conn.close()
    return out


def table(res: Dict[str, Any], methods: List[str], sizes: List[Tuple[int, str]]) -> str:
    lat = res["latency"]
    lines = [
        "| size | " + " | ".join(methods) + " | hurray / torch | hurray / shm |",
        "|---|" + "---:|" * (len(methods) + 2),
    ]
    for _, label in sizes:
        row = [f"{lat[f'{m} {label}']:.1f} µs" if f"{m} {label}" in lat else "-" for m in methods]
        h, t, s = (lat.get(f"{m} {label}") for m in ("hurray", "torch", "shm"))
        row.append(f"**{h / t:.2f}x**" if h and t else "-")
        row.append(f"**{h / s:.2f}x**" if h and s else "-")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    lines.append(f"\n(Pipe round trip alone, the floor: {lat['pipe']:.1f} µs.)")
    if "loop" in res:
        lines += [
            "",
            "| method | handoffs | µs each | producer fds, maps (start → mid → end) | "
            "consumer fds, maps (start → mid → end) |",
            "|---|---:|---:|---|---|",
        ]
        for m, r in res["loop"].items():
            p = " → ".join(f"{x['producer'][0]}, {x['producer'][1]}" for x in r["marks"])
            c = " → ".join(f"{x['consumer'][0]}, {x['consumer'][1]}" for x in r["marks"])
            lines.append(
                f"| {m} | {r['loops']} | {r['seconds'] / r['loops'] * 1e6:.0f} | {p} | {c} |"
            )
    if "kill" in res:
        held = next(iter(res["kill"].values()))["held"] if res["kill"] else KILL_HOLD
        lines += [
            "",
            f"| method (kill -9 holding {held}) | producer mappings held | "
            "all producer releases ran after | producer mappings, fds left | /dev/shm left |",
            "|---|---:|---|---|---:|",
        ]
        for m, r in res["kill"].items():
            t = r["all_released_s"]
            if r["producer_maps_while_held"] < r["held"] // 10:
                ts = "n/a: ran at the producer's drop, while the consumer still held them"
            else:
                ts = f"{t * 1000:.1f} ms" if t is not None else "> 10 s"
            lines.append(
                f"| {m} | {r['producer_maps_while_held']} | {ts} | "
                f"{r['producer_maps_after']}, {r['producer_fds_after']} | {r['dev_shm_left']} |"
            )
    return "\n".join(lines)


def chart(res: Dict[str, Any], path: str) -> None:
    """The handoff latencies per size (grouped bars) as a PNG (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lat = res["latency"]
    labels = [label for _, label in SIZES if any(k.endswith(" " + label) for k in lat)]
    methods = [m for m in ("hurray", "torch", "shm") if any(k.startswith(m + " ") for k in lat)]
    names = {
        "hurray": "hurray",
        "torch": "torch.multiprocessing",
        "shm": "shared_memory (no lifetime)",
    }
    fig, ax = plt.subplots(figsize=(7, 3.6))
    w = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        ys = [lat.get(f"{m} {label}", 0.0) for label in labels]
        xs = [j + (i - (len(methods) - 1) / 2) * w for j in range(len(labels))]
        bars = ax.bar(xs, ys, w, label=names[m])
        for b, y in zip(bars, ys):
            ax.annotate(
                f"{y:.0f}", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7
            )
    ax.axhline(lat["pipe"], color="grey", lw=0.8, ls="--", label="Pipe round trip (floor)")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("handoff round trip, median (µs)")
    ax.set_title("CPU tensor to another process and released (bench/ipc_handoff.py)", fontsize=9)
    ax.set_ylim(0, max(lat.values()) * 1.35)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke check: 20 repetitions, 4 KiB and 1 MiB, a 300-handoff loop, "
        "100 held at the kill",
    )
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--loop", type=int, default=None, help="handoffs in the loop (default 100000)")
    ap.add_argument("--methods", default="hurray,torch,shm")
    ap.add_argument("--json", default=None, help="write the results as JSON")
    ap.add_argument("--chart", default=None, help="draw the latencies as a PNG (matplotlib)")
    ap.add_argument("--from-json", default=None, help="no run: table and chart of saved results")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        print(saved["machine"])
        print(table(saved, args.methods.split(","), SIZES))
        if args.chart:
            chart(saved, args.chart)
        return 0
    methods = args.methods.split(",")
    reps = args.reps or (20 if args.quick else 400)
    loops = args.loop or (300 if args.quick else 100_000)
    sizes = SIZES[:2] if args.quick else SIZES
    res: Dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, Linux {platform.release()}"
    }
    res["latency"] = {}
    res["loop"] = {}
    for name in methods:  # one consumer per method for the latency and the loop
        m = Method(name)
        try:
            bench_latency(m, res["latency"], reps, sizes)
            if name in ("hurray", "torch"):
                res["loop"][name] = bench_loop(m, loops, 0.05 if args.quick else 0.2)
        finally:
            m.stop()
    hold = 100 if args.quick else KILL_HOLD
    res["kill"] = {m: bench_kill(m, hold) for m in methods if m in ("hurray", "torch")}
    print(res["machine"])
    print(table(res, methods, sizes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.chart:
        chart(res, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
