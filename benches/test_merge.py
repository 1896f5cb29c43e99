"""deep_merge / merge_json against a hand-written Python merge, deepmerge and mergedeep.

Every peer returns a new result without mutating its inputs, like ours: deepmerge and mergedeep
merge into their destination, so their fair row deep-copies ``base`` first. Rows marked
"into a pre-made copy" time only the merge into a copy made outside the timer (the best case
for them; the copy is reused, which is harmless because merging the same patch again does the
same work). Before timing, each bench checks that every peer produces a result equal to ours.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from benchkit import compare
from deepmerge import Merger
from mergedeep import merge as mergedeep_merge
from state_data import count_nodes

from memstrata import deep_merge, merge_json

UNSAFE = frozenset(("__proto__", "constructor"))


def python_merge(base: Any, patch: Any) -> Any:
    """The merge a good Python developer would write: same semantics as ``deep_merge`` with the
    defaults (objects merge, arrays and primitives replace, null stored, unsafe keys stripped
    from every object the merge creates or touches), sharing untouched subtrees of ``base``."""
    if isinstance(patch, dict):
        if isinstance(base, dict):
            out = (
                {k: v for k, v in base.items() if k not in UNSAFE}
                if UNSAFE & base.keys()
                else base.copy()
            )
        else:
            out = {}
        for key, value in patch.items():
            if key in UNSAFE:
                continue
            if isinstance(value, (dict, list)):
                out[key] = python_merge(out.get(key), value)
            else:
                out[key] = value
        return out
    if isinstance(patch, list):
        return [
            python_merge(None, item) if isinstance(item, (dict, list)) else item for item in patch
        ]
    return patch


deepmerger = Merger([(dict, ["merge"]), (list, ["override"])], ["override"], ["override"])


def make_state(fanout: int = 6, depth: int = 5, seed: int = 7) -> dict[str, Any]:
    """About 10k JSON values (objects, arrays, scalars), nested ``depth`` deep."""
    rng = random.Random(seed)

    def node(level: int) -> Any:
        if level == depth:
            kind = rng.randrange(12)
            if kind < 4:
                return rng.randrange(1000)
            if kind < 8:
                return f"value-{rng.randrange(10**6)}"
            if kind < 11:
                return rng.random()
            return [rng.randrange(100) for _ in range(2)]
        return {f"k{level}_{i}": node(level + 1) for i in range(fanout)}

    return node(0)  # type: ignore[no-any-return]


def make_patch(state: dict[str, Any], leaves: int, seed: int = 11) -> dict[str, Any]:
    """``leaves`` leaf updates at random paths of ``state`` (some new keys, some lists)."""
    rng = random.Random(seed)
    patch: dict[str, Any] = {}
    n = 0
    while n < leaves:
        cursor, target = state, patch
        path = []
        while isinstance(cursor, dict):
            key = rng.choice(list(cursor))
            path.append(key)
            cursor = cursor[key]
        for key in path[:-1]:
            target = target.setdefault(key, {})
        last = path[-1] if rng.random() < 0.9 else f"new_{n}"
        if last in target:
            continue
        target[last] = rng.choice([n, f"updated-{n}", [n, n + 1], {"note": n, "ok": True}])
        n += 1
    return patch


STATE = make_state()
PATCH_500 = make_patch(STATE, 500)
PATCH_10 = make_patch(STATE, 10, seed=3)


def check_equal(ours: Any, peers: dict[str, Any]) -> None:
    for name, result in peers.items():
        assert result == ours, f"{name} disagrees with deep_merge"


def test_deep_merge_500_leaves(benchmark: Any) -> None:
    base, patch = STATE, PATCH_500
    assert 9_000 <= count_nodes(base) <= 11_000
    premade_dm = copy.deepcopy(base)
    premade_md = copy.deepcopy(base)
    peers = {
        "python merge": lambda: python_merge(base, patch),
        "deepmerge (deepcopy base + merge)": lambda: deepmerger.merge(copy.deepcopy(base), patch),
        "mergedeep (deepcopy base + merge)": lambda: mergedeep_merge(copy.deepcopy(base), patch),
        "deepmerge (into a pre-made copy)": lambda: deepmerger.merge(premade_dm, patch),
        "mergedeep (into a pre-made copy)": lambda: mergedeep_merge(premade_md, patch),
    }
    ours = deep_merge(base, patch)
    check_equal(ours, {name: fn() for name, fn in peers.items()})
    assert base == make_state()  # nothing mutated the shared state
    compare(
        benchmark,
        "deep_merge: 500-leaf patch into a 10k-node state (depth 5)",
        lambda: deep_merge(base, patch),
        peers,
        target=">= 4x python merge, >= 10x deepmerge/mergedeep (deepcopy rows)",
    )


def test_deep_merge_10_keys(benchmark: Any) -> None:
    base, patch = STATE, PATCH_10
    check_equal(deep_merge(base, patch), {"python merge": python_merge(base, patch)})
    compare(
        benchmark,
        "deep_merge: 10-leaf patch into the same state",
        lambda: deep_merge(base, patch),
        {"python merge": lambda: python_merge(base, patch)},
        target="not slower than python merge (>= 1.0x)",
    )


def test_merge_json_500_leaves(benchmark: Any) -> None:
    base = json.dumps(STATE).encode()
    patch = json.dumps(PATCH_500).encode()

    def stdlib() -> bytes:
        merged = python_merge(json.loads(base), json.loads(patch))
        return json.dumps(merged, separators=(",", ":"), ensure_ascii=False).encode()

    peers = {"json.loads + python merge + json.dumps": stdlib}
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is in the bench extra
        orjson = None
    if orjson is not None:
        peers["orjson.loads + python merge + orjson.dumps"] = lambda: orjson.dumps(
            python_merge(orjson.loads(base), orjson.loads(patch))
        )
    ours = merge_json(base, patch)
    for name, fn in peers.items():
        assert json.loads(fn()) == json.loads(ours), name
    compare(
        benchmark,
        "merge_json: 500-leaf patch into a 10k-node state (JSON text)",
        lambda: merge_json(base, patch),
        peers,
        target="faster than both (no stated ratio)",
    )


@pytest.mark.parametrize("size", [10_000])
def test_union_long_arrays(benchmark: Any, size: int) -> None:
    base = {"events": [{"id": i, "tags": [i % 5]} for i in range(size)]}
    patch = {"events": [{"tags": [i % 5], "id": i} for i in range(size // 2, size + size // 2)]}

    def python_union() -> Any:
        # What a Python developer would write for structural dedup: a set of canonical dumps.
        seen: set[str] = set()
        out = []
        for v in base["events"] + patch["events"]:
            key = json.dumps(v, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(v)
        return {"events": out}

    assert deep_merge(base, patch, arrays="union") == python_union()
    compare(
        benchmark,
        f"deep_merge arrays='union': {size} objects + {size} objects, half duplicates",
        lambda: deep_merge(base, patch, arrays="union"),
        {"python (json.dumps canonical keys in a set)": python_union},
        target="faster than python (no stated ratio)",
    )
