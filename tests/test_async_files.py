"""Files the layers write during an async turn (tool results kept as files, the team state, the
context gate's checkpoints, a scope's result files erased): each blocking file operation (an
fsync, a rename, a link, an unlink) runs in a worker thread, never on the event loop's thread,
where an fsync would hold every other conversation on the loop for milliseconds. The sync
forms still write in place, and what the files hold is the same."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memstrata import (
    ContextGate,
    InMemoryStore,
    MemoryStack,
    RecoverableContextError,
    StateEntry,
    TeamState,
    ToolResults,
)

BIG_RESULT = "\n".join(f"row {k}: region eu-{k % 5} latency {k * 7 % 300} ms" for k in range(800))
OTHER_RESULT = BIG_RESULT.replace("latency", "delay")
# The blocking calls a file write or removal makes, by the names safe_files calls them by.
BLOCKING = ("fsync", "replace", "rename", "link", "unlink", "rmdir")


class Calls:
    """Which thread made each blocking file call (``(name, thread id)``, in order)."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int]] = []

    def on(self, thread: int) -> list[str]:
        """The names of the calls made on ``thread``."""
        return [name for name, made_on in self.made if made_on == thread]

    def names(self) -> set[str]:
        return {name for name, _ in self.made}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Notes the thread of every blocking file call, then makes the real call."""
    noted = Calls()

    def noting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            noted.made.append((name, threading.get_ident()))
            return real(*args, **kwargs)

        return call

    for name in BLOCKING:
        monkeypatch.setattr(os, name, noting(name, getattr(os, name)))
    yield noted


def tool_message(call_id: str, content: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Check the report."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "report", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def test_tool_results_offloaded_by_an_async_prepare_are_written_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    results = ToolResults(tool_calls_dir=tmp_path / "results")
    stack = MemoryStack([results], store=InMemoryStore())

    async def main() -> tuple[int, list[dict[str, Any]]]:
        async with stack.arun(thread_id="t", resource_id="u") as run:
            prepared = await run.aprepare(tool_message("call_1", BIG_RESULT))
            read = await run.acall_tool("read_tool_result", {"call_id": "call_1"})
            assert read["content"] == BIG_RESULT[: len(read["content"])], read
        return threading.get_ident(), prepared

    loop, prepared = asyncio.run(main())
    assert "fsync" in calls.names()  # the result was written, and synced
    assert calls.on(loop) == []
    assert prepared[-1]["content"].startswith("[tool result offloaded")
    with stack.run(thread_id="t", resource_id="u") as run:
        assert run.layer("tool-results").read_tool_result("call_1")["total_chars"] == len(
            BIG_RESULT
        )


def test_a_reused_call_id_offloaded_by_aoffload_is_moved_and_written_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    """The newer text under a call_id that holds another: the older text is linked under its
    derived id (alias), then the newer written (write): both off the loop."""
    results = ToolResults(tool_calls_dir=tmp_path / "results")

    async def main() -> int:
        await results.aoffload("call_0", BIG_RESULT)
        await results.aoffload("call_0", OTHER_RESULT)
        return threading.get_ident()

    loop = asyncio.run(main())
    assert {"fsync", "link", "replace"} <= calls.names()
    assert calls.on(loop) == []
    newer = results.read_tool_result("call_0", max_tokens=32_000)
    assert newer["content"] == OTHER_RESULT
    (older,) = newer["earlier"]
    assert results.read_tool_result(older, max_tokens=32_000)["content"] == BIG_RESULT


def test_a_checkpoint_written_by_an_async_prepare_is_written_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path / "ckpt")
    stack = MemoryStack([], store=InMemoryStore(), gate=gate)

    async def main() -> tuple[int, RecoverableContextError]:
        async with stack.arun(thread_id="t") as run:
            with pytest.raises(RecoverableContextError) as refused:
                await run.aprepare([{"role": "user", "content": BIG_RESULT}], call_id="c1")
        return threading.get_ident(), refused.value

    loop, refused = asyncio.run(main())
    assert "fsync" in calls.names()
    assert calls.on(loop) == []
    assert refused.checkpoint_path == str(tmp_path / "ckpt" / "c1.json")
    written = json.loads(pathlib.Path(refused.checkpoint_path).read_text())
    assert written["messages"] == [{"role": "user", "content": BIG_RESULT}]


def test_results_a_gate_keeps_during_an_async_prepare_are_written_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    """Results under the offload threshold that the gate prunes: kept through the ToolResults
    layer before their placeholder replaces them."""
    results = ToolResults(tool_calls_dir=tmp_path / "results", threshold_tokens=100_000)
    gate = ContextGate(max_input_tokens=40_000, keep_recent=1)
    stack = MemoryStack([results], store=InMemoryStore(), gate=gate)
    messages = [m for i in range(4) for m in tool_message(f"call_{i}", f"{i} {BIG_RESULT}")]

    async def main() -> tuple[int, list[dict[str, Any]]]:
        async with stack.arun(thread_id="t") as run:
            return threading.get_ident(), await run.aprepare(messages)

    loop, prepared = asyncio.run(main())
    assert any("call_id=call_0" in str(m.get("content")) for m in prepared), prepared
    assert "fsync" in calls.names()
    assert calls.on(loop) == []
    with stack.run(thread_id="t") as run:
        kept = run.layer("tool-results").read_tool_result("call_0", max_tokens=32_000)
    assert kept["content"] == f"0 {BIG_RESULT}"


def test_the_team_state_recorded_rewritten_and_cleared_by_async_calls_is_written_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    team = TeamState(state_dir=tmp_path / "team")
    stack = MemoryStack([team], store=InMemoryStore())

    async def main() -> tuple[int, str, str, str]:
        async with stack.arun(thread_id="t") as run:
            state = run.alayer("team-state")
            await state.record("parse config", claim="done", verified="1 of 3", verdict="fail")
            recorded = "\n".join(m["content"] for m in await run.aprepare([]))
            await state.rewrite([StateEntry("config", shipped="parser and loader")])
            rewritten = "\n".join(m["content"] for m in await run.aprepare([]))
            await state.clear()
            cleared = "\n".join(m["content"] for m in await run.aprepare([]))
        return threading.get_ident(), recorded, rewritten, cleared

    loop, recorded, rewritten, cleared = asyncio.run(main())
    assert {"fsync", "replace", "unlink"} <= calls.names()
    assert calls.on(loop) == []
    assert "DIVERGENCE: producer claimed success" in recorded
    assert "parser and loader" in rewritten and "parse config" not in rewritten
    assert "config" not in cleared
    audit = (tmp_path / "team" / "audit.jsonl").read_text()
    assert '"event":"replaced"' in audit and "parse config" in audit
    assert not (tmp_path / "team" / "current_state.json").exists()


def test_result_files_an_async_forget_erases_are_removed_off_the_loop(
    tmp_path: pathlib.Path, calls: Calls
) -> None:
    results = ToolResults(tool_calls_dir=tmp_path / "results")
    stack = MemoryStack([results], store=InMemoryStore())
    with stack.run(thread_id="t", resource_id="u") as run:
        run.prepare(tool_message("call_1", BIG_RESULT))
    calls.made.clear()

    async def main() -> tuple[int, dict[str, int]]:
        return threading.get_ident(), await stack.aforget(resource_id="u")

    loop, erased = asyncio.run(main())
    assert erased["tool-results"] >= 2  # the result and its blob
    assert {"unlink", "rmdir"} <= calls.names()
    assert calls.on(loop) == []
    assert not (tmp_path / "results" / "resources").exists() or not any(
        (tmp_path / "results" / "resources").iterdir()
    )


def test_the_sync_forms_still_write_in_place(tmp_path: pathlib.Path, calls: Calls) -> None:
    """No thread for a sync caller: the files are written on the caller's thread."""
    results = ToolResults(tool_calls_dir=tmp_path / "results")
    team = TeamState(state_dir=tmp_path / "team")
    gate = ContextGate(max_input_tokens=2_000, checkpoints_dir=tmp_path / "ckpt")
    stack = MemoryStack([results, team], store=InMemoryStore(), gate=gate)
    with stack.run(thread_id="t") as run:
        run.layer("team-state").record("inventory", shipped="hosts table")
        with pytest.raises(RecoverableContextError):
            run.prepare([{"role": "user", "content": BIG_RESULT}], call_id="c1")
        run.prepare(tool_message("call_2", BIG_RESULT))
    stack.forget(thread_id="t")
    assert {"fsync", "replace", "link", "unlink"} <= calls.names()
    assert calls.on(threading.get_ident()) == [name for name, _ in calls.made]


