"""Tool definitions: wire names, spec formats, argument parsing and validation."""

from __future__ import annotations

import copy
import json
import math
import pickle
import re
from typing import Any

import orjson
import pytest

from memstrata.exceptions import InvalidOptionError, ToolError
from memstrata.tools import (
    MAX_ARGUMENT_BYTES,
    Tool,
    error_payload,
    frozen,
    parse_arguments,
    raise_problems,
    strip_null_padding,
    tool_spec,
    validate_arguments,
    wire_name,
)

WIRE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("working-memory/update", "working-memory_update"),
        ("mind_recall", "mind_recall"),
        ("a.b c", "a_b_c"),
        ("", "_"),
    ],
)
def test_wire_names_are_safe(name: str, expected: str) -> None:
    assert wire_name(name) == expected
    assert WIRE.match(wire_name(name))


def test_long_names_stay_distinct_and_safe() -> None:
    a, b = "x" * 70 + "/a", "x" * 70 + "/b"
    assert wire_name(a) != wire_name(b)
    assert all(WIRE.match(wire_name(n)) for n in (a, b))


def test_one_definition_three_formats() -> None:
    tool = Tool("working-memory/update", "Update it.", {"type": "object"}, lambda a: a)
    assert tool_spec(tool, "openai") == {
        "type": "function",
        "function": {
            "name": "working-memory_update",
            "description": "Update it.",
            "parameters": {"type": "object"},
        },
    }
    assert tool_spec(tool, "anthropic")["input_schema"] == {"type": "object"}
    assert tool_spec(tool, "mcp")["name"] == "working-memory_update"  # SEP-986: no "/"
    with pytest.raises(InvalidOptionError, match="unknown tool format"):
        tool_spec(tool, "gemini")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"a": 1', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got array"),
        ("42", "got integer"),
        (7, "got integer"),
        ('{"a": "\\ud800"}', "no low surrogate"),
        ('{"a": "\ud800"}', "not valid JSON"),
        (b'{"a": "\xff"}', "not valid JSON"),
        ("[" * 5000 + "]" * 5000, "not valid JSON"),
    ],
)
def test_bad_arguments_are_named(raw: Any, message: str) -> None:
    with pytest.raises(ToolError, match=message) as info:
        parse_arguments(raw)
    assert info.value.code == "invalid_arguments"


def test_oversized_arguments_are_refused_before_parsing() -> None:
    with pytest.raises(ToolError, match="limit is"):
        parse_arguments('{"a": "' + "x" * MAX_ARGUMENT_BYTES + '"}')


def test_empty_arguments_mean_none() -> None:
    assert parse_arguments(None) == {} == parse_arguments("") == parse_arguments("  ")
    assert parse_arguments('{"a": [1]}') == {"a": [1]}


SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "type": {"type": "string", "enum": ["belief", "goal"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def test_validation_lists_every_problem_with_its_path() -> None:
    with pytest.raises(ToolError) as info:
        validate_arguments(SCHEMA, {"limit": 0, "type": "rumour", "tags": ["ok", 3], "extra": True})
    details = info.value.details
    assert "$: missing required field 'query'" in details
    assert "$.limit: 0 is below the minimum 1" in details
    assert any(d.startswith("$.type: 'rumour' is not one of") for d in details)
    assert "$.tags[1]: expected string, got integer" in details
    assert "$: unexpected field 'extra'" in details


def test_valid_arguments_pass() -> None:
    validate_arguments(SCHEMA, {"query": "q", "limit": 5, "type": "goal", "tags": []})
    with pytest.raises(ToolError, match="expected integer, got boolean"):
        validate_arguments(SCHEMA, {"query": "q", "limit": True})


def test_an_enum_compares_as_json_does_a_boolean_is_no_number() -> None:
    """JSON Schema's enum compares JSON values: ``true`` is not ``1``, ``[false]`` is not
    ``[0]``; Python's ``==`` says they are."""
    schema = {
        "type": "object",
        "properties": {
            "level": {"enum": [1, 2]},
            "flag": {"enum": [True]},
            "pair": {"enum": [[0, 1], {"on": 1}]},
        },
    }
    for wrong in ({"level": True}, {"flag": 1}, {"pair": [False, True]}, {"pair": {"on": True}}):
        with pytest.raises(ToolError) as info:
            validate_arguments(schema, wrong)
        assert any("is not one of" in d for d in info.value.details), wrong
    validate_arguments(schema, {"level": 1, "flag": True, "pair": [0, 1]})
    validate_arguments(schema, {"level": 2.0, "pair": {"on": 1}})  # 2.0 is the number 2
    deep = parse_arguments('{"pair": ' + "[" * 1000 + "]" * 1000 + "}")  # no recursion error
    with pytest.raises(ToolError, match="is not one of"):
        validate_arguments(schema, deep)


def test_strict_form_requires_everything_and_makes_optional_fields_nullable() -> None:
    tool = Tool("mind_recall", "Recall.", SCHEMA, lambda a: a)
    function = tool_spec(tool, "openai", strict=True)["function"]
    assert function["strict"] is True
    params = function["parameters"]
    assert params["required"] == ["query", "limit", "type", "tags"]
    assert params["additionalProperties"] is False
    assert params["properties"]["query"]["type"] == "string"
    assert params["properties"]["limit"]["type"] == ["integer", "null"]
    assert params["properties"]["type"]["enum"] == ["belief", "goal", None]
    assert params["properties"]["tags"]["type"] == ["array", "null"]
    # The normal form is untouched.
    assert tool_spec(tool, "openai")["function"]["parameters"] == SCHEMA


def test_open_ended_schemas_stay_non_strict() -> None:
    free_value = Tool(
        "memory_write",
        "Write.",
        {"type": "object", "properties": {"key": {"type": "string"}, "value": {}}},
        lambda a: a,
    )
    open_map = Tool("wm", "Patch.", {"type": "object"}, lambda a: a)
    for tool in (free_value, open_map):
        function = tool_spec(tool, "openai", strict=True)["function"]
        assert function["strict"] is False
        assert function["parameters"] == dict(tool.parameters)


def test_null_padding_is_removed_only_from_optional_fields() -> None:
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": ["string", "null"]},
            "limit": {"type": "integer"},
            "nested": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
            },
        },
        "required": ["query"],
    }
    padded = {"query": None, "limit": None, "nested": {"a": None, "b": None}, "extra": None}
    assert strip_null_padding(schema, padded) == {
        "query": None,
        "nested": {"a": None},
        "extra": None,
    }
    assert padded["limit"] is None  # the input is not changed


def test_tools_with_equal_schemas_share_one_compiled_check() -> None:
    """Layers make their tools afresh every run; the schema is compiled once per content."""

    def handler(args: dict[str, Any]) -> Any:
        return args

    def make(limit: int) -> Tool:
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer", "maximum": limit}},
            "required": ["n"],
        }
        return Tool("t", "d", schema, handler)

    first, again, other = make(5), make(5), make(9)
    assert first.check is again.check
    assert other.check is not first.check
    problems: list[str] = []
    other.check({"n": 7}, "$", problems)
    assert problems == []
    first.check({"n": 7}, "$", problems)
    assert problems == ["$.n: 7 is above the maximum 5"]
    frozen_first = Tool("t", "d", frozen(first.parameters), handler)
    assert frozen_first.check is first.check  # the same content, frozen or not
    assert Tool("t", "d", frozen(other.parameters), handler).check is other.check
    odd = Tool("t", "d", {"type": "object", "properties": {"n": {"enum": [{1, 2}]}}}, handler)
    odd.check({"n": 3}, "$", problems)  # not JSON: compiled on its own, still checks
    assert problems[-1].startswith("$.n: 3 is not one of")


def test_an_integer_past_64_bits_is_refused_not_rounded() -> None:
    """orjson reads such an integer as a float: stored, it would be silently another number."""
    with pytest.raises(ToolError, match=r"\$\.a\[1\]: the integer 123456789012345678901234567890"):
        parse_arguments('{"a": [1, 123456789012345678901234567890]}')
    with pytest.raises(ToolError, match=r"\$\.n: the integer -9223372036854775809"):
        parse_arguments(b'{"n": -9223372036854775809}')
    edges = '{"max": 18446744073709551615, "min": -9223372036854775808}'
    assert parse_arguments(edges) == {"max": 2**64 - 1, "min": -(2**63)}
    # Long runs of digits inside strings are text.
    assert parse_arguments('{"id": "123456789012345678901234567890"}')["id"].startswith("1234")


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"n": 10**400}, r"\$\.n"),
        ({"a": {"b": [1, -(10**400)]}}, r"\$\.a\.b\[1\]"),
        ({"a": [{"x": 2**64}]}, r"\$\.a\[0\]\.x"),
        ({"a": (0, -(2**63) - 1)}, r"\$\.a\[1\]"),
        ({"n": 10**5000}, r"\$\.n"),  # past Python's int-to-text limit too
    ],
)
def test_an_integer_past_64_bits_in_a_dict_is_refused_with_its_path(
    arguments: dict[str, Any], path: str
) -> None:
    """A Python caller hands over a dict: no JSON text to re-read, the values are checked."""
    with pytest.raises(ToolError, match=path + r": .*integer.* past the 64-bit range") as info:
        parse_arguments(arguments)
    assert info.value.code == "invalid_arguments"
    assert len(str(info.value)) < 300
    edges = {"max": 2**64 - 1, "min": -(2**63), "flag": True, "x": 1.5}
    assert parse_arguments(edges) is edges


