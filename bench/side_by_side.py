#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""libhurray beside tvm-ffi's C API: build, run, ratio table, chart.

One command (from the repository root, with a Python that has apache-tvm-ffi,
e.g. the test venv build/venv):

    build/venv/bin/python bench/side_by_side.py                 # full run, 3-4 min
    build/venv/bin/python bench/side_by_side.py --chart docs/side_by_side.png
    build/venv/bin/python bench/side_by_side.py --quick         # a few seconds, smoke check
    build/venv/bin/python bench/side_by_side.py --wide-path native,avx2,scalar   # one table each

It configures and builds bench/tvm_ffi_side_by_side.cc in a Release build
directory (build/bench; the `release` preset with HURRAY_TVM_FFI_PYTHON set
to the Python running this script, or --tvm-python), runs it with
interleaved repetitions (--benchmark_enable_random_interleaving) and prints,
as Markdown, the machine, the medians (CPU time) of ours and tvm-ffi's for
each operation, their ratio (ours / tvm-ffi), the floor of this machine and
the targets (docs/performance.md) beside the measured numbers. It never fails on a
number: the exit status says only whether building and running worked.

Each table names the path libhurray's wide-rank bound (ndim >= 8) took: the
widest this CPU has (AVX-512, AVX2 or scalar, as the library dispatches at
run time). --wide-path avx2 or scalar caps it for a run (through the
library's benchmark hook HURRAY_INTERNAL_WIDE_PATH, read when it is loaded;
it never turns on a path the CPU lacks), so a machine with AVX-512 also
measures what a CPU without it runs; a comma list runs the binary once per
path and prints a table for each.

--chart PATH draws ns against ndim and ns per consumer against N (ours
beside tvm-ffi and the floor) with matplotlib, installing it with pip first
when it is missing and this Python is a virtual environment's.
Results are described in docs/performance.md, "Side by side with tvm-ffi".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "hurray_tvm_ffi_side_by_side"
NDIMS = [1, 4, 16, 64]
FANOUTS = [1, 8, 64, 1024]
FANOUT_NDIM = 4  # keep in step with kFanOutNdim in the .cc

# (op, label, tvm-ffi op it is compared with or None)
NDIM_ROWS = [
    ("import_release", "import + release", "import_release"),
    ("export_delete", "export + deleter (consuming the handle)", "export_delete"),
    (
        "export_keep",
        "export keeping a reference (re-share 2 of a shared handle, export one)",
        "export_delete",
    ),
    (
        "export_keep_first",
        "export keeping a reference, first share (share 2, export one, release other)",
        "export_delete",
    ),
    ("roundtrip", "import, share, export, deleter (no unwrap possible)", "roundtrip"),
    ("validate", "hurray_buffer_validate alone", None),
]
FLOOR_ROWS = [
    ("atomic_add", "atomic add (lock xadd)"),
    ("malloc_free", "malloc + free (80 bytes)"),
    ("indirect_call", "indirect call"),
    ("copy80", "80-byte copy"),
]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kw)


def tvm_python(arg: str | None) -> str:
    """A Python that can import tvm_ffi (for its config helper)."""
    candidates = [arg] if arg else [sys.executable, str(ROOT / "build/venv/bin/python")]
    for py in candidates:
        if py and Path(py).exists():
            ok = (
                subprocess.run([py, "-c", "import tvm_ffi.config"], capture_output=True).returncode
                == 0
            )
            if ok:
                return py
    tried = ", ".join(c for c in candidates if c)
    sys.exit(
        f"side_by_side: no Python with apache-tvm-ffi found (tried {tried}); pass --tvm-python"
    )


