"""How long an event loop kept its tasks waiting: the measure of a call that blocks the loop."""

from __future__ import annotations

import asyncio
import time


async def loop_lag(seconds: float, interval: float = 0.005) -> float:
    """The longest the event loop kept a ticking task waiting past its tick, over ``seconds``."""
    worst = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        await asyncio.sleep(interval)
        worst = max(worst, time.perf_counter() - start - interval)
    return worst
