"""Isolation and freshness under attack: ids that try to share one record or file, processes and
threads whose cached views race with each other's writes, on real SQLite and PostgreSQL."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata import (
    AgentMind,
    HashingEmbedder,
    MemoryStack,
    SQLiteStore,
    ToolResults,
    WorkingMemory,
    open_store,
)
from memstrata.exceptions import InvalidInputError

AGENT = "isolation-bot"


def _on_threads(work: Any, count: int) -> None:
    """Runs ``work(n)`` on ``count`` threads at once (n = 0..count-1) and waits for all."""
    threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """One store two agent servers share."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    pg: str = request.getfixturevalue("empty_postgres_url")
    return pg


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every few microseconds: a race between two Python statements shows in a
    few runs instead of one in thousands."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(5e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _recall_top(run: Any, query: str) -> str | None:
    result = run.call_tool("mind_recall", {"query": query, "threshold": 0, "limit": 1})
    assert result.get("ok", True) is not False, result
    return result["result"][0]["id"] if result["result"] else None


@pytest.mark.usefixtures("fast_switching")
def test_runs_of_one_mind_on_many_threads_keep_each_beliefs_own_vector(
    tmp_path: pathlib.Path,
) -> None:
    """Runs of one mind layer on several threads at once, each writing a belief: every run
    opens (bringing the layer's shared entries up to date with the others' flushes) without
    failing, and afterwards every belief is stored and recalled by its own words, never
    through another belief's vector."""
    for attempt in range(5):
        _many_threads_one_mind(tmp_path / f"mind-{attempt}.db")


def _many_threads_one_mind(path: pathlib.Path) -> None:
    with SQLiteStore(path) as store:
        stack = MemoryStack([AgentMind(embedder=HashingEmbedder())], store=store)
        with stack.run(agent=AGENT) as run:
            run.prepare([])  # the layer holds the (empty) mind and its mark from here on
        errors: list[BaseException] = []
        start = threading.Barrier(12)

        def runs(worker: int) -> None:
            try:
                start.wait()
                for n in range(8):
                    with stack.run(agent=AGENT) as run:
                        content = f"worker {worker} learned fact {n} about topic w{worker}f{n}"
                        result = run.call_tool("mind_believe", {"content": content})
                        assert result.get("ok", True) is not False, result
            except BaseException as exc:
                errors.append(exc)

        _on_threads(runs, 12)
        assert not errors, errors[0]
        with stack.run(agent=AGENT) as run:
            beliefs = run.layer("agent-mind").beliefs
            assert len(beliefs) == 12 * 8
            wrong = [
                (belief.content, _recall_top(run, belief.content))
                for id_, belief in beliefs.items()
                if _recall_top(run, belief.content) != id_
            ]
        assert not wrong, wrong[:3]


# Another agent server's turn: prepares the conversation read as JSON from stdin with its own
# ToolResults, and prints the tool messages of its prompt.
_TOOL_RESULTS_SERVER = """
import json, sys
from memstrata import MemoryStack, ToolResults, open_store
url, conversation = sys.argv[1], json.loads(sys.stdin.read())
with open_store(url) as store, MemoryStack([ToolResults()], store=store).run(thread_id="t") as run:
    prompt = run.prepare(conversation)
print(json.dumps([m["content"] for m in prompt if m["role"] == "tool"]))
"""


def _tool_turn(call_id: str, body: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": body},
    ]


def _named_id(notice: str) -> str:
    assert notice.startswith("[tool result offloaded: call_id="), notice
    return notice.split("call_id=", 1)[1].split(",", 1)[0]


def test_a_notice_names_the_id_holding_its_result_after_another_server_reused_the_call_id(
    url: str,
) -> None:
    """Server B offloads a result under ``call_0``; server A, given the next turn, sees the
    call_id reused (local model servers send ``call_0`` every turn): the newer result takes
    ``call_0`` and the older moves to a derived id. B, given the turn after, points each
    notice at the id that holds its own result, as A's prompt does, never at the other's."""
    older = "\n".join(f"older result line {i}" for i in range(3000))
    newer = "\n".join(f"newer result line {i}" for i in range(3000))
    first = [{"role": "user", "content": "look it up"}, *_tool_turn("call_0", older)]
    second = [*first, {"role": "user", "content": "and again"}, *_tool_turn("call_0", newer)]
    with open_store(url) as store:
        server_b = MemoryStack([ToolResults()], store=store)
        with server_b.run(thread_id="t") as run:
            assert _named_id(run.prepare(first)[-1]["content"]) == "call_0"
        done = subprocess.run(
            [sys.executable, "-c", _TOOL_RESULTS_SERVER, url],
            input=json.dumps(second),
            capture_output=True,
            text=True,
            check=True,
        )
        on_a = [_named_id(notice) for notice in json.loads(done.stdout)]
        assert on_a[0].startswith("call_0:") and on_a[1] == "call_0"
        with server_b.run(thread_id="t") as run:
            notices = [m["content"] for m in run.prepare(second) if m["role"] == "tool"]
            assert [_named_id(notice) for notice in notices] == on_a
            for notice, body in zip(notices, (older, newer)):
                read = run.call_tool("read_tool_result", {"call_id": _named_id(notice)})
                assert read["content"] == body[: len(read["content"])], read


