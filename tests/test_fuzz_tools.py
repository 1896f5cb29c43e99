"""Whatever a model sends, ``run.call_tool`` never raises, answers with an error payload that
names the problem, and a failed call leaves everything as it was: every stored record, and what
the run holds unstored (the mind's draft, the handles' states, the offloaded files).

Every tool the stack's layers offer is drawn (each working-memory flavour, shared memory, tool
results, the seven mind tools), with arguments shaped by its schema most of the time so calls
reach the handlers, and raw garbage the rest.

This is the in-suite sample; ``make fuzz`` runs the same properties with far more examples
(FUZZ_EXAMPLES, 100k by default) outside the normal test run.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata import AgentMind, MemoryStack, SharedMemory, SQLiteStore, WorkingMemory
from memstrata.layers.tool_results import ToolResults
from memstrata.stores import codec
from memstrata.tools import wire_name

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
            st.one_of(
                st.text(max_size=12), st.sampled_from(["__proto__", "constructor", "k\ud800"])
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _deep_object(depth: int) -> dict[str, Any]:
    """Arguments an SDK already parsed: a dict nested ``depth`` levels, built without recursion."""
    value: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


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
    # Parsed arguments an SDK hands over: nested 100k deep, or huge values under the
    # 1 MiB argument limit, so they reach the handlers' own limits.
    st.sampled_from([_deep_object(100_000), {"\ud800": 1}]),
    st.builds(
        lambda field, size: {field: "x" * size},
        st.sampled_from(["content", "description", "key", "value", "call_id", "query", "note"]),
        st.sampled_from([5_000, 100_000, 900_000]),
    ),
)


# The two flavour pairings, each its own stack: "json+text": structured state under noetic's
# tools, text state under VoltAgent's (a layer named "notes": update_notes_memory...);
# "text+json": the other way round (working-memory/update with content/mode, and
# update_notes_memory taking an object or a JSON string).
FLAVOURS = ["json+text", "text+json"]


def _working_memories(flavours: str) -> list[WorkingMemory]:
    if flavours == "json+text":
        return [
            WorkingMemory(schema=SCHEMA, budget=(0, 2_000)),
            WorkingMemory(
                template="# Notes\n",
                tools="voltagent",
                scope="resource",
                budget=(0, 2_000),
                name="notes",
            ),
        ]
    return [
        WorkingMemory(template="# Notes\n", budget=(0, 2_000)),
        WorkingMemory(
            schema=SCHEMA, tools="voltagent", scope="resource", budget=(0, 2_000), name="notes"
        ),
    ]


@pytest.fixture(scope="module", params=FLAVOURS)
def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, SQLiteStore]]:
    flavours = request.param
    tmp = tmp_path_factory.mktemp("fuzz")
    store = SQLiteStore(tmp / "fuzz.db")
    layers = [
        *_working_memories(flavours),
        # Small entry limits keep 100k calls from growing the state every check reads, and
        # put the limit paths in play.
        SharedMemory(store=store, namespace=("shared-memory", "fuzz"), max_entries=300),
        ToolResults(tool_calls_dir=tmp / "tool_calls"),
        AgentMind(max_entries=300),
    ]
    stack = MemoryStack(layers, store=store)
    run = stack.run(thread_id="fuzz", resource_id="fuzz-user", agent="fuzzer").open()
    if flavours == "json+text":
        seeded = [
            run.call_tool("working-memory/update", {"profile": {"name": "seed"}, "age": 1}),
            run.call_tool("update_notes_memory", {"content": "seeded"}),
        ]
    else:
        seeded = [
            run.call_tool("working-memory/update", {"content": "seeded", "mode": "append"}),
            run.call_tool("update_notes_memory", {"content": {"profile": {"name": "seed"}}}),
        ]
    assert all(r["ok"] for r in seeded), seeded
    run.call_tool("memory_write", {"key": "seed", "value": [1, 2, 3]})
    run.layer("tool-results").offload("call_seed", "a stored result " * 2_000)
    goal = run.call_tool("mind_set_goal", {"description": "Keep the fuzzer busy."})
    run.call_tool("mind_reflect", {"content": "Pinned rule for the fuzzer.", "pin": True})
    run.layer("agent-mind").flush()  # committed, so ids exist in the store and the draft
    run.call_tool("mind_believe", {"content": "Fuzzing finds crashes."})
    assert goal["status"] == "ok"
    yield run, store
    run.close()
    store.close()


def _stored(store: SQLiteStore) -> list[tuple[Any, ...]]:
    return [(i.namespace, i.key, i.version, json.dumps(i.value)) for i in store.list(limit=10_000)]


def _state(run: Any, store: SQLiteStore) -> tuple[Any, ...]:
    """Everything a call could change: the store, and what the run holds that is not stored
    yet (the mind's draft) or mirrors the store (handles' states, the shared entries, files)."""
    mind = run.layer("agent-mind")
    draft = mind.draft
    tool_dir = run.layer("tool-results").tool_calls_dir
    return (
        _stored(store),
        {i: b.to_payload() for i, (b, _v, _s) in draft.beliefs.items()},
        {i: r.to_payload() for i, (r, _v) in draft.reflections.items()},
        {i: g.to_payload() for i, g in draft.goals.items()},
        {i: (p.description, p.priority, list(p.progress)) for i, p in draft.goal_patches.items()},
        sorted(draft.unpins),
        {i: g.to_payload() for i, g in mind.goals.items()},
        [
            (run.layer(n).version, json.dumps(run.layer(n).state))
            for n in ("working-memory", "notes")
        ],
        [(e.key, json.dumps(e.value)) for e in run.layer("shared-memory").memory.snapshot()],
        sorted(str(p.relative_to(tool_dir)) for p in tool_dir.rglob("*")),
    )


def _known_ids(run: Any) -> list[str]:
    """Strings that name something that exists, so calls reach past "not found"."""
    mind = run.layer("agent-mind")
    draft = mind.draft
    shared = [e.key for e in run.layer("shared-memory").memory.snapshot()]
    return [
        *mind.goals,
        *mind.reflections,
        *mind.beliefs,
        *draft.goals,
        *draft.reflections,
        *shared,
        "call_seed",
        "seed",
    ]


ERROR_CODES = {
    "unknown_tool",
    "invalid_arguments",
    "schema_violation",
    "budget_exceeded",
    "limit_exceeded",
    "tool_error",
    "not_found",
    "not_pinned",
    "not_active",
    "cap_reached",
    "conflict",
}


def test_the_codes_a_fuzzed_call_may_answer_are_the_documented_ones() -> None:
    """docs/tools.md's table of error codes, less the three no generated call may meet (a bug,
    a closed run, a failing store), is the set above (and ToolError's default code, which no
    tool of the library answers): a new code is documented and fuzzed alike."""
    text = (pathlib.Path(__file__).parent.parent / "docs" / "tools.md").read_text()
    table = text[text.index("| code | meaning |") :].split("\n\n", 1)[0]
    documented = {
        code
        for row in table.splitlines()[2:]
        for code in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])
    }
    assert documented - {"internal_error", "run_closed", "memory_unavailable"} == ERROR_CODES - {
        "tool_error"
    }


def _check_error_payload(result: dict[str, Any]) -> None:
    error = result["error"]
    # internal_error is not in the set: every bad input must be named, never a crash.
    assert error["code"] in ERROR_CODES, error
    assert isinstance(error["message"], str) and error["message"]


def _value_for(schema: Any, ids: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """Mostly a value of the declared shape (so calls get past validation into the handlers),
    sometimes anything at all."""
    if not isinstance(schema, dict):
        return json_values
    if "enum" in schema:
        shaped: st.SearchStrategy[Any] = st.sampled_from(schema["enum"])
    else:
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or ["string"])
        options = []
        for kind in kinds:
            if kind == "string":
                options.append(st.one_of(st.text(max_size=80), ids))
            elif kind == "integer":
                options.append(st.integers(min_value=-5, max_value=10**6))
            elif kind == "number":
                options.append(st.floats(allow_nan=True, allow_infinity=True))
            elif kind == "boolean":
                options.append(st.booleans())
            elif kind == "array":
                options.append(st.lists(_value_for(schema.get("items", {}), ids), max_size=4))
            elif kind == "null":
                options.append(st.none())
            else:
                options.append(json_values)
        shaped = st.one_of(options) if options else json_values
    return st.one_of(shaped, shaped, shaped, json_values)


def _shaped_arguments(
    spec: dict[str, Any], ids: st.SearchStrategy[str]
) -> st.SearchStrategy[dict[str, Any]]:
    properties = spec["inputSchema"].get("properties") or {}
    fields = {name: _value_for(sub, ids) for name, sub in properties.items()}
    extra = st.dictionaries(st.text(max_size=8), json_values, max_size=2)
    if not fields:  # a structured working memory: any object is a patch
        return st.one_of(st.dictionaries(st.text(max_size=10), json_values, max_size=4), extra)
    return st.fixed_dictionaries({}, optional=fields) | st.builds(
        lambda a, b: {**a, **b}, st.fixed_dictionaries({}, optional=fields), extra
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_call_returns_a_payload_and_failures_change_nothing(
    harness: tuple[Any, SQLiteStore], data: st.DataObject
) -> None:
    run, store = harness
    specs = {spec["name"]: spec for spec in run.tool_specs("mcp")}
    name = data.draw(
        st.one_of(
            st.sampled_from(sorted(specs)),
            # Specs carry the wire-safe names; call_tool also takes the systems' own names.
            st.sampled_from(
                [*(wire_name(n) for n in specs), "working-memory/update", "no_such_tool"]
            ),
            st.text(max_size=20),
            st.none(),
            st.integers(),
        ),
        label="name",
    )
    spec = specs.get(name) if isinstance(name, str) else None
    # Ids are drawn as indexes into what exists now: the run changes between examples, and a
    # strategy's shape must not (hypothesis replays choices).
    ids = st.integers(min_value=0, max_value=63).map(
        lambda i: (lambda known: known[i % len(known)])(_known_ids(run))
    )
    arguments = data.draw(
        raw_arguments if spec is None else st.one_of(_shaped_arguments(spec, ids), raw_arguments),
        label="arguments",
    )
    before = _state(run, store)
    result = run.call_tool(name, arguments)
    assert isinstance(result, dict)
    json.dumps(result, allow_nan=False, default=str)  # the payload itself is serialisable
    after = _state(run, store)
    if result.get("ok") is False or "error" in result:
        _check_error_payload(result)
        assert after == before
    # What the run holds unstored can be stored: a draft that could not would fail the flush
    # at the end of the run, and lose every write of it.
    codec.dumps(after[1:6])


def test_the_harness_reaches_every_tool(harness: tuple[Any, SQLiteStore]) -> None:
    # Guards the property above: every tool the layers offer is among those it draws.
    run, _store = harness
    names = {spec["name"] for spec in run.tool_specs("mcp")}
    structured = run.layer("working-memory").layer.structured
    assert names - {"working-memory_replace"} == {
        "working-memory_update",
        "get_notes_memory",
        "update_notes_memory",
        "clear_notes_memory",
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
    }
    assert ("working-memory_replace" in names) == structured


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("working-memory/update", _deep(100_000), "not valid JSON"),
        ("working-memory/update", _deep_object(100_000), "1024"),
        ("memory_write", {"key": "deep", "value": _deep_object(100_000)}, "1024"),
        ("working-memory/update", '{"a": NaN}', "not valid JSON"),
        ("working-memory/update", {"age": math.nan}, "finite"),
        ("working-memory/update", {"age": "old"}, "$.age"),
        ("memory_write", b'{"key": "\xff", "value": 1}', "not valid JSON"),
        ("memory_read", '{"keys": "task:x"}', "$.keys: expected array"),
        ("read_tool_result", {"call_id": "../../etc/passwd"}, "call_id"),
        # Found by the fuzzer: these went into the mind's draft and failed the whole flush.
        ("mind_set_goal", {"description": "goal \ud800"}, "lone surrogate"),
        ("mind_reflect", {"content": "ok", "tags": ["\udfff"]}, "lone surrogate"),
        ("mind_reflect", {"content": "ok", "relatedTo": "x\ud800"}, "lone surrogate"),
        ("mind_believe", {"content": "ok \udfff"}, "lone surrogate"),
    ],
)
@pytest.mark.parametrize("harness", ["json+text"], indirect=True)  # structured cases
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
