# SPDX-License-Identifier: Apache-2.0
"""The census table (Markdown) and chart (matplotlib, optional)."""

from __future__ import annotations

from typing import Any, Dict, List

# (heading, what it counts)
COLUMNS = [
    ("hand-offs", "hand-offs started (each one claimed by a producer before it began)"),
    ("kills p / c", "SIGKILLs of producers / consumers (each replaced)"),
    (
        "fds",
        "open fds of the surviving producer + consumer beyond what each held "
        "after its first hand-off",
    ),
    (
        "fds, killed",
        "the largest such growth of any killed producer / consumer, taken at the start "
        "of the hand-off it was killed in",
    ),
    ("/dev/shm", "entries in /dev/shm new since the start of this tool's run"),
    ("memfds", "/proc/*/fd links to /memfd: in every process of the run's tree"),
    (
        "mapped",
        "bytes of shared tensor mappings (memfd, /dev/shm, torch_, psm_, plasma) "
        "in the survivors beyond their first hand-off",
    ),
    ("RSS", "RSS growth of the survivors since their first hand-off, KiB"),
    ("unreleased", "surviving producer: allocations - producer releases (see 'counted')"),
]


def row(r: Dict[str, Any]) -> List[str]:
    if "skipped" in r:
        return [r.get("label", r["tool"]), "skipped: " + r["skipped"]] + [""] * (len(COLUMNS) - 1)
    p, c = r["producer"], r["consumer"]
    return [
        r["label"],
        str(r["handoffs"]),
        f"{r['kills']['producer']} / {r['kills']['consumer']}",
        f"{p['fds'] + c['fds']} ({p['fds']} + {c['fds']})",
        f"{p.get('killed_fds_max', '-')} / {c.get('killed_fds_max', '-')}",
        str(len(r["dev_shm_new"])),
        str(r["memfds_all"]),
        str(p["mapped_bytes"] + c["mapped_bytes"]),
        f"{p['rss_kib']} + {c['rss_kib']}",
        f"{r['allocs'] - r['releases']} of {r['allocs']}",
    ]


def table(results: List[Dict[str, Any]]) -> str:
    lines = [
        "| tool | " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines)


def notes(results: List[Dict[str, Any]]) -> str:
    out = []
    for r in results:
        if "skipped" in r:
            continue
        out.append(
            f"- {r['tool']}: {r['seconds']} s, load {r['load'][0]} -> {r['load'][1]}, "
            f"settled in {r['settle_s']} s; survivors made {r['producer']['handoffs']} / "
            f"{r['consumer']['handoffs']} hand-offs; receives that failed "
            f"{r['failed_receives']}; other exits {r['other_exits'] or 'none'}; "
            f"ipc exports / returns of the survivor {r['exports']} / {r['returns']}; "
            f"memfd:hurray mappings in the producer {r['memfd_maps_producer']}; "
            f"/dev/shm left: {r['dev_shm_new'][:5]}{' ...' if len(r['dev_shm_new']) > 5 else ''}; "
            f"counted: {r['counts']}"
        )
    return "\n".join(out)


def chart(results: List[Dict[str, Any]], path: str) -> bool:
    """Left behind per tool (log scale, 0 drawn at the floor); False when
    matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rs = [r for r in results if "skipped" not in r]
    kinds = [
        ("fds", lambda r: r["producer"]["fds"] + r["consumer"]["fds"]),
        ("/dev/shm entries", lambda r: len(r["dev_shm_new"])),
        ("memfds", lambda r: r["memfds_all"]),
        (
            "mapped KiB",
            lambda r: (r["producer"]["mapped_bytes"] + r["consumer"]["mapped_bytes"]) / 1024,
        ),
        ("unreleased", lambda r: r["allocs"] - r["releases"]),
    ]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    w = 0.8 / len(kinds)
    for k, (_, f) in enumerate(kinds):
        ys = [max(0.0, float(f(r))) for r in rs]
        xs = [j + (k - (len(kinds) - 1) / 2) * w for j in range(len(rs))]
        shown = [(x, y) for x, y in zip(xs, ys) if y > 0]
        ax.bar([x for x, _ in shown], [y for _, y in shown], w, color=f"C{k}")
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.0f}", (x, max(y, 0.6)), ha="center", va="bottom", fontsize=6)
    ax.set_yscale("log")
    ax.set_ylim(0.5, 5000)
    ax.set_xlim(-0.6, len(rs) - 0.4)
    ticks = [f"{r['tool']}\n{r['handoffs']}" for r in rs]
    ax.set_xticks(range(len(rs)), ticks, fontsize=7)
    ax.set_ylabel("left behind after the run (0: no bar)")
    ax.set_title(
        "Leak census: hand-offs per tool under the name, ~1% SIGKILLed (bench/leak_census.py)",
        fontsize=9,
    )
    patches = [Patch(color=f"C{k}", label=name) for k, (name, _) in enumerate(kinds)]
    ax.legend(handles=patches, fontsize=7, ncol=5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True
