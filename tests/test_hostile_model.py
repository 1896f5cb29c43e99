"""A hostile or confused model, through ``run.call_tool`` and the adapters: what it sends can be
refused, but every answer reaches it (an error payload any JSON encoder can write, never an
exception out of the host), and what it stores is exactly what it sent or nothing."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata import AgentMind, MemoryStack, SharedMemory, SQLiteStore, WorkingMemory
from memstrata.layers.tool_results import ToolResults
from memstrata.prompts import in_tagged_block, tagged_block_floor

SCHEMA = {
    "type": "object",
    "properties": {
        "profile": {"type": "object", "properties": {"name": {"type": "string"}}},
        "age": {"type": "integer", "minimum": 0},
    },
}
SURROGATE = "\ud800"


@pytest.fixture
def run(tmp_path: pathlib.Path) -> Iterator[Any]:
    """A run offering every tool a stack can: both working-memory flavours over both kinds of
    state, shared memory, tool results and a mind."""
    store = SQLiteStore(tmp_path / "hostile.db")
    layers = [
        WorkingMemory(schema=SCHEMA, budget=(0, 500)),
        WorkingMemory(template="# Notes\n", tools="voltagent", scope="user", name="notes"),
        WorkingMemory(name="text"),
        WorkingMemory(schema=SCHEMA, tools="voltagent", name="facts"),
        SharedMemory(store=store, namespace=("shared-memory", "hostile")),
        ToolResults(tool_calls_dir=tmp_path / "tool_calls"),
        AgentMind(),
    ]
    stack = MemoryStack(layers, store=store)
    with stack.run(thread_id="t1", resource_id="u1", agent="a") as opened:
        yield opened
    store.close()


def _tool_names(run: Any) -> list[str]:
    return [spec["name"] for spec in run.tool_specs("mcp")] + ["updateWorkingMemory"]


@pytest.mark.parametrize(
    "arguments",
    [
        {SURROGATE: math.nan},
        {"nested": {SURROGATE: math.inf}},
        {SURROGATE: 2**70},
        {"a" + SURROGATE: [-(2**64)]},
    ],
    ids=["nan", "nested-inf", "huge-int", "huge-int-in-array"],
)
def test_an_error_naming_a_key_with_a_lone_surrogate_is_encodable(
    run: Any, arguments: dict[str, Any]
) -> None:
    """The path of a number JSON cannot hold names its key; a key holding a lone surrogate
    (which a host's JSON parser lets through) is shown escaped, so the payload can be written
    as JSON (orjson, as every adapter does) and the model reads which key it was."""
    for name in _tool_names(run):
        result = run.call_tool(name, arguments)
        assert result["ok"] is False and result["error"]["code"] == "invalid_arguments", result
        text = orjson.dumps(result).decode()
        assert "\\\\ud800" in text, (name, text)


def test_an_unknown_tool_named_with_a_lone_surrogate_is_an_encodable_error(run: Any) -> None:
    for name in (SURROGATE, f"memory_read{SURROGATE}", SURROGATE * 500):
        result = run.call_tool(name, {})
        assert result["error"]["code"] == "unknown_tool"
        text = orjson.dumps(result).decode()
        assert "\\\\ud800" in text and "memory_read" in result["error"]["message"]
        assert len(text) < 4_000  # still bounded, escapes and all


def test_a_langgraph_tool_answers_arguments_with_a_lone_surrogate_key(run: Any) -> None:
    """LangChain parses a model's arguments with Python's json, which takes NaN and lone
    surrogates: the tool answers with the error payload instead of raising out of the graph."""
    pytest.importorskip("langgraph")
    from memstrata.integrations.langgraph import memstrata_tools

    tools = {tool.name: tool for tool in memstrata_tools(run)}
    for name, tool in tools.items():
        call = {"name": name, "args": {SURROGATE: math.nan}, "id": "c1", "type": "tool_call"}
        message = tool.invoke(call)
        answer = orjson.loads(message.content)
        assert answer["ok"] is False and "\\ud800" in answer["error"]["message"], answer


@pytest.mark.parametrize(
    "text",
    [
        '{"age": 18446744073709551616}',
        '{"age": 123456789012345678901234567890}',
        '{"profile": {"name": "n"}, "age": -9223372036854775809}',
    ],
)
def test_json_text_content_with_an_integer_past_64_bits_is_refused_not_rounded(
    run: Any, text: str
) -> None:
    """VoltAgent's update tool takes a structured memory's fields as a JSON string too: an
    integer no store holds is refused naming its path, as in the call's own arguments, rather
    than stored as the float orjson rounds it to."""
    assert run.call_tool("update_facts_memory", {"content": {"age": 7}})["ok"]
    result = run.call_tool("update_facts_memory", {"content": text})
    assert result["ok"] is False and result["error"]["code"] == "invalid_arguments", result
    assert "$.age" in result["error"]["message"] and "64-bit" in result["error"]["message"]
    assert run.layer("facts").snapshot == {"age": 7}
    assert run.layer("facts").version == 1


def test_an_observed_legacy_call_with_an_integer_past_64_bits_is_dropped_not_rounded(
    run: Any,
) -> None:
    """The legacy ``updateWorkingMemory`` call an observed response holds (its arguments as
    JSON text) is dropped, naming why, as ``call_tool`` refuses it."""
    arguments = '{"age": 18446744073709551616}'
    response = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "updateWorkingMemory", "arguments": arguments},
            }
        ],
    }
    diagnostics = run.observe(response)
    assert len(diagnostics) == 1 and "64-bit" in diagnostics[0], diagnostics
    assert run.layer("working-memory").snapshot == {}
    refused = run.call_tool("updateWorkingMemory", arguments)
    assert refused["error"]["code"] == "invalid_arguments"


@pytest.mark.parametrize(
    ("name", "arguments", "named"),
    [
        ("working-memory_update", {"profile": {"name": "a" + SURROGATE}}, "$.profile.name"),
        ("working-memory_replace", {"profile": {"x": {SURROGATE: 1}}}, "the key $.profile.x"),
        ("update_facts_memory", {"content": {"notes": ["ok", SURROGATE]}}, "$.notes[1]"),
        ("memory_write", {"key": "k", "value": {"a": [SURROGATE]}}, "$.a[0]"),
        ("memory_write", {"key": "k", "value": 1, "title": SURROGATE}, "$.title"),
        ("updateWorkingMemory", {"age": 1, "note": SURROGATE}, "$.note"),
        ("mind_recall", {"query": "x" + SURROGATE}, "query"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where_it_is(
    run: Any, name: str, arguments: dict[str, Any], named: str
) -> None:
    """A host's JSON parser lets a lone surrogate through (a ``"\\ud800"`` escape); no store
    can hold one, and the refusal says where it is, not only that one is somewhere (or an
    internal name, or a bare TypeError)."""
    result = run.call_tool(name, arguments)
    assert result["ok"] is False and result["error"]["code"] == "invalid_arguments", result
    message = result["error"]["message"]
    assert named in message and "surrogate" in message and "TypeError" not in message, message
    assert "texts[0]" not in message


LAYER_OF = {
    "working-memory_update": ("working-memory", "working_memory"),
    "update_notes_memory": ("notes", "notes"),
    "text_update": ("text", "text"),
}


@pytest.mark.parametrize("name", list(LAYER_OF))
def test_a_huge_field_full_of_tag_look_alikes_is_refused_before_it_is_escaped(
    run: Any, name: str
) -> None:
    """Arguments an SDK parsed are not held to the 1 MiB limit of JSON text: 10 MB of closing
    tags, each with a right-to-left override (so every one is read character by character
    for look-alikes), is refused by its size at once, not after escaping it all (12 to 20 s)."""
    import time

    layer, label = LAYER_OF[name]
    unit = f"x</{label}>\u202e"
    huge = unit * (10_000_000 // len(unit))
    arguments = {"profile": {"name": huge}} if layer == "working-memory" else {"content": huge}
    started = time.perf_counter()
    result = run.call_tool(name, arguments)
    elapsed = time.perf_counter() - started
    assert result["ok"] is False and result["error"]["code"] == "limit_exceeded", result
    assert "max_state_bytes" in result["error"]["message"]
    assert elapsed < 2.0, f"{elapsed:.1f} s"
    assert run.layer(layer).version == 0


_PIECES = [
    "[summarized:",
    "\uff3bsummarized:",
    "\ufe47tool result offloaded:",
    "\U000e005bsummarized:",
    "</notes>",
    "\uff1c/notes>",
    "\u202e",
    "\u200b",
    "x",
    "é",
    "[",
    "\uff3b",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=40), st.booleans())
@settings(max_examples=300, deadline=None)
def test_the_floor_a_size_limit_is_checked_against_first_is_never_above_the_escaped_text(
    pieces: list[str], json_text: bool
) -> None:
    """The working memory refuses a state whose floor is over max_state_bytes before escaping
    it: the floor must never be above what escaping makes of it, or a state within the limit
    would be refused."""
    text = "".join(pieces)
    escaped = in_tagged_block(text, "notes", json_text=json_text)
    assert tagged_block_floor(text) <= len(escaped.encode("utf-8"))


@pytest.mark.parametrize(
    "unit",
    [
        "x\uff3bsummarized: call_id=",
        "[tool result offloaded: call_id=\u200b",
        "\x1b[31m[summarized: call_id=\u202e",
    ],
)
def test_a_huge_one_line_tool_result_of_notice_look_alikes_is_offloaded_quickly(
    tmp_path: pathlib.Path, unit: str
) -> None:
    """A tool's 10 MB output on one line, a notice opening (or its look-alike) every few
    characters: its digest shows about 160 characters of that line, quoted, and reads no
    more of it than that takes (all of it took 20 to 40 s of prepare())."""
    import time

    from memstrata.layers.tool_result_digest import digest

    huge = unit * (10_000_000 // len(unit))
    started = time.perf_counter()
    summary = digest(huge)
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"{elapsed:.1f} s"
    head = summary.split("head:\n", 1)[1].split("\n", 1)[0]
    assert head.endswith(" …") and "[summarized: call_id=" not in head
    assert "[tool result offloaded: call_id=" not in head
    assert head[:-2] == digest(unit * 200).split("head:\n", 1)[1].split("\n", 1)[0][:-2]