def test_a_long_lived_server_stores_a_result_again_before_its_ttl_runs_out(url: str) -> None:
    """The same conversation prepared again and again by one long-lived server: its result
    is stored again (renewing its TTL) once half the TTL has passed, so the notice in the
    prompt never names a result the store has let expire."""
    body = "\n".join(f"result line {i}" for i in range(3000))
    conversation = [{"role": "user", "content": "look it up"}, *_tool_turn("call_7", body)]
    with open_store(url) as store:
        server = MemoryStack([ToolResults(ttl=1.0)], store=store)
        for _ in range(4):
            with server.run(thread_id="t") as run:
                notice = run.prepare(conversation)[-1]["content"]
                read = run.call_tool("read_tool_result", {"call_id": _named_id(notice)})
                assert read.get("ok", True) is not False, read
                assert read["content"] == body[: len(read["content"])]
            time.sleep(0.6)


@pytest.mark.parametrize("option", ["thread_id", "resource_id", "agent"])
def test_a_scope_id_no_store_can_hold_is_refused_by_name(url: str, option: str) -> None:
    """A lone surrogate (what a JSON request's ``"\\ud800"`` decodes to) cannot be stored as
    UTF-8: a run given one as a scope id is refused, naming the option, before any layer
    reads or writes; the same id on every backend."""
    with open_store(url) as store:
        stack = MemoryStack([AgentMind(), ToolResults()], store=store)
        scope = {"thread_id": "t", "resource_id": "r", "agent": "a", option: "user-\ud800"}
        with pytest.raises(InvalidInputError, match=f"{option} is not valid Unicode"):
            stack.run(**scope)


def test_a_result_another_server_deleted_is_stored_again_when_the_conversation_returns(
    url: str,
) -> None:
    """Another server (or an operator's clean-up) deletes a thread's stored results; the
    server that offloaded them, given the conversation again, stores them again instead of
    naming ids that hold nothing."""
    body = "\n".join(f"result line {i}" for i in range(3000))
    conversation = [{"role": "user", "content": "look it up"}, *_tool_turn("call_9", body)]
    with open_store(url) as store, open_store(url) as other:
        server = MemoryStack([ToolResults()], store=store)
        with server.run(thread_id="t") as run:
            run.prepare(conversation)
        for item in other.list(("tool-results",), limit=1000):
            other.delete(item.namespace, item.key)
        with server.run(thread_id="t") as run:
            notice = run.prepare(conversation)[-1]["content"]
            read = run.call_tool("read_tool_result", {"call_id": _named_id(notice)})
            assert read.get("ok", True) is not False, read
            assert read["content"] == body[: len(read["content"])]


def test_a_child_run_for_another_user_keeps_its_own_tool_results(tmp_path: pathlib.Path) -> None:
    """A run spawned for another thread and user (a sub-agent serving user B from user A's
    run) neither reads the parent's offloaded results nor leaves its own in the parent's
    scope: they are B's, readable by B's later runs and never by A's."""
    secret = "\n".join(f"user A private record {i}" for i in range(3000))
    theirs = "\n".join(f"user B record {i}" for i in range(3000))
    with SQLiteStore(tmp_path / "spawn.db") as store:
        stack = MemoryStack([ToolResults()], store=store)
        with stack.run(thread_id="thread-A", resource_id="user-A") as parent:
            parent.prepare([{"role": "user", "content": "q"}, *_tool_turn("call_a", secret)])
            with parent.spawn(thread_id="thread-B", resource_id="user-B") as child:
                read = child.call_tool("read_tool_result", {"call_id": "call_a"})
                assert read.get("ok") is False and read["error"]["code"] == "not_found", read
                child.prepare([{"role": "user", "content": "q"}, *_tool_turn("call_b", theirs)])
            with parent.spawn() as same_scope:  # the parent's thread and user: its results
                assert same_scope.call_tool("read_tool_result", {"call_id": "call_a"})["content"]
        with stack.run(thread_id="thread-B", resource_id="user-B") as run:
            assert run.call_tool("read_tool_result", {"call_id": "call_b"})["content"]
        with stack.run(thread_id="thread-A", resource_id="user-A") as run:
            read = run.call_tool("read_tool_result", {"call_id": "call_b"})
            assert read.get("ok") is False and read["error"]["code"] == "not_found", read


@pytest.mark.usefixtures("fast_switching")
def test_parallel_tool_calls_of_one_run_on_threads_lose_no_working_memory_update(
    url: str,
) -> None:
    """A server running a model's parallel tool calls on threads: eight threads of one run
    each merge ten keys into the working memory. Every key is stored, and the run's own view
    (its next prompt) holds what the store holds."""
    with open_store(url) as store:
        memory = WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 100_000))
        stack = MemoryStack([memory], store=store, total_budget=200_000)
        for attempt in range(3):
            user = f"user-{attempt}"
            errors: list[BaseException] = []
            with stack.run(resource_id=user) as run:

                def calls(worker: int, run: Any = run, errors: list[Any] = errors) -> None:
                    try:
                        for n in range(10):
                            result = run.call_tool("working-memory_update", {f"k{worker}_{n}": n})
                            assert result.get("ok") is True, result
                    except BaseException as exc:
                        errors.append(exc)

                _on_threads(calls, 8)
                assert not errors, errors[0]
                held = run.layer("working-memory").snapshot
            with stack.run(resource_id=user) as run:
                stored = run.layer("working-memory").snapshot
            assert len(stored) == 80, sorted(set(held) ^ set(stored))
            assert held == stored
