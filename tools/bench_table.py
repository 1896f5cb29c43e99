"""Renders target/bench-results.jsonl (written by benches/benchkit.py) as a markdown table.

Usage: python tools/bench_table.py [results.jsonl]  — prints the table for the README, with the
machine the numbers came from. Each row is one comparison from one `make bench` run.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import sys


def fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def show(key: str, value: object) -> str:
    """Seconds are rendered with units; ratios and byte rates are plain numbers."""
    if isinstance(value, float) and not any(w in key for w in ("ratio", "bytes", "per_second")):
        return fmt(value)
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def machine() -> str:
    model = ""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = model or platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> int:
    path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-results.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(f"Measured on {machine()}, one `make bench` run (median per call).\n")
    print("| benchmark | memstrata | peer | peer time | peer / memstrata | target |")
    print("|---|---|---|---|---|---|")
    comparisons = [r for r in rows if isinstance(r.get("ours"), dict) and r.get("peers")]
    for row in comparisons:
        first = True
        for peer, timing in row["peers"].items():
            ours = fmt(row["ours"]["median"]) if first else ""
            title = row["title"] if first else ""
            target = row.get("target", "") if first else ""
            print(
                f"| {title} | {ours} | {peer} | {fmt(timing['median'])} "
                f"| {row['ratios'][peer]:.2f}x | {target} |"
            )
            first = False
    extras = [row for row in rows if row not in comparisons]
    if extras:
        print()
        for row in extras:
            fields = ", ".join(
                f"{k} {show(k, v)}"
                for k, v in row.items()
                if k not in ("title", "machine") and not isinstance(v, (dict, list))
            )
            if fields:
                print(f"- {row['title']}: {fields}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