@pytest.mark.parametrize(
    ("value", "shown"),
    [(math.inf, "Infinity"), (-math.inf, "-Infinity"), (math.nan, "NaN")],
)
def test_non_finite_numbers_in_a_dict_are_refused_with_their_path(value: float, shown: str) -> None:
    with pytest.raises(ToolError, match=rf"\$\.a\[2\]\.f: {shown} is not a finite number") as info:
        parse_arguments({"a": [0, 1, {"f": value}]})
    assert info.value.code == "invalid_arguments"


def test_a_huge_integer_in_a_number_check_is_a_problem_not_a_crash() -> None:
    with pytest.raises(ToolError, match=r"\$\.limit: an integer of 401 digits is above") as info:
        validate_arguments(SCHEMA, {"query": "q", "limit": 10**400})
    assert len(str(info.value)) < 300


def test_a_dict_that_contains_itself_is_scanned_once() -> None:
    cyclic: dict[str, Any] = {"n": 1}
    cyclic["self"] = cyclic
    cyclic["list"] = [cyclic, cyclic]
    assert parse_arguments(cyclic) is cyclic


BIG = "x" * 100_000


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("schema", "arguments", "said"),
    [
        (_object(s={"type": "string", "maxLength": 10}), {"s": BIG}, "$.s: 100,000 characters"),
        (_object(s={"enum": ["a", "b"]}), {"s": BIG}, "(100,000 characters) is not one of"),
        (_object(s={"type": "integer"}), {"s": BIG}, "$.s: expected integer, got string"),
        ({"type": "object", "additionalProperties": False}, {BIG: 1}, "(100,000 characters)"),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            {BIG: "y"},
            "… (100,000 characters): expected integer",
        ),
        (
            _object(a={"type": "array", "items": {"type": "integer"}}),
            {"a": ["y"] * 100_000},
            "and 99,980 more",
        ),
    ],
)
def test_a_bad_value_is_echoed_cut(
    schema: dict[str, Any], arguments: dict[str, Any], said: str
) -> None:
    """An error goes back into the model's context: it names the value, never repeats it whole."""
    with pytest.raises(ToolError) as info:
        validate_arguments(schema, arguments)
    text = json.dumps(error_payload("t", info.value), ensure_ascii=False)
    assert len(text) < 4096, text[:500]
    assert "x" * 201 not in text
    assert said in text


def test_an_error_payload_is_bounded_whatever_the_error_says() -> None:
    error = ToolError("m" * 1_000_000, code="invalid_arguments", details=["d" * 100_000] * 10_000)
    payload = error_payload("n" * 100_000, error)
    assert len(json.dumps(payload)) < 16_384
    assert payload["error"]["details"][-1].startswith("… and 9,980 more")
    assert "characters cut" in payload["error"]["message"]
    small = error_payload("t", ToolError("short", code="c", details=["one"]))
    assert small == {
        "ok": False,
        "tool": "t",
        "error": {"code": "c", "message": "short", "details": ["one"]},
    }


def test_responses_format_is_the_flat_function_shape() -> None:
    tool = Tool("working-memory/update", "Update it.", {"type": "object"}, lambda a: a)
    assert tool_spec(tool, "responses") == {
        "type": "function",
        "name": "working-memory_update",
        "description": "Update it.",
        "parameters": {"type": "object"},
    }
    # An open-ended schema cannot be strict: said so, and sent as it is.
    assert tool_spec(tool, "responses", strict=True) == {
        **tool_spec(tool, "responses"),
        "strict": False,
    }


def test_responses_strict_form_equals_the_chat_one() -> None:
    tool = Tool("mind_recall", "Recall.", SCHEMA, lambda a: a)
    flat = tool_spec(tool, "responses", strict=True)
    chat = tool_spec(tool, "openai", strict=True)["function"]
    assert flat == {"type": "function", **chat}
    assert flat["strict"] is True
    assert flat["parameters"]["additionalProperties"] is False
    assert tool_spec(tool, "responses")["parameters"] == SCHEMA


