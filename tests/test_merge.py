"""deep_merge, merge_json and strip_unsafe_keys against the pure-Python reference."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections import OrderedDict
from typing import Any

import pytest
import reference_merge as ref
from hypothesis import example, given
from hypothesis import strategies as st

import memstrata
from memstrata import (
    DEFAULT_UNSAFE_KEYS,
    MAX_DEPTH,
    deep_merge,
    merge_json,
    strip_unsafe_keys,
)
from memstrata.exceptions import (
    InvalidJSONError,
    InvalidOptionError,
    NestingTooDeepError,
    NonFiniteNumberError,
    UnsupportedTypeError,
)

ARRAYS = ("replace", "union")
NULLS = ("keep", "delete", "ignore")

# A small key pool so base and patch collide often, with the unsafe keys mixed in.
keys = st.sampled_from(["a", "b", "c", "tags", "__proto__", "constructor", "é"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 1.0, 0.0, -0.0, True, False, "1", ""])
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=5),
    max_leaves=25,
)
# Long arrays of a few repeated values, to go past the pairwise limit onto the hash index.
long_arrays = st.lists(
    st.sampled_from([1, 1.0, True, "x", None, {"k": [1]}, {"k": [1.0]}, [1, 2], [2, 1]]),
    min_size=10,
    max_size=40,
)
documents = st.dictionaries(keys, json_values | long_arrays, max_size=6)


def dump(value: Any) -> str:
    """Type- and order-sensitive rendering: True is not 1, 1.0 is not 1, key order counts."""
    return json.dumps(value, sort_keys=False)


@given(
    base=documents | json_values,
    patch=documents | json_values,
    arrays=st.sampled_from(ARRAYS),
    nulls=st.sampled_from(NULLS),
)
def test_deep_merge_agrees_with_the_reference(
    base: Any, patch: Any, arrays: str, nulls: str
) -> None:
    before = (dump(base), dump(patch))
    got = deep_merge(base, patch, arrays=arrays, nulls=nulls)  # type: ignore[arg-type]
    want = ref.deep_merge(base, patch, arrays=arrays, nulls=nulls)
    assert dump(got) == dump(want)
    assert (dump(base), dump(patch)) == before  # pure: nothing mutated


@given(base=documents, patch=documents, custom=st.lists(keys, max_size=3))
def test_custom_unsafe_keys_agree_with_the_reference(
    base: Any, patch: Any, custom: list[str]
) -> None:
    got = deep_merge(base, patch, unsafe_keys=iter(custom))
    assert dump(got) == dump(ref.deep_merge(base, patch, unsafe_keys=custom))


@given(value=json_values | documents)
def test_strip_agrees_with_the_reference_and_does_not_mutate(value: Any) -> None:
    before = dump(value)
    assert dump(strip_unsafe_keys(value)) == dump(ref.strip_unsafe_keys(value))
    assert dump(value) == before


@given(
    base=documents,
    patch=documents | json_values,
    arrays=st.sampled_from(ARRAYS),
    nulls=st.sampled_from(NULLS),
)
@example(  # found by hypothesis: equal only once the base's unsafe key is stripped
    base={"a": [[{"__proto__": None, "c": 0}]]},
    patch={"a": [[{"c": 0}]]},
    arrays="union",
    nulls="keep",
)
def test_merge_json_agrees_with_the_reference(
    base: Any, patch: Any, arrays: str, nulls: str
) -> None:
    got = merge_json(dump(base).encode(), dump(patch), arrays=arrays, nulls=nulls)  # type: ignore[arg-type]
    # merge_json parses the whole base, so the base is stripped before merging (elements that
    # differ only by an unsafe key are then duplicates for a union) and the result after.
    clean_base = ref.strip_unsafe_keys(base)
    want = ref.strip_unsafe_keys(ref.deep_merge(clean_base, patch, arrays=arrays, nulls=nulls))
    assert isinstance(got, bytes)
    assert dump(json.loads(got)) == dump(json.loads(dump(want)))


def test_untouched_base_subtrees_are_shared_and_touched_ones_copied() -> None:
    base = {"profile": {"name": "Ann", "tags": ["a"]}, "history": [{"x": 1}], "n": 1}
    patch = {"profile": {"name": "Bob"}}
    out = deep_merge(base, patch)
    assert out["history"] is base["history"]
    assert out["profile"]["tags"] is base["profile"]["tags"]
    assert out is not base and out["profile"] is not base["profile"]
    assert base["profile"]["name"] == "Ann"
    assert out == {"profile": {"name": "Bob", "tags": ["a"]}, "history": [{"x": 1}], "n": 1}


def test_patch_subtrees_are_copied_not_shared() -> None:
    patch = {"new": {"deep": {"list": [1, {"k": 2}]}}}
    out = deep_merge({}, patch)
    assert out == patch
    assert out["new"] is not patch["new"]
    assert out["new"]["deep"]["list"] is not patch["new"]["deep"]["list"]
    out["new"]["deep"]["list"].append(3)
    assert patch["new"]["deep"]["list"] == [1, {"k": 2}]


def test_null_modes() -> None:
    base = {"a": 1, "b": {"c": 2, "d": 3}}
    patch = {"a": None, "b": {"c": None}, "n": {"x": None, "y": [None]}}
    assert deep_merge(base, patch) == {
        "a": None,
        "b": {"c": None, "d": 3},
        "n": {"x": None, "y": [None]},
    }
    assert deep_merge(base, patch, nulls="delete") == {"b": {"d": 3}, "n": {"y": [None]}}
    assert deep_merge(base, patch, nulls="ignore") == {
        "a": 1,
        "b": {"c": 2, "d": 3},
        "n": {"y": [None]},
    }
    assert deep_merge(base, None, nulls="ignore") is base
    assert deep_merge(base, None) is None


def test_union_uses_json_equality() -> None:
    base = {"t": [1, "a", {"k": [1, 2], "j": 0}, [True]]}
    patch = {"t": [1.0, True, {"j": 0.0, "k": [1, 2]}, [True], [1], "a", "b", "b"]}
    out = deep_merge(base, patch, arrays="union")
    assert dump(out) == dump({"t": [1, "a", {"k": [1, 2], "j": 0}, [True], True, [1], "b"]})
    # Without union, arrays replace.
    assert deep_merge({"t": [1]}, {"t": [2]}) == {"t": [2]}


def test_union_of_long_arrays_of_objects() -> None:
    base = [{"id": i, "tags": [i % 7]} for i in range(5000)]
    patch = [{"tags": [i % 7], "id": float(i)} for i in range(2500, 7500)]
    out = deep_merge(base, patch, arrays="union")
    assert len(out) == 7500
    assert out[:5000] == base and all(a is b for a, b in zip(out, base))
    assert out[-1] == {"tags": [7499 % 7], "id": 7499.0}


def merged_both_ways(base: Any, patch: Any, **options: Any) -> Any:
    """``deep_merge``'s result, after checking that ``merge_json`` gives the same."""
    out = deep_merge(base, patch, **options)
    text = merge_json(json.dumps(base), json.dumps(patch), **options)
    assert dump(json.loads(text)) == dump(out)
    return out