def build(build_dir: Path, py: str) -> Path:
    run(
        [
            "cmake",
            "--preset",
            "release",
            "-B",
            str(build_dir),
            "-DHURRAY_BUILD_TESTS=OFF",
            "-DHURRAY_TVM_FFI_PYTHON=" + py,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    jobs = os.environ.get("HURRAY_JOBS", "2")
    run(["cmake", "--build", str(build_dir), "-j", jobs, "--target", TARGET], cwd=ROOT)
    return build_dir / "bench" / TARGET


def measure(
    binary: Path,
    reps: int,
    min_time: float,
    out_json: Path,
    extra: list[str],
    wide_path: str = "native",
) -> dict:
    cmd = [
        str(binary),
        f"--benchmark_repetitions={reps}",
        "--benchmark_enable_random_interleaving=true",
        f"--benchmark_min_time={min_time}",
        f"--benchmark_out={out_json}",
        "--benchmark_out_format=json",
        "--benchmark_format=console",
        *extra,
    ]
    env = dict(os.environ)
    env.pop("HURRAY_INTERNAL_WIDE_PATH", None)
    if wide_path != "native":
        env["HURRAY_INTERNAL_WIDE_PATH"] = wide_path
        print(f"+ (HURRAY_INTERNAL_WIDE_PATH={wide_path})", file=sys.stderr, flush=True)
    run(cmd, stdout=subprocess.DEVNULL, env=env)
    return json.loads(out_json.read_text())


def medians(report: dict) -> dict[str, float]:
    """Median CPU time in ns of each benchmark over its repetitions."""
    samples: dict[str, list[float]] = {}
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for b in report["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        samples.setdefault(b["run_name"], []).append(b["cpu_time"] * scale[b["time_unit"]])
    return {name: statistics.median(v) for name, v in samples.items()}


def machine(report: dict, py: str) -> list[str]:
    ctx = report.get("context", {})
    model = platform.processor() or "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    gov_path = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    governor = gov_path.read_text().strip() if gov_path.exists() else "not visible (VM)"
    tvm_version = (
        subprocess.run(
            [py, "-c", "import importlib.metadata as m; print(m.version('apache-tvm-ffi'))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        or "?"
    )
    cxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()
    return [
        f"- CPU: {model}, {ctx.get('num_cpus', os.cpu_count())} cores at "
        f"{ctx.get('mhz_per_cpu', '?')} MHz, governor {governor}",
        f"- load average at start: {', '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}",
        f"- apache-tvm-ffi {tvm_version}; libhurray Release ({cxx[0] if cxx else 'g++ ?'}); "
        f"Google Benchmark, library built as {ctx.get('library_build_type', '?')}",
        f"- {report['_reps']} interleaved repetitions, min time {report['_min_time']} s each; "
        "medians of CPU time",
        f"- libhurray's wide-rank bound (ndim >= 8) ran the **{wide_path_of(report)}** path"
        + (
            " (capped with --wide-path)"
            if report.get("_wide_path", "native") != "native"
            else " (the widest this CPU has)"
        ),
    ]


def wide_path_of(report: dict) -> str:
    return report.get("context", {}).get("hurray_wide_path", "unknown (older binary)")


def fmt(ns: float | None) -> str:
    if ns is None:
        return "-"
    return f"{ns:.1f}" if ns < 1000 else f"{ns:.0f}"


def tables(m: dict[str, float]) -> tuple[list[str], list[tuple[str, float, float | None, str]]]:
    """Markdown lines, and (target, measured, limit, unit) checks."""
    get = m.get
    out = [
        "| operation (ns, ours / tvm-ffi = ratio) | "
        + " | ".join(f"ndim {d}" for d in NDIMS)
        + " |",
        "|---|" + "---|" * len(NDIMS),
    ]
    for op, label, theirs in NDIM_ROWS:
        cells = []
        for d in NDIMS:
            ours = get(f"{op}/ours/ndim:{d}")
            if theirs is None:
                cells.append(fmt(ours))
                continue
            tvm = get(f"{theirs}/tvm_ffi/ndim:{d}")
            ratio = f"{ours / tvm:.2f}x" if ours and tvm else "-"
            cells.append(f"{fmt(ours)} / {fmt(tvm)} = **{ratio}**")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"Fan-out at ndim {FANOUT_NDIM}, ns per consumer including its release "
        "(ours / tvm-ffi N IncRef + N DecRef = ratio):",
        "",
        "| operation | " + " | ".join(f"N {n}" for n in FANOUTS) + " |",
        "|---|" + "---|" * len(FANOUTS),
    ]
    for op, label in [
        ("fanout", "hurray_share of a fresh handle to N + N releases"),
        ("reshare", "re-share a shared handle to N + N-1 releases"),
    ]:
        cells = []
        for n in FANOUTS:
            ours, tvm = get(f"{op}/ours/n:{n}"), get(f"fanout/tvm_ffi/n:{n}")
            if ours is None or tvm is None:
                cells.append("-")
                continue
            cells.append(f"{fmt(ours / n)} / {fmt(tvm / n)} = **{ours / tvm:.2f}x**")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "Floor of this machine:", "", "| operation | ns |", "|---|---|"]
    for op, label in FLOOR_ROWS:
        out.append(f"| {label} | {fmt(get(op + '/floor'))} |")

    checks: list[tuple[str, float, float | None, str]] = []
    for op, _, theirs in NDIM_ROWS:
        if theirs is None:
            continue
        for d in NDIMS:
            ours, tvm = get(f"{op}/ours/ndim:{d}"), get(f"{theirs}/tvm_ffi/ndim:{d}")
            if ours and tvm:
                tight = op in ("export_keep", "roundtrip") and d <= 4
                checks.append(
                    (f"{op} at ndim {d}, ours / tvm-ffi", ours / tvm, 0.8 if tight else 1.0, "x")
                )
    for op in ("fanout", "reshare"):
        for n in FANOUTS[1:]:
            ours = get(f"{op}/ours/n:{n}")
            if ours:
                checks.append((f"{op} N {n}, ns per consumer", ours / n, 8.0, "ns"))
    plain = get(f"export_delete/ours/ndim:{FANOUT_NDIM}")
    for op in ("fanout", "reshare"):
        one = get(f"{op}/ours/n:1")
        if one and plain:
            checks.append((f"{op} to 1 / plain export (ndim {FANOUT_NDIM})", one / plain, 1.2, "x"))
    return out, checks


def check_lines(checks) -> list[str]:
    out = ["| target | measured | limit | |", "|---|---|---|---|"]
    for what, value, limit, unit in checks:
        met = "met" if limit is not None and value <= limit else "missed"
        out.append(f"| {what} | {value:.2f}{unit} | <= {limit}{unit} | {met} |")
    return out


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if sys.prefix == sys.base_prefix:
            sys.exit(
                "side_by_side: matplotlib is missing; run this script with a venv's Python "
                "(it installs matplotlib there) or install matplotlib"
            )
        run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    return matplotlib, plt


def chart(m: dict[str, float], path: Path) -> None:
    matplotlib, plt = ensure_matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5.6), dpi=72)
    colours = {
        "import_release": "tab:blue",
        "export_delete": "tab:orange",
        "roundtrip": "tab:green",
        "validate": "tab:purple",
        "export_keep": "tab:red",
    }
    for op, label, theirs in NDIM_ROWS:
        if op == "export_keep_first":
            continue
        ys = [m.get(f"{op}/ours/ndim:{d}") for d in NDIMS]
        short = label.split(" (")[0]
        left.plot(NDIMS, ys, "o-", color=colours[op], label=f"ours: {short}")
        if theirs and theirs == op:
            left.plot(
                NDIMS,
                [m.get(f"{op}/tvm_ffi/ndim:{d}") for d in NDIMS],
                "s--",
                color=colours[op],
                alpha=0.7,
                label=f"tvm-ffi: {short}",
            )
    for op, style in (("atomic_add", ":"), ("malloc_free", "-.")):
        if op + "/floor" in m:
            left.axhline(m[op + "/floor"], color="grey", linestyle=style, label=f"floor: {op}")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks(NDIMS, [str(d) for d in NDIMS])
    left.set_xlabel("ndim")
    left.set_ylabel("ns (median CPU time)")
    left.set_title("per operation against ndim")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)

    for op, style, colour, label in (
        ("fanout/ours", "o-", "tab:blue", "ours: share to N"),
        ("reshare/ours", "o-", "tab:cyan", "ours: re-share to N"),
        ("fanout/tvm_ffi", "s--", "tab:orange", "tvm-ffi: N IncRef+DecRef"),
    ):
        right.plot(
            FANOUTS,
            [m[f"{op}/n:{n}"] / n if f"{op}/n:{n}" in m else None for n in FANOUTS],
            style,
            color=colour,
            label=label,
        )
    if "atomic_add/floor" in m and "copy80/floor" in m:
        right.axhline(
            m["atomic_add/floor"] + m["copy80/floor"],
            color="grey",
            linestyle=":",
            label="floor: atomic add + 80-byte copy",
        )
    right.axhline(8.0, color="red", linewidth=0.8, linestyle="--", label="target: 8 ns (N >= 8)")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xticks(FANOUTS, [str(n) for n in FANOUTS])
    for axis in (left, right):  # plain numbers on the log y axes
        axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axis.yaxis.set_minor_formatter(
            matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}" if f"{y:e}"[0] in "25" else "")
        )
        axis.tick_params(axis="y", which="minor", labelsize=7)
    right.set_xlabel(f"N consumers (ndim {FANOUT_NDIM})")
    right.set_ylabel("ns per consumer, release included")
    right.set_title("fan-out against N")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"chart: {path}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds (2 short repetitions)")
    ap.add_argument("--repetitions", type=int, default=None, help="default 9 (2 with --quick)")
    ap.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds per repetition, default 0.2 (0.01 with --quick)",
    )
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build/bench")
    ap.add_argument(
        "--tvm-python", help="Python with apache-tvm-ffi (default: this one, else build/venv)"
    )
    ap.add_argument("--no-build", action="store_true", help="run the binary already in --build-dir")
    ap.add_argument("--json", type=Path, help="also keep Google Benchmark's JSON here")
    ap.add_argument("--from-json", type=Path, help="print the tables of an earlier --json (no run)")
    ap.add_argument("--chart", type=Path, help="draw the chart to this PNG")
    ap.add_argument("--filter", help="--benchmark_filter for the binary")
    ap.add_argument(
        "--wide-path",
        default="native",
        help="comma list of native, avx2, scalar: cap libhurray's wide-rank path "
        "for a run (one run and table each; default native)",
    )
    args = ap.parse_args()
    paths = [p.strip() for p in args.wide_path.split(",") if p.strip()]
    for p in paths:
        if p not in ("native", "avx2", "scalar"):
            sys.exit(f"side_by_side: --wide-path {p}: one of native, avx2, scalar")
    reps = args.repetitions or (2 if args.quick else 9)
    min_time = args.min_time or (0.01 if args.quick else 0.2)

    py = tvm_python(args.tvm_python)
    reports = []
    if args.from_json:
        reports.append(json.loads(args.from_json.read_text()))
    else:
        binary = args.build_dir / "bench" / TARGET if args.no_build else build(args.build_dir, py)
        extra = [f"--benchmark_filter={args.filter}"] if args.filter else []
        for p in paths:
            out_json = args.json or args.build_dir / "side_by_side.json"
            if len(paths) > 1:
                out_json = out_json.with_name(f"{out_json.stem}.{p}{out_json.suffix}")
            report = measure(binary, reps, min_time, out_json, extra, p)
            report["_reps"], report["_min_time"], report["_wide_path"] = reps, min_time, p
            out_json.write_text(json.dumps(report, indent=1))
            reports.append(report)
    for i, report in enumerate(reports):
        m = medians(report)
        lines, checks = tables(m)
        head = f"## Wide-rank path: {wide_path_of(report)}" if len(reports) > 1 else None
        print(
            "\n".join(
                ([head, ""] if head else [])
                + ["Machine:", ""]
                + machine(report, py)
                + [""]
                + lines
                + ["", "Targets (docs/performance.md):", ""]
                + check_lines(checks)
                + [""]
            )
        )
        if args.chart and i == 0:
            chart(m, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
