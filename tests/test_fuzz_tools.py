"""Whatever a model sends, ``run.call_tool`` never raises, answers with an error payload that
names the problem, and a failed call leaves every stored record as it was.

This is the in-suite sample; ``make fuzz`` runs the same properties with far more examples
(FUZZ_EXAMPLES, 100k by default) outside the normal test run.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata import AgentMind, MemoryStack, SharedMemory, SQLiteStore, WorkingMemory
from memstrata.layers.tool_results import ToolResults

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))

SCHEMA = {
    "type": "object",
    "properties": {
        "profile": {"type": "object", "properties": {"name": {"type": "string"}}},
        "goals": {"type": "array", "items": {"type": "string"}},
        "age": {"type": "integer", "minimum": 0},
    },
}

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    # Lone surrogates: valid in a Python str, not encodable as UTF-8.
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "__proto__", "constructor", "../../etc/passwd"]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(
            st.one_of(st.text(max_size=12), st.sampled_from(["__proto__", "constructor"])),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


raw_arguments = st.one_of(
    json_values,
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=60),  # mostly not JSON at all
    st.binary(max_size=40),  # includes invalid UTF-8
    st.sampled_from(
        [
            _deep(100_000),
            "[" * 50_000,
            '{"content": "' + "x" * 2_000_000 + '"}',
            b'{"key": "\xff\xfe"}',
            '{"a": NaN, "b": Infinity}',
            '{"keys": ["\\ud800"]}',
        ]
    ),
)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, SQLiteStore]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    store = SQLiteStore(tmp / "fuzz.db")
    layers = [
        WorkingMemory(schema=SCHEMA, budget=(0, 2_000)),
        SharedMemory(store=store, namespace=("shared-memory", "fuzz")),
        ToolResults(tool_calls_dir=tmp / "tool_calls"),
        AgentMind(),
    ]
    stack = MemoryStack(layers, store=store)
    run = stack.run(thread_id="fuzz", resource_id="fuzz-user", agent="fuzzer").open()
    run.call_tool("working-memory/update", {"profile": {"name": "seed"}, "age": 1})
    run.call_tool("memory_write", {"key": "seed", "value": [1, 2, 3]})
    yield run, store
    run.close()
    store.close()


def _stored(store: SQLiteStore) -> list[tuple[Any, ...]]:
    return [(i.namespace, i.key, i.version, json.dumps(i.value)) for i in store.list(limit=10_000)]


def _check_error_payload(result: dict[str, Any]) -> None:
    error = result["error"]
    assert error["code"] in {
        "unknown_tool",
        "invalid_arguments",
        "schema_violation",
        "budget_exceeded",
        "internal_error",
        "tool_error",
    }, error
    assert error["code"] != "internal_error", error  # every bad input must be named, not a crash
    assert isinstance(error["message"], str) and error["message"]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    name=st.one_of(
        st.sampled_from(
            [
                "working-memory/update",
                "working-memory_update",
                "memory_list",
                "memory_read",
                "memory_write",
                "read_tool_result",
                "mind_recall",
                "mind_believe",
                "mind_reflect",
                "mind_unpin_reflection",
                "mind_set_goal",
                "mind_update_goal",
                "mind_complete_goal",
                "no_such_tool",
            ]
        ),
        st.text(max_size=20),
        st.none(),
        st.integers(),
    ),
    arguments=raw_arguments,
)
def test_any_call_returns_a_payload_and_failures_change_nothing(
    harness: tuple[Any, SQLiteStore], name: Any, arguments: Any
) -> None:
    run, store = harness
    before = _stored(store)
    result = run.call_tool(name, arguments)
    assert isinstance(result, dict)
    json.dumps(result, allow_nan=False, default=str)  # the payload itself is serialisable
    if result.get("ok") is False or "error" in result:
        _check_error_payload(result)
        assert _stored(store) == before


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("working-memory/update", _deep(100_000), "not valid JSON"),
        ("working-memory/update", '{"a": NaN}', "not valid JSON"),
        ("working-memory/update", {"age": math.nan}, "finite"),
        ("working-memory/update", {"age": "old"}, "$.age"),
        ("memory_write", b'{"key": "\xff", "value": 1}', "not valid JSON"),
        ("memory_read", '{"keys": "task:x"}', "$.keys: expected array"),
        ("read_tool_result", {"call_id": "../../etc/passwd"}, "call_id"),
    ],
)
def test_the_error_names_the_problem(
    harness: tuple[Any, SQLiteStore], name: str, arguments: Any, fragment: str
) -> None:
    run, store = harness
    before = _stored(store)
    result = run.call_tool(name, arguments)
    assert result["ok"] is False
    assert fragment in result["error"]["message"], result
    assert _stored(store) == before


def test_the_harness_sees_stored_records(harness: tuple[Any, SQLiteStore]) -> None:
    # Guards the property above: it would pass vacuously if nothing were stored.
    _run, store = harness
    assert len(_stored(store)) >= 2
    assert pathlib.Path(store.path).exists()
