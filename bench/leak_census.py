#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The leak census (issue 29, section 2): hand-offs of a 4 KiB CPU tensor from a
producer process to a consumer process with random SIGKILLs, through
libhurray's C API and the tools people use instead, and what each leaves
behind. A benchmark, not a test: nothing fails on its numbers.

    python bench/leak_census.py                  # 1e5 hand-offs per tool (long)
    python bench/leak_census.py --quick          # 2,000 per tool: a smoke run
    python bench/leak_census.py --tools hurray-c,shm --handoffs 20000
    python bench/leak_census.py --json out.json --chart docs/leak_census.png
    python bench/leak_census.py --from-json out.json --chart docs/leak_census.png

Tools: hurray-c (hurray_alloc shareable, hurray_ipc_send / hurray_ipc_recv
through ctypes on the libhurray.so of the installed hurray package),
hurray-mp (hurray.empty(shared=True) through hurray's ForkingPickler
reducer and fd server), hurray-mp-numpy (NumPy memory, copied once at
export), torch-fd / torch-fs (torch.multiprocessing's two sharing
strategies), shm (multiprocessing.shared_memory, its name sent) and ray
(ray.put in a producer actor, ray.get in a consumer actor, either killed).

Each hand-off is killed with probability --rate (1 %), on either side, at a
point drawn at random (census/roles.py: the producer after making the
tensor, after sending it, after its return; the consumer before mapping,
while holding, during its release, after it). A killed process is replaced
and the run goes on. Then the run waits up to --settle seconds for the
returns (HURRAY_MP_PENDING_SECONDS is set to --pending for the run, so that
the fd server drops offers a killed consumer never fetched) and counts what
is left behind (census/report.py's COLUMNS say what each column counts).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Dict, List

from census import report
from census.supervise import run_tool
from census.tools import TOOLS

ALL = list(TOOLS) + ["ray"]


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"Linux {platform.release()}, load average {os.getloadavg()[0]:.1f} at the start"
    )


def run_one(tool: str, args: argparse.Namespace, n: int) -> Dict[str, Any]:
    print(f"{tool}: {n} hand-offs, rate {args.rate}", file=sys.stderr)
    if tool == "ray":
        from census.ray_tool import run_ray

        return run_ray(n, args.seed, args.rate, args.settle)
    return run_tool(tool, n, args.seed, args.rate, args.settle)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="2,000 hand-offs per tool (ray: 200)")
    ap.add_argument("--handoffs", type=int, default=None, help="per tool (default 100000)")
    ap.add_argument("--ray-handoffs", type=int, default=None, help="for ray (default: --handoffs)")
    ap.add_argument(
        "--per-tool",
        default="",
        help="hand-offs for some tools, overriding --handoffs: e.g. torch-fs=10000,shm=20000",
    )
    ap.add_argument("--tools", default=",".join(ALL), help=f"comma-separated, of {','.join(ALL)}")
    ap.add_argument("--rate", type=float, default=0.01, help="share of hand-offs with a kill")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds at most to settle")
    ap.add_argument("--pending", type=float, default=2.0, help="HURRAY_MP_PENDING_SECONDS")
    ap.add_argument("--json", default=None, help="write the results as JSON")
    ap.add_argument("--chart", default=None, help="draw what is left behind as a PNG (matplotlib)")
    ap.add_argument("--from-json", default=None, help="no run: table and chart of saved results")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            res = json.load(f)
    else:
        os.environ["HURRAY_MP_PENDING_SECONDS"] = str(args.pending)
        n = args.handoffs or (2000 if args.quick else 100_000)
        nray = args.ray_handoffs or (200 if args.quick else n)
        res = {"machine": machine(), "command": " ".join(sys.argv), "tools": []}
        per = {k: int(v) for k, v in (kv.split("=") for kv in args.per_tool.split(",") if kv)}
        for tool in args.tools.split(","):
            res["tools"].append(run_one(tool, args, per.get(tool, nray if tool == "ray" else n)))
            if args.json:  # after every tool: a long run keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(res, f, indent=1)
    results: List[Dict[str, Any]] = res["tools"]
    print(res["machine"])
    print(report.table(results))
    print(report.notes(results))
    if args.chart and not report.chart(results, args.chart):
        print("matplotlib missing: no chart", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