def test_responses_format_through_a_run() -> None:
    from memstrata import MemoryStack, WorkingMemory

    stack = MemoryStack([WorkingMemory()], store="memory://")
    with stack.run(thread_id="t") as run:
        specs = run.tool_specs("responses", strict=True)
    assert specs
    for spec in specs:
        assert set(spec) == {"type", "name", "description", "parameters", "strict"}
        assert spec["type"] == "function" and WIRE.match(spec["name"])


def test_a_spec_is_the_callers_own_copy_at_every_depth() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}}}
    tool = Tool("t", "T.", schema, lambda a: a)
    tool_spec(tool, "openai")["function"]["parameters"]["properties"]["a"]["enum"].append("y")
    tool_spec(tool, "anthropic")["input_schema"]["properties"]["a"]["type"] = "integer"
    tool_spec(tool, "mcp")["inputSchema"]["properties"].clear()
    assert schema == {"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}}}
    assert tool_spec(tool, "openai")["function"]["parameters"] == schema


def test_a_spec_of_a_schema_that_is_not_json_text_is_still_a_deep_copy() -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [2**70]}}, "x-extra": {1: ["v"]}}
    spec = tool_spec(Tool("t", "T.", schema, lambda a: a), "mcp")["inputSchema"]
    assert spec == schema
    spec["properties"]["a"]["enum"].append(3)
    spec["x-extra"][1].append("w")
    assert schema["properties"]["a"]["enum"] == [2**70]
    assert schema["x-extra"] == {1: ["v"]}


def test_a_check_shared_by_equal_schemas_holds_none_of_their_objects() -> None:
    """Tools with equal schemas share one compiled check, found by the schema's content: it
    must check that content, not whatever the first schema's owner changed its objects to."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"unit": {"enum": [{"scale": "celsius"}, {"scale": "kelvin"}]}},
    }
    first = Tool("first", "T.", schema, lambda a: a)
    second = Tool("second", "T.", copy.deepcopy(schema), lambda a: a)
    args = {"unit": {"scale": "celsius"}}
    problems: list[str] = []
    first.check(args, "$", problems)
    assert problems == []
    schema["properties"]["unit"]["enum"][0]["scale"] = "fahrenheit"
    second.check(args, "$", problems)
    assert problems == []


def test_a_frozen_schema_refuses_every_change_and_still_checks_and_renders() -> None:
    plain = {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "z"]}}}
    schema = frozen(plain)
    inner = schema["properties"]["a"]
    changes = [
        lambda: inner.__setitem__("type", "integer"),
        lambda: inner.__delitem__("type"),
        lambda: inner.update(type="integer"),
        lambda: inner.pop("type"),
        lambda: inner.popitem(),
        lambda: inner.setdefault("minLength", 1),
        lambda: inner.clear(),
        lambda: inner.__ior__({"type": "integer"}),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert inner["enum"] == ("x", "z")  # an array is a tuple: no append
    assert orjson.loads(orjson.dumps(schema)) == plain
    assert copy.deepcopy(schema) is schema and copy.copy(schema) is schema
    unpickled = pickle.loads(pickle.dumps(schema))
    assert unpickled == schema
    with pytest.raises(TypeError, match="read-only"):
        unpickled["properties"]["a"]["type"] = "integer"
    tool = Tool("t", "T.", schema, lambda a: a)
    raise_problems(tool.check, {"a": "x"})
    with pytest.raises(ToolError, match=r"\$\.a: 'y' is not one of 'x', 'z'"):
        raise_problems(tool.check, {"a": "y"})
    spec = tool_spec(tool, "openai", strict=True)["function"]["parameters"]
    assert spec["properties"]["a"] == {"type": ["string", "null"], "enum": ["x", "z", None]}
    spec["properties"]["a"]["enum"].append("w")  # the caller's own, plain copy
    assert tool_spec(tool, "openai")["function"]["parameters"] == plain


def test_a_frozen_schema_that_is_not_json_still_checks() -> None:
    schema = frozen({"type": "object", "properties": {"n": {"enum": [2**70]}}})
    tool = Tool("t", "d", schema, lambda a: a)
    raise_problems(tool.check, {"n": 2**70})
    with pytest.raises(ToolError, match="is not one of"):
        raise_problems(tool.check, {"n": 3})