def test_an_async_call_cancelled_while_its_files_are_written_leaves_them_whole(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task cancelled while a worker thread writes its files (a server's timeout firing
    then): the cancellation is raised once the write is done, as for a store call. The files
    are whole and no temp file is left, the team state's lock is let go, and the result the
    prompt would have pointed at reads back whole."""
    results = ToolResults(tool_calls_dir=tmp_path / "results")
    team = TeamState(state_dir=tmp_path / "team")
    stack = MemoryStack([results, team], store=InMemoryStore())
    real_fsync = os.fsync
    victims: list[asyncio.Task[Any]] = []

    def cancelling_fsync(fd: int) -> None:
        if victims:
            victim = victims.pop()
            victim.get_loop().call_soon_threadsafe(victim.cancel)
            time.sleep(0.05)  # the loop takes the cancellation in while the file is written
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", cancelling_fsync)

    async def cancelled(call: Any) -> None:
        task = asyncio.ensure_future(call)
        victims.append(task)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not victims, "the call wrote no file"

    async def main() -> dict[str, Any]:
        async with stack.arun(thread_id="t") as run:
            await cancelled(run.aprepare(tool_message("call_1", BIG_RESULT)))
            await cancelled(run.alayer("team-state").record("parse config", shipped="parser"))
            await run.alayer("team-state").record("load config", shipped="loader")
            return await run.acall_tool(
                "read_tool_result", {"call_id": "call_1", "max_tokens": 32_000}
            )

    read = asyncio.run(main())
    assert read["content"] == BIG_RESULT, read
    assert [entry.objective for entry in team.entries()] == ["parse config", "load config"]
    assert list(tmp_path.rglob(".*.tmp")) == []
