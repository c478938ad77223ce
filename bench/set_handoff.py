#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A whole state_dict to a worker process and back: hurray.pack's BufferDict
(one set message) vs torch.multiprocessing, side by side in one run
(issue 28).

    python bench/set_handoff.py [--rounds N] [--layers N] [--width N]

Needs torch and hurray importable (e.g. PYTHONPATH=build/python/hurray-pkg
with the test venv). The state_dict has the shapes of a small transformer:
--layers (default 41) blocks of 12 tensors (q, k, v, o weights, two attention
biases, a LayerNorm, the MLP's two weights and biases) of width --width
(default 224) plus embeddings and their norm, positions, a final LayerNorm
and a head: 500 float32 tensors, about 100 MiB. Both sides start from memory that is already
shareable, and both talk to one spawned worker over a multiprocessing.Queue
each way:

  hurray  weights = hurray.pack(sd) (one tensor group in one memfd); the
          BufferDict is put on the queue, the worker gets it (one set
          message: two fds through hurray's fd server), reads one element
          of every tensor and puts it back (the same memory, again one
          message), and the parent gets it;
  torch   the same tensors, share_memory_() (one fd each, the default
          'file_descriptor' strategy), the dict put on a torch.multiprocessing
          queue, the same work in the worker, back the same way.

Reported: the round trip's wall time (median of --rounds, after one
warm-up), the fds in flight for one send (the parent's open fds added by
pickling the dict with ForkingPickler, before any receiver fetched them),
and, for hurray, SIGKILL of a worker that holds the set: the time until the
parent's mapping of the group is gone (the sender's reference returned)
and the open fds of the parent afterwards against before.
"""

import argparse
import gc
import os
import platform
import statistics
import sys
import time


def transformer_state(layers: int, width: int):
    import torch

    g = torch.Generator().manual_seed(0)
    sd = {}
    hidden = 4 * width
    sd["embed.weight"] = torch.randn(2048, width, generator=g)
    sd["pos.weight"] = torch.randn(512, width, generator=g)
    for i in range(layers):
        p = f"blocks.{i}."
        for n in ("q", "k", "v", "o"):
            sd[p + f"attn.{n}.weight"] = torch.randn(width, width, generator=g)
        sd[p + "attn.qkv.bias"] = torch.randn(3 * width, generator=g)
        sd[p + "attn.o.bias"] = torch.randn(width, generator=g)
        sd[p + "ln1.weight"] = torch.ones(width)
        sd[p + "ln1.bias"] = torch.zeros(width)
        sd[p + "mlp.fc1.weight"] = torch.randn(hidden, width, generator=g)
        sd[p + "mlp.fc2.weight"] = torch.randn(width, hidden, generator=g)
        sd[p + "mlp.fc1.bias"] = torch.zeros(hidden)
        sd[p + "mlp.fc2.bias"] = torch.zeros(width)
    sd["embed.norm.weight"] = torch.ones(width)
    sd["embed.norm.bias"] = torch.zeros(width)
    sd["ln_f.weight"] = torch.ones(width)
    sd["ln_f.bias"] = torch.zeros(width)
    sd["head.weight"] = torch.randn(1000, width, generator=g)
    sd["head.bias"] = torch.zeros(1000)
    return sd


def touch(d) -> float:
    """Reads one element of every tensor (so each is really mapped)."""
    import torch

    total = 0.0
    for v in d.values():
        t = v if isinstance(v, torch.Tensor) else torch.from_dlpack(v)
        total += float(t.reshape(-1)[0])
    return total


def worker(q_in, q_out) -> None:
    while True:
        d = q_in.get()
        if d is None:
            return
        if isinstance(d, str) and d == "hold":
            held = q_in.get()
            q_out.put(len(held))
            time.sleep(3600)  # until killed
        touch(d)
        q_out.put(d)
        del d


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped(inode: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(" ".join(line.split()[3:5]) == inode for line in f)


def inode_of(address: int) -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return " ".join(parts[3:5])
    return ""


def in_flight(obj) -> int:
    """Fds this process opens to pickle obj for another process (held until
    a receiver fetches them); then fetched here, so none stays."""
    from multiprocessing.reduction import ForkingPickler

    time.sleep(0.2)  # lets the fd server accept an earlier connection first
    before = open_fds()
    data = ForkingPickler.dumps(obj)
    n = open_fds() - before
    back = ForkingPickler.loads(data)
    del back, data
    gc.collect()
    return n


def round_trips(ctx, q_cls, d, rounds: int):
    q_in, q_out = q_cls(), q_cls()
    p = ctx.Process(target=worker, args=(q_in, q_out))
    p.start()
    times = []
    try:
        for r in range(rounds + 1):
            t0 = time.perf_counter()
            q_in.put(d)
            back = q_out.get(timeout=120)
            t = time.perf_counter() - t0
            assert len(back) == len(d)
            del back
            if r:
                times.append(t)
        q_in.put(None)
    finally:
        p.join(60)
        if p.is_alive():
            p.kill()
    return times


def kill_while_held(ctx, weights) -> dict:
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker, args=(q_in, q_out))
    p.start()
    first = next(iter(weights.values()))
    inode = inode_of(first.data_ptr)
    q_in.put("hold")
    q_in.put(weights)
    n = q_out.get(timeout=120)
    assert n == len(weights)
    q_in.close()
    q_out.close()
    q_in.join_thread()
    q_out.join_thread()
    weights.clear()
    del first
    gc.collect()
    fds_held = open_fds()
    still = mapped(inode)
    t0 = time.perf_counter()
    p.kill()
    p.join(60)
    while mapped(inode) and time.perf_counter() - t0 < 10:
        time.sleep(0.001)
    returned = time.perf_counter() - t0
    p.close()
    del q_in, q_out, p
    gc.collect()
    return {
        "mapped_while_held": still,
        "returned_s": returned,
        "unmapped": not mapped(inode),
        "fds_while_held": fds_held,
        "fds_after": open_fds(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--layers", type=int, default=41)
    ap.add_argument("--width", type=int, default=224)
    args = ap.parse_args(argv)

    import torch
    import torch.multiprocessing as tmp

    import hurray

    tmp.set_sharing_strategy("file_descriptor")
    ctx = tmp.get_context("spawn")
    sd = transformer_state(args.layers, args.width)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    weights = hurray.pack(sd)
    shared_sd = {k: v.clone().share_memory_() for k, v in sd.items()}
    del sd

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, hurray "
        f"{hurray.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; {len(weights)} tensors, {nbytes / 2**20:.1f} MiB; "
        f"{args.rounds} round trips each (median), spawn workers"
    )
    in_flight(hurray.BufferDict(w=hurray.empty(1, shared=True)))  # starts the fd server
    from multiprocessing.reduction import ForkingPickler

    from hurray import _fdshare

    server = _fdshare._server
    p0 = server.npending
    data = ForkingPickler.dumps(weights)
    pending = server.npending - p0
    ForkingPickler.loads(data)
    del data
    fl_h = in_flight(weights)
    fl_t = in_flight(shared_sd)
    print(
        f"  fds in flight for one send: hurray {pending} (held by its fd server; the "
        f"parent's open fds +{fl_h}, with the set's lifetime watch), "
        f"torch.multiprocessing +{fl_t} open fds"
    )
    h = round_trips(ctx, ctx.Queue, weights, args.rounds)
    t = round_trips(ctx, ctx.Queue, shared_sd, args.rounds)
    mh, mt = statistics.median(h), statistics.median(t)
    print(
        f"  round trip (worker reads one element of each tensor): hurray {mh * 1e3:.2f} ms "
        f"(min {min(h) * 1e3:.2f}), torch.multiprocessing {mt * 1e3:.2f} ms "
        f"(min {min(t) * 1e3:.2f}); hurray/torch {mh / mt:.3f}x (target <= 0.1x)"
    )
    gc.collect()
    fds_before = open_fds()
    k = kill_while_held(ctx, weights)
    del weights
    gc.collect()
    print(
        f"  SIGKILL of a worker holding the set: mapped while held {k['mapped_while_held']}, "
        f"returned to the sender in {k['returned_s'] * 1e3:.1f} ms (target <= 1000), "
        f"unmapped {k['unmapped']}; parent fds {fds_before} before the worker, "
        f"{k['fds_while_held']} while held, {k['fds_after']} after; load "
        f"{os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
