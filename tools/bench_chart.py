"""Draws target/bench-results.jsonl (written by benches/benchkit.py) as a bar chart.

Usage: python tools/bench_chart.py [results.jsonl] [out.png]  — `make bench` writes
docs/bench.png, which the README shows. One pair of bars per comparison: memstrata's median
time and its first (main) peer's, on a log scale, with the ratio peer / memstrata beside them.
When a benchmark ran more than once, the last result counts.
"""

from __future__ import annotations

import json
import pathlib
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI
import matplotlib.pyplot as plt

OURS_COLOR = "#1f6fb2"
PEER_COLOR = "#c0c0c0"
LABEL_WIDTH = 52


def comparisons(rows: list[dict]) -> list[tuple[str, float, str, float]]:
    """``(title, our median, main peer, its median)`` per benchmark, in first-run order."""
    latest: dict[str, tuple[str, float, str, float]] = {}
    for row in rows:
        ours, peers = row.get("ours"), row.get("peers")
        if not isinstance(ours, dict) or not peers:
            continue
        peer, timing = next(iter(peers.items()))
        latest[row["title"]] = (row["title"], ours["median"], peer, timing["median"])
    return list(latest.values())


def fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def draw(data: list[tuple[str, float, str, float]], out: pathlib.Path) -> None:
    height = 0.62 * len(data) + 1.6
    fig, ax = plt.subplots(figsize=(13, height))
    for i, (_title, ours, _peer, theirs) in enumerate(data):
        y = len(data) - 1 - i
        ax.barh(y + 0.19, ours, height=0.36, color=OURS_COLOR)
        ax.barh(y - 0.19, theirs, height=0.36, color=PEER_COLOR)
        ax.text(ours * 1.08, y + 0.19, fmt(ours), va="center", fontsize=7)
        ax.text(
            theirs * 1.08,
            y - 0.19,
            f"{fmt(theirs)}  ({theirs / ours:.2g}x)",
            va="center",
            fontsize=7,
            color="#555555",
        )
    labels = [
        "\n".join(textwrap.wrap(f"{title}  [vs {peer}]", LABEL_WIDTH)[:3])
        for title, _ours, peer, _theirs in data
    ]
    ax.set_yticks(range(len(data)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=7)
    ax.set_xscale("log")
    smallest = min(min(d[1], d[3]) for d in data)
    largest = max(max(d[1], d[3]) for d in data)
    ax.set_xlim(smallest / 3, largest * 30)
    ax.set_ylim(-0.7, len(data) - 0.3)
    ax.set_xlabel("median time per call (log scale; shorter is faster)")
    ax.set_title("memstrata (blue) against its main peer (grey), same process, same data")
    ax.grid(axis="x", which="major", color="#e5e5e5")
    ax.set_axisbelow(True)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> int:
    path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-results.jsonl")
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "docs/bench.png")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    data = comparisons(rows)
    if not data:
        print(f"{path} holds no comparison to draw", file=sys.stderr)
        return 1
    draw(data, out)
    print(f"wrote {out} ({len(data)} benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