def test_union_drops_duplicates_already_in_the_base() -> None:
    out = merged_both_ways({"a": [1, 1, 2]}, {"a": [2, 3]}, arrays="union")
    assert dump(out) == dump({"a": [1, 2, 3]})
    out = merged_both_ways(
        [{"k": 1}, 1, {"k": 1.0}, 1.0, True, [1], {"k": 1}],
        [1, {"k": 1}, True, 2, 2],
        arrays="union",
    )
    # The first occurrence stays: 1 (not 1.0), {"k": 1} (not {"k": 1.0}); True is not 1.
    assert dump(out) == dump([{"k": 1}, 1, True, [1], 2])
    assert dump(merged_both_ways([1.0, 1], [], arrays="union")) == "[1.0]"
    # The base's own duplicates go too, the first occurrence staying ({"k": 1}, an int).
    out = deep_merge([{"k": 1}, {"k": 1.0}], [], arrays="union")
    assert out == [{"k": 1}] and type(out[0]["k"]) is int


def test_union_drops_base_duplicates_past_the_pairwise_limit() -> None:
    # 16 values is the kernel's pairwise limit: past it the hash index dedups.
    distinct = [{"id": i, "tags": [i % 3]} for i in range(20)]
    base = distinct + copy.deepcopy(distinct) * 2
    patch = [{"tags": [i % 3], "id": float(i)} for i in range(10, 40)]
    out = merged_both_ways(base, patch, arrays="union")
    assert dump(out) == dump(distinct + patch[10:])
    out = deep_merge(base, patch, arrays="union")
    assert all(a is b for a, b in zip(out, distinct))
    out = merged_both_ways([1, 1.0, True, "1"] * 10, [1.0, True, 2], arrays="union")
    assert dump(out) == dump([1, True, "1", 2])


