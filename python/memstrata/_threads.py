"""The async twins' one way to run blocking work: on a worker thread. ``asyncio`` is imported
when an async method is first awaited, not with memstrata (it brings ``ssl`` along: tens of
milliseconds that a sync caller never needs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    import asyncio

    return await asyncio.to_thread(fn, *args, **kwargs)
