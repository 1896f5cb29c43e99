"""Shared benchmark plumbing: time our code and its peers in the same run and print ratios.

Every benchmark calls :func:`compare`: pytest-benchmark times our function (so its table and
``--benchmark-json`` work as usual), the peers are timed here with the same method (median of
many calls, each timing a batch big enough to swamp the clock), and one line per peer prints
``peer / ours`` so "4.0x" means we are four times faster. Results are also appended to
``target/bench-results.jsonl`` for the README table.
"""

from __future__ import annotations

import json
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "target" / "bench-results.jsonl"


@dataclass
class Timing:
    """Per-call seconds: median, p95 and p99 over the timed batches."""

    median: float
    p95: float
    p99: float
    calls: int


def timed(fn: Callable[[], Any], *, min_time: float = 0.5, max_batches: int = 400) -> Timing:
    """Times ``fn`` like pytest-benchmark: calibrate a batch size, then take many batches."""
    fn()  # warm-up: imports, caches, lazy initialisation
    batch = 1
    while True:
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= 0.002 or batch >= 1 << 20:
            break
        batch *= 2
    samples: list[float] = []
    deadline = time.perf_counter() + min_time
    while len(samples) < 5 or (time.perf_counter() < deadline and len(samples) < max_batches):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - start) / batch)
    samples.sort()
    q = statistics.quantiles(samples, n=100) if len(samples) >= 2 else samples * 99
    return Timing(statistics.median(samples), q[94], q[98], len(samples) * batch)


def fmt_seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def compare(
    benchmark: Any,
    title: str,
    ours: Callable[[], Any],
    peers: dict[str, Callable[[], Any]],
    *,
    target: str = "",
) -> dict[str, float]:
    """Benchmarks ``ours`` with pytest-benchmark, times each peer, prints and returns ratios."""
    benchmark(ours)
    mine = timed(ours)
    lines = [f"\n[{title}] memstrata: {fmt_seconds(mine.median)} per call (median)"]
    ratios: dict[str, float] = {}
    peer_timings: dict[str, dict[str, float]] = {}
    for name, fn in peers.items():
        t = timed(fn)
        ratios[name] = t.median / mine.median
        peer_timings[name] = asdict(t)
        lines.append(f"  vs {name}: {fmt_seconds(t.median)}  -> {ratios[name]:.2f}x")
    if target:
        lines.append(f"  target: {target}")
    print("\n".join(lines))
    record(
        {
            "title": title,
            "ours": asdict(mine),
            "peers": peer_timings,
            "ratios": ratios,
            "target": target,
        }
    )
    return ratios


def record(entry: dict[str, Any]) -> None:
    """Appends one result, with the machine it ran on, to target/bench-results.jsonl."""
    entry = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), **entry}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
