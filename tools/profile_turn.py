"""Profiles the whole-turn benchmark (benches/turn_scenario.py) and writes its top entries.

Usage: python tools/profile_turn.py OUT.md [--turns N] [--label TEXT] [--store URL]

Builds the scenario, warms up, runs N turns under cProfile and writes a markdown report: the
median turn time under the profiler and outside it, the median CPU time of each step of a turn
outside the profiler (the thread's CPU time: another job on the machine slows it less than the
clock), then the top entries by own time and by cumulative time, with paths shortened to the
package. Wall-clock numbers on a shared machine are approximate, the ranking of the entries is
what matters. ``--store`` runs the turn on another store (e.g. ``postgresql://...``, an empty
database: the scenario fills it) instead of a fresh SQLite file.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pathlib
import pstats
import re
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benches")]

from turn_scenario import AGENT, THREAD, USER, Scenario, model_response  # noqa: E402

from memstrata import open_store  # noqa: E402

TOP = 15


def table(stats: pstats.Stats, key: str, turns: int) -> str:
    stats.sort_stats(key)
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.print_stats(TOP)
    rows = ["| own ms/turn | cumulative ms/turn | calls/turn | function |", "|---|---|---|---|"]
    for line in out.getvalue().splitlines():
        match = re.match(r"\s*([\d/]+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(.*)", line)
        if not match:
            continue
        calls, own, cumulative, where = match.groups()
        where = re.sub(r".*/site-packages/", "", where)
        where = re.sub(r".*/benches/", "benches/", where)
        ncalls = int(calls.split("/")[0]) / turns
        rows.append(
            f"| {float(own) * 1e3 / turns:.3f} | {float(cumulative) * 1e3 / turns:.3f} "
            f"| {ncalls:g} | `{where}` |"
        )
    return "\n".join(rows)


STEPS = ("open", "prepare", "working-memory update", "mind_recall", "memory_write", "observe")


def step_times(scenario: Scenario, turns: int) -> dict[str, float]:
    """The median CPU seconds of each step of ``turns`` turns (``Scenario.turn``, timed
    between its calls; the close is left out)."""
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    clock = time.thread_time
    for _ in range(turns):
        i, calls = scenario.next_turn()
        marks = [clock()]
        with scenario.stack.run(thread_id=THREAD, resource_id=USER, agent=AGENT) as run:
            marks.append(clock())
            run.prepare(scenario.messages)
            marks.append(clock())
            for name, arguments in calls:
                run.call_tool(name, arguments)
                marks.append(clock())
            run.observe(model_response(i, calls))
            marks.append(clock())
        for step, start, end in zip(STEPS, marks, marks[1:]):
            times[step].append(end - start)
    return {step: statistics.median(spent) for step, spent in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--label", default="")
    parser.add_argument("--store", default=None, help="a store URL (default: a SQLite file)")
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="memstrata-profile-"))
    store = open_store(args.store) if args.store else None
    scenario = Scenario(workdir, store=store)
    for _ in range(10):
        scenario.turn()
    plain = []
    for _ in range(args.turns):
        start = time.perf_counter()
        scenario.turn()
        plain.append(time.perf_counter() - start)
    steps = step_times(scenario, args.turns)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.turns):
        scenario.turn()
    profiler.disable()
    scenario.close()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    report = [
        f"# Whole-turn profile{': ' + args.label if args.label else ''}",
        "",
        f"`python tools/profile_turn.py` over {args.turns} turns of benches/turn_scenario.py "
        "(cProfile; approximate: a shared, busy machine).",
        "",
        f"- median turn without the profiler: {statistics.median(plain) * 1e3:.3f} ms",
        f"- profiled time per turn: {total * 1e3 / args.turns:.3f} ms",
        "",
        "## CPU time of each step (median, without the profiler)",
        "",
        "| step | ms |",
        "|---|---|",
        *(f"| {step} | {seconds * 1e3:.3f} |" for step, seconds in steps.items()),
        "",
        "## Top entries by own time",
        "",
        table(stats, "tottime", args.turns),
        "",
        "## Top entries by cumulative time",
        "",
        table(stats, "cumulative", args.turns),
        "",
    ]
    args.out.write_text("\n".join(report))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
