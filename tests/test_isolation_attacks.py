"""Isolation and freshness under attack: ids that try to share one record or file, processes and
threads whose cached views race with each other's writes, on real SQLite and PostgreSQL."""

from __future__ import annotations

import pathlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata import AgentMind, HashingEmbedder, MemoryStack, SQLiteStore

AGENT = "isolation-bot"


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

        threads = [threading.Thread(target=runs, args=(worker,)) for worker in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
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
