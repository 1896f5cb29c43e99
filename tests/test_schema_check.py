"""StateSchema: checking only what a merge changed gives the verdict and the messages of a full
check, for every kind of schema node (local ones recursed into, the others checked whole)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata import deep_merge
from memstrata.exceptions import InvalidInputError
from memstrata.schema_check import StateSchema

ITEM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "status": {"type": "string", "enum": ["todo", "doing", "done"]},
        "owner": {
            "type": "object",
            "properties": {"team": {"type": "string"}},
            "required": ["team"],
        },
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "n": {"type": "integer", "minimum": 0},
    },
    "required": ["name"],
}

SCHEMAS: list[dict[str, Any]] = [
    # Local all the way down: recursed into.
    {
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {"name": {"type": "string"}}},
            "projects": {"type": "object", "additionalProperties": ITEM, "maxProperties": 6},
        },
    },
    # Closed objects, counted member sets, names constrained.
    {
        "type": "object",
        "properties": {
            "projects": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": ITEM, "b": ITEM},
                "minProperties": 1,
            },
            "user": {"type": "object", "propertyNames": {"maxLength": 3}},
        },
        "required": ["projects"],
    },
    # patternProperties: members checked whole.
    {
        "type": "object",
        "patternProperties": {"^p": ITEM, "^pa": {"type": "object", "required": ["n"]}},
        "additionalProperties": {"type": "integer"},
    },
    # Combinators and references: checked in full.
    {
        "type": "object",
        "properties": {"projects": {"type": "object", "additionalProperties": ITEM}},
        "anyOf": [{"required": ["user"]}, {"required": ["projects"]}],
    },
    {
        "$defs": {"item": ITEM},
        "type": "object",
        "properties": {
            "projects": {"type": "object", "additionalProperties": {"$ref": "#/$defs/item"}}
        },
    },
    {
        "type": "object",
        "properties": {
            "projects": {
                "type": "object",
                "additionalProperties": ITEM,
                "dependentRequired": {"a": ["b"]},
            },
            "user": {"enum": [{"name": "x"}, {}]},
        },
    },
]

# The schemas with an object closed by additionalProperties: false.
CLOSED = {1}

keys = st.sampled_from(["user", "projects", "a", "b", "pa", "px", "q", "name", "status"])
leaf_keys = st.sampled_from(["name", "status", "owner", "tags", "n", "team", "zz"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 20),
    st.sampled_from(["todo", "done", "x", "a-very-long-name"]),
)


def values(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return scalars
    return st.one_of(
        scalars,
        st.lists(st.sampled_from(["a", "b", 1]), max_size=4),
        st.dictionaries(leaf_keys if depth < 3 else keys, values(depth - 1), max_size=4),
    )


states = st.dictionaries(keys, values(3), max_size=4)

# A valid state per schema; the property starts from it changed by a random patch, so that
# every schema gets many valid bases (random states rarely satisfy the closed ones).
VALID = [
    {"user": {"name": "u"}, "projects": {"p1": {"name": "a", "owner": {"team": "t"}}}},
    {"projects": {"a": {"name": "x", "tags": ["a"]}}, "user": {"ab": 1}},
    {"pa": {"name": "x", "n": 1}, "px": {"name": "y"}, "q": 3},
    {"projects": {"p": {"name": "x"}}},
    {"projects": {"p": {"name": "x"}}},
    {"projects": {"p": {"name": "x"}}},
]


def verdict(schema: dict[str, Any], state: Any) -> set[str]:
    validator = jsonschema_rs.validator_for(schema)
    return {f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(state)}


@settings(max_examples=400, deadline=None)
@given(
    index=st.integers(0, len(SCHEMAS) - 1),
    first=states,
    patch=states,
    nulls=st.sampled_from(["keep", "delete", "ignore"]),
    arrays=st.sampled_from(["replace", "union"]),
)
def test_checking_the_change_agrees_with_a_full_check(
    index: int, first: dict[str, Any], patch: dict[str, Any], nulls: str, arrays: str
) -> None:
    schema = SCHEMAS[index]
    compiled = StateSchema(schema)
    assert not compiled.violations(VALID[index])
    old = deep_merge(VALID[index], first)
    if compiled.violations(old):
        old = VALID[index]  # the invariant: the base was checked
    new = deep_merge(old, patch, nulls=nulls, arrays=arrays)  # type: ignore[arg-type]
    partial = compiled.violations_after_merge(old, new, patch)
    full = compiled.violations(new)
    assert bool(partial) == bool(full), (partial, full)
    # A closed object lists every unexpected member in one message in a full check, and one
    # per member here; the places named are the same either way, and every other message is.
    if index in CLOSED:
        assert {v.split(": ")[0] for v in partial} == {v.split(": ")[0] for v in full}
    else:
        assert sorted(partial) == sorted(full)


def test_messages_name_the_path_of_the_changed_member() -> None:
    compiled = StateSchema(SCHEMAS[0])
    old = {"projects": {f"p{i}": {"name": f"n{i}", "status": "todo"} for i in range(5)}}
    patch = {"projects": {"p3": {"status": "lost", "owner": {}}}}
    new = deep_merge(old, patch)
    assert sorted(compiled.violations_after_merge(old, new, patch)) == sorted(
        compiled.violations(new)
    )
    assert any(v.startswith("$.projects.p3.status:") for v in compiled.violations(new))
    assert any(v.startswith("$.projects.p3.owner:") for v in compiled.violations(new))
    # The member set: a sixth and seventh project pass maxProperties 6 at .projects.
    more = {"projects": {"p5": {"name": "x"}, "p6": {"name": "y"}}}
    grown = deep_merge(old, more)
    found = compiled.violations_after_merge(old, grown, more)
    assert found == compiled.violations(grown) and found[0].startswith("$.projects:")


def test_schemas_with_references_are_always_checked_in_full() -> None:
    assert StateSchema(SCHEMAS[0]).partial
    assert not StateSchema(SCHEMAS[4]).partial


def test_an_invalid_schema_is_refused_by_name() -> None:
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema"):
        StateSchema({"type": "no-such-type"})


def test_a_small_change_checks_only_the_change() -> None:
    # Proof that untouched members are not walked: one of them is (against the invariant)
    # invalid, and only a full check sees it. Speed itself is measured in benches/.
    compiled = StateSchema(SCHEMAS[0])
    old = {"projects": {f"p{i}": {"name": f"n{i}"} for i in range(6)}}
    old["projects"]["p0"]["status"] = "not-a-status"
    patch = {"projects": {"p4": {"status": "done"}}}
    new = deep_merge(old, patch)
    assert compiled.violations_after_merge(old, new, patch) == []
    assert [v.split(":")[0] for v in compiled.violations(new)] == ["$.projects.p0.status"]