@pytest.mark.parametrize("arrays", ARRAYS)
@pytest.mark.parametrize("nulls", NULLS)
def test_nulls_inside_arrays_are_kept_verbatim(arrays: str, nulls: str) -> None:
    items = [None, {"x": None, "y": [{"z": None}], "w": {"v": None}}, [None]]
    out = merged_both_ways({}, {"a": items}, arrays=arrays, nulls=nulls)
    assert out == {"a": items}
    out = merged_both_ways({"a": [1]}, {"a": items}, arrays=arrays, nulls=nulls)
    assert out == {"a": [1, *items] if arrays == "union" else items}
    assert merged_both_ways({}, items, arrays=arrays, nulls=nulls) == items
    assert deep_merge({}, {"a": tuple(items)}, arrays=arrays, nulls=nulls) == {"a": items}  # type: ignore[arg-type]
    # Keys of patch objects reached through object keys still follow the policy.
    patch = {"b": {"c": None, "d": [{"e": None}]}}
    out = merged_both_ways({"b": {"c": 1}}, patch, arrays=arrays, nulls=nulls)
    wants: dict[str, dict[str, Any]] = {"keep": {"c": None}, "delete": {}, "ignore": {"c": 1}}
    assert out == {"b": {**wants[nulls], "d": [{"e": None}]}}
    out = merged_both_ways({}, {"n": {"x": None, "y": [{"x": None}]}}, arrays=arrays, nulls=nulls)
    assert out == {
        "n": {"x": None, "y": [{"x": None}]} if nulls == "keep" else {"y": [{"x": None}]}
    }


@pytest.mark.parametrize("nulls", NULLS)
def test_unsafe_keys_are_stripped_inside_arrays_whatever_the_null_mode(nulls: str) -> None:
    patch = {"a": [{"__proto__": None, "constructor": {"x": 1}, "k": None, "bad": None}]}
    for arrays in ARRAYS:
        options = {"arrays": arrays, "nulls": nulls, "unsafe_keys": (*DEFAULT_UNSAFE_KEYS, "bad")}
        assert merged_both_ways({"a": []}, patch, **options) == {"a": [{"k": None}]}
    with pytest.raises(UnsupportedTypeError) as err:
        deep_merge({}, {"a": [{"k": None, "s": {1}}]}, nulls=nulls)  # type: ignore[arg-type]
    assert err.value.path == "$.a[0].s"


def test_touched_base_dicts_are_stripped_untouched_ones_trusted() -> None:
    base = {"a": {"__proto__": 1, "x": 1}, "b": {"__proto__": 2}}
    out = deep_merge(base, {"a": {"y": 2}})
    assert out["a"] == {"x": 1, "y": 2}
    assert out["b"] is base["b"]


