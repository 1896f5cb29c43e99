"""Bad input from the calling program to the layers' own handles (``run.layer(name)``) and to the
layers' constructors: each gets an InvalidInputError (the mind's handle: a ToolError, as every
other bad argument of it) naming the argument, and nothing stored changes, rather than a
TypeError or AttributeError from deep inside, or a value silently taken for something else (a
string split into characters, "no" taken as true).

The stack's own entry points are in test_api_input.py, the model's tool calls in
test_fuzz_tools.py."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata import MemoryStack
from memstrata.exceptions import InvalidInputError
from memstrata.layers import (
    AgentMind,
    SharedMemory,
    TeamState,
    ToolResults,
    WorkingMemory,
)
from memstrata.stores import SQLiteStore


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "m.db") as opened:
        yield opened


def _rows(store: SQLiteStore) -> list[tuple[Any, ...]]:
    """Everything stored, to compare before and after a refused call."""
    return sorted((i.namespace, i.key, repr(i.value), i.version) for i in store.list(()))


# Layer constructors ---------------------------------------------------------------------------


def _layers(tmp_path: pathlib.Path) -> dict[str, Any]:
    return {
        "WorkingMemory": WorkingMemory,
        "SharedMemory": SharedMemory,
        "AgentMind": AgentMind,
        "TeamState": lambda **kw: TeamState(state_dir=tmp_path / "team", **kw),
    }


@pytest.mark.parametrize("layer", ["WorkingMemory"])
@pytest.mark.parametrize("budget", [None, 5, (1,), (1, 2, 3), "5"])
def test_a_layer_refuses_a_budget_that_is_not_a_min_max_pair(
    tmp_path: pathlib.Path, layer: str, budget: Any
) -> None:
    # Was a TypeError from Budget(*budget) (a str "ab" happened to pass as two bounds).
    with pytest.raises(InvalidInputError, match=r"budget must be a Budget or a \(min, max\) pair"):
        _layers(tmp_path)[layer](budget=budget)


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (WorkingMemory, "read_only"),
    ],
)
@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
def test_a_switch_refuses_what_is_not_a_bool(
    tmp_path: pathlib.Path, make: Any, option: str, value: Any
) -> None:
    # Was taken as Python's truth: read_only="false" made a working memory read-only,
    # enabled="no" left a layer on.
    if make == "TeamState":
        make = _layers(tmp_path)["TeamState"]
    with pytest.raises(InvalidInputError, match=f"{option} must be True or False"):
        make(**{option: value})


# Working memory -------------------------------------------------------------------------------


@pytest.fixture
def stack(store: SQLiteStore, tmp_path: pathlib.Path) -> MemoryStack:
    return MemoryStack(
        [
            WorkingMemory(),
            ToolResults(threshold_tokens=20),
            SharedMemory(store=store, namespace=("team", "t1")),
            AgentMind(),
        ],
        store=store,
    )


def test_working_memory_apply_legacy_refuses_an_unknown_source(stack: MemoryStack) -> None:
    with stack.run(thread_id="t1", agent="a") as run:
        memory = run.layer("working-memory")
        memory.update("likes tea")
        before = (memory.snapshot, memory.version)
        # Was a KeyError: 'model'.
        with pytest.raises(InvalidInputError, match="source must be 'observe' or 'call_tool'"):
            memory.apply_legacy({"content": "x"}, source="model")  # type: ignore[arg-type]
        assert (memory.snapshot, memory.version) == before


@pytest.mark.parametrize("budget", ["500", True, 12.5, None])
def test_working_memory_prompt_items_refuses_a_budget_that_is_not_an_int(
    stack: MemoryStack, budget: Any
) -> None:
    # "500" was a TypeError from inside; True was taken as one token.
    wanted = "budget must be an int"
    with (
        stack.run(thread_id="t1", agent="a") as run,
        pytest.raises(InvalidInputError, match=wanted),
    ):
        run.layer("working-memory").prompt_items(budget)
