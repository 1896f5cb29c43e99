"""Tasks cancelled at a store call of an async turn, as a server cancels them (a client gone, a
timeout, a sibling failing): the store call runs to its end and the cancellation is raised
after it, never turned into a tool result; what the run shows afterwards is what the store
holds; the next call of the same run, and the next turn, work on a whole state."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata._bridge import await_, in_thread

SCHEMA = {
    "type": "object",
    "properties": {
        "tasks": {"type": "object", "additionalProperties": {"type": "string"}},
        "owner": {"type": "string"},
    },
}


class CancellingStore(SQLiteStore):
    """An SQLite store that cancels ``victim`` at the ``at``-th store call made by async layer
    code (1 for the next), and serves every such call in a worker thread, as it does when
    another connection holds the file: the task is suspended in the call when the
    cancellation comes, as it would be on a busy server."""

    victim: asyncio.Task[Any] | None = None
    at = 0
    calls = 0
    cancelled_in: str | None = None

    def cancel_at(self, victim: asyncio.Task[Any], at: int = 1) -> None:
        self.victim, self.at, self.calls, self.cancelled_in = victim, at, 0, None

    def _serve_bridged(
        self, name: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        self.calls += 1
        if self.victim is not None and self.calls == self.at:
            self.victim.cancel()
            self.victim, self.cancelled_in = None, name
        return await_(in_thread(method, *args, **kwargs), finish=True)


async def cancelled_call(store: CancellingStore, call: Any, at: int = 1) -> str | None:
    """Runs ``call`` (a coroutine) as a task cancelled at its ``at``-th store call; returns
    the call it was cancelled in, after checking that the cancellation reached the caller."""
    task = asyncio.ensure_future(call)
    store.cancel_at(task, at)
    with pytest.raises(asyncio.CancelledError):
        await task
    return store.cancelled_in


def test_a_run_shows_the_working_memory_a_cancelled_update_stored(
    tmp_path: pathlib.Path,
) -> None:
    """A server that times a tool call out and goes on with the run (``asyncio.wait_for``
    around ``acall_tool``, the timeout caught): the update was stored, as its store call ran to
    its end. The run's next prompt shows it, and a replace that follows is no conflict with
    the run's own write."""
    store = CancellingStore(tmp_path / "s.db")
    stack = MemoryStack([WorkingMemory(schema=SCHEMA)], store=store)

    async def main() -> tuple[str, str, dict[str, Any]]:
        async with stack.arun(thread_id="t", resource_id="u") as run:
            first = await run.acall_tool("working-memory/update", {"owner": "first"})
            assert first["ok"], first
            update = run.acall_tool("working-memory/update", json.dumps({"owner": "second"}))
            assert await cancelled_call(store, update) == "put_if_version"
            prompt = "\n".join(m["content"] for m in await run.aprepare([]))
            snapshot = json.dumps(run.layer("working-memory").snapshot)
            replaced = await run.acall_tool(
                "working-memory/replace", json.dumps({"owner": "third", "tasks": {}})
            )
            return prompt, snapshot, replaced

    prompt, snapshot, replaced = asyncio.run(main())
    assert '"owner": "second"' in prompt, prompt
    assert "second" in snapshot, snapshot
    assert replaced["ok"], replaced
    with stack.run(thread_id="t", resource_id="u") as run:
        assert run.layer("working-memory").snapshot == {"owner": "third", "tasks": {}}
    store.close()