def all_keys(value: Any) -> set[str]:
    """Every key at every depth, without recursion (json and repr give up near 1000 levels)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            found.update(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` dicts nested under key "a", built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def test_nesting_up_to_max_depth_is_accepted_and_past_it_refused() -> None:
    ok = nested(MAX_DEPTH)
    merged = deep_merge({}, ok)
    for _ in range(MAX_DEPTH):
        assert merged is not ok and list(merged) == ["a"]
        merged, ok = merged["a"], ok["a"]
    assert merged == 1
    ok = nested(MAX_DEPTH)
    assert strip_unsafe_keys(ok) is ok
    with pytest.raises(NestingTooDeepError) as err:
        deep_merge({}, nested(MAX_DEPTH + 1))
    assert err.value.limit == MAX_DEPTH
    assert err.value.path == "$" + ".a" * MAX_DEPTH
    assert str(err.value).startswith("$.a.a.a")


def test_a_patch_nested_100000_deep_is_a_clean_error() -> None:
    deep = nested(100_000)
    with pytest.raises(NestingTooDeepError):
        deep_merge({"a": {}}, deep)
    with pytest.raises(NestingTooDeepError):
        strip_unsafe_keys(deep)
    deep_list: list[Any] = []
    for _ in range(100_000):
        deep_list = [deep_list]
    with pytest.raises(NestingTooDeepError) as err:
        deep_merge([], deep_list, arrays="union")
    assert err.value.path is not None and err.value.path.startswith("$[0][0]")
    with pytest.raises(NestingTooDeepError):
        merge_json(b"{}", b"[" * 100_000)
    with pytest.raises(NestingTooDeepError) as err:
        merge_json(b'{"x": {"y": [0, ' + b"[" * 2000, b"{}")
    assert err.value.path is not None and err.value.path.startswith("$.x.y[1]")


def test_merge_json_handles_max_depth_text() -> None:
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert merge_json("{}", text) == text.encode()
    # Past serde_json's own limit of 128 the text is re-parsed on a deep stack; still invalid
    # JSON must say so.
    with pytest.raises(InvalidJSONError, match=r"^patch is not valid JSON"):
        merge_json("{}", "[" * 500 + "]" * 499)
    deep = '{"a":' * 300 + '{"__proto__": 1, "b": [1]}' + "}" * 300
    assert merge_json(deep, '{"a": {"c": 2}}').startswith(b'{"a":{"a":{')
    assert b"__proto__" not in merge_json(deep, "{}")
    with pytest.raises(NestingTooDeepError):
        merge_json("{}", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


@pytest.mark.parametrize(
    ("patch", "path", "error"),
    [
        ({"profile": {"tags": [0, 1, 2, {1, 2}]}}, "$.profile.tags[3]", UnsupportedTypeError),
        ({"profile": {"blob": b"x"}}, "$.profile.blob", UnsupportedTypeError),
        ({"p": [object()]}, "$.p[0]", UnsupportedTypeError),
        ({"p": {1: "x"}}, "$.p", UnsupportedTypeError),
        ({"p": {"q": float("nan")}}, "$.p.q", NonFiniteNumberError),
        ({"p": [float("-inf")]}, "$.p[0]", NonFiniteNumberError),
        ({"a b": {"c": float("inf")}}, '$["a b"].c', NonFiniteNumberError),
    ],
)
def test_bad_patch_values_name_their_path(patch: Any, path: str, error: type[Exception]) -> None:
    with pytest.raises(error) as err:
        deep_merge({"profile": {"tags": []}}, patch)
    assert err.value.path == path  # type: ignore[attr-defined]
    assert path in str(err.value)


def test_bad_values_in_strip_name_their_path() -> None:
    with pytest.raises(UnsupportedTypeError) as err:
        strip_unsafe_keys({"a": [1, {"b": {1, 2}}]})
    assert err.value.path == "$.a[1].b"
    with pytest.raises(NonFiniteNumberError):
        strip_unsafe_keys([float("nan")])
    assert strip_unsafe_keys([float("inf")], allow_nan=True) == [float("inf")]


def test_allow_nan_accepts_non_finite_floats() -> None:
    out = deep_merge({}, {"x": float("inf")}, allow_nan=True)
    assert out == {"x": float("inf")}


def test_options_are_validated() -> None:
    with pytest.raises(InvalidOptionError, match=r'arrays must be one of "replace", "union"'):
        deep_merge({}, {}, arrays="merge")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match=r"nulls must be one of"):
        deep_merge({}, {}, nulls=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="unsafe_keys must be an iterable of str"):
        deep_merge({}, {}, unsafe_keys="__proto__")
    with pytest.raises(InvalidOptionError, match="unsafe_keys"):
        deep_merge({}, {}, unsafe_keys=[1])  # type: ignore[list-item]
    with pytest.raises(InvalidOptionError, match="arrays"):
        merge_json(b"{}", b"{}", arrays="concat")  # type: ignore[arg-type]


def test_merge_json_errors_name_the_argument() -> None:
    with pytest.raises(InvalidJSONError, match=r"^patch is not valid JSON"):
        merge_json(b"{}", b"{")
    with pytest.raises(InvalidJSONError, match=r"^base is not valid JSON"):
        merge_json(b"[1] x", b"{}")
    with pytest.raises(InvalidJSONError, match=r"^patch"):
        merge_json(b"{}", b'{"x": NaN}')
    with pytest.raises(UnsupportedTypeError, match="base must be JSON text"):
        merge_json(1, b"{}")  # type: ignore[arg-type]


def test_merge_json_keeps_key_order_and_writes_compact_json() -> None:
    out = merge_json('{"z": 1, "a": {"__proto__": 1, "k": [1]}}', '{"a": {"k": [2]}, "b": "é"}')
    assert out == '{"z":1,"a":{"k":[2]},"b":"é"}'.encode()


def test_tuples_become_lists_and_dict_subclasses_plain_dicts() -> None:
    out = deep_merge(OrderedDict(a=1), OrderedDict(b=(1, 2, OrderedDict(c=None))))
    assert type(out) is dict and out == {"a": 1, "b": [1, 2, {"c": None}]}
    assert type(out["b"][2]) is dict
    assert deep_merge((1, 2), (2, 3), arrays="union") == [1, 2, 3]
    assert strip_unsafe_keys((1, {"x": 1})) == [1, {"x": 1}]


def test_strip_shares_what_needs_no_change() -> None:
    clean = {"a": {"b": [1, 2]}, "c": [{"d": 1}]}
    assert strip_unsafe_keys(clean) is clean
    dirty = {"a": {"b": [1, 2]}, "c": [{"d": 1, "constructor": 2}]}
    out = strip_unsafe_keys(dirty)
    assert out == {"a": {"b": [1, 2]}, "c": [{"d": 1}]}
    assert out["a"] is dirty["a"] and out is not dirty
    assert "constructor" in dirty["c"][0]
    assert strip_unsafe_keys({"x": 1, "y": 2}, keys=("x",)) == {"y": 2}


def test_default_unsafe_keys_are_exported() -> None:
    assert DEFAULT_UNSAFE_KEYS == ("__proto__", "constructor")
    assert isinstance(DEFAULT_UNSAFE_KEYS, tuple)
    assert deep_merge({}, {"__proto__": 1}, unsafe_keys=DEFAULT_UNSAFE_KEYS) == {}
    assert deep_merge({}, {"__proto__": 1}, unsafe_keys=()) == {"__proto__": 1}
    for name in ("deep_merge", "merge_json", "strip_unsafe_keys", "MAX_DEPTH"):
        assert name in memstrata.__all__


def test_inputs_are_not_mutated_by_any_mode() -> None:
    base = {"a": {"b": [1, {"c": 2}], "__proto__": 1}, "d": None}
    patch = {"a": {"b": [{"c": 2}, 3], "e": None}, "d": {"x": None}}
    for arrays in ARRAYS:
        for nulls in NULLS:
            b, p = copy.deepcopy(base), copy.deepcopy(patch)
            deep_merge(b, p, arrays=arrays, nulls=nulls)  # type: ignore[arg-type]
            assert b == base and p == patch


def test_max_depth_fits_in_a_small_thread_stack() -> None:
    """Nesting at the limit must not overflow a 512 KiB thread stack (macOS' default for
    secondary threads outside Python); run in a subprocess so a crash fails the test cleanly."""
    code = """
import threading, memstrata as m
def nested(depth):
    v = 1
    for _ in range(depth):
        v = {"a": [v]}
    return v
ok = nested(m.MAX_DEPTH // 2)
def run():
    m.deep_merge(ok, ok)
    m.deep_merge({}, ok, arrays="union")
    m.strip_unsafe_keys(ok)
    m.merge_json(b"{}", b"[" * m.MAX_DEPTH + b"]" * m.MAX_DEPTH)
    print("done")
threading.stack_size(512 * 1024)
t = threading.Thread(target=run)
t.start()
t.join()
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


def test_configured_unsafe_keys_replace_the_defaults_as_documented() -> None:
    # The stub says so and how to add to them: a caller passing its own keys chose the set.
    patch = {"__proto__": 1, "constructor": 2, "zz": 3, "ok": 4}
    assert deep_merge({}, patch, unsafe_keys=("zz",)) == {"__proto__": 1, "constructor": 2, "ok": 4}
    assert deep_merge({}, patch, unsafe_keys=(*DEFAULT_UNSAFE_KEYS, "zz")) == {"ok": 4}
    assert strip_unsafe_keys(patch, (*DEFAULT_UNSAFE_KEYS, "zz")) == {"ok": 4}
