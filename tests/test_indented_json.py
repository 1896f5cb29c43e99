"""respliced: the indented text of a merged state, rebuilt from the previous text, is exactly
the full render, whatever the merge did (members changed, nested, added, removed, nulled)."""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memstrata import MemoryStack, WorkingMemory, deep_merge, estimate_tokens
from memstrata.indented_json import render, respliced
from memstrata.layers.wm_journal import read_state

keys = st.one_of(
    st.sampled_from(["a", "b", "c", "ab", "a b", "é", "k\n", 'q"', "\\", "", "__proto__"]),
    st.text(max_size=4),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),  # newlines, quotes, escapes included
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=30,
)
objects = st.dictionaries(keys, values, max_size=6)


@settings(max_examples=600, deadline=None)
@given(
    old=objects,
    patch=objects,
    nulls=st.sampled_from(["keep", "delete", "ignore"]),
    arrays=st.sampled_from(["replace", "union"]),
)
def test_respliced_text_is_the_full_render(
    old: dict[str, Any], patch: dict[str, Any], nulls: str, arrays: str
) -> None:
    old = deep_merge({}, old)  # a clean state, as a working memory holds
    new = deep_merge(old, patch, nulls=nulls, arrays=arrays)  # type: ignore[arg-type]
    changes: list[tuple[str, str]] = []
    got = respliced(render(old), old, new, patch, changes)
    if got is not None:
        assert got == render(new)
        # The pieces account for every changed character, and each old piece was in the text.
        assert len(got) == len(render(old)) + sum(len(n) - len(o) for o, n in changes)
        assert all(o in render(old) for o, _n in changes)
    else:
        assert changes == []
    # Inside a block around the render: the same splice, the text around it kept.
    block = f"<tag>\n{render(old)}\n</tag>"
    inside = respliced(block, old, new, patch, within=(6, len(block) - 7))
    assert inside == (None if got is None else f"<tag>\n{got}\n</tag>")


def test_respliced_handles_the_usual_shapes_without_a_full_render() -> None:
    old = {
        "user": {"name": "Priya", "tz": "Europe/Oslo"},
        "projects": {f"p{i}": {"name": f"P{i}", "tags": ["a", "b"]} for i in range(5)},
        "notes": ["one", "two"],
    }
    patches: list[dict[str, Any]] = [
        {"projects": {"p3": {"status": "done", "tags": ["shipped"]}}},  # nested change + add
        {"projects": {"p0": None}},  # first member nulled
        {"user": {"tz": "UTC"}, "notes": ["three"], "new": {"x": [1, {"y": 2}]}},
        {"projects": {"p9": {"name": "P9"}}},  # a member added at the end
    ]
    for patch in patches:
        for nulls in ("keep", "delete"):
            new = deep_merge(old, patch, nulls=nulls)  # type: ignore[arg-type]
            got = respliced(render(old), old, new, patch)
            assert got == render(new), (patch, nulls)
    # Deleting the only member empties the object: the caller renders in full.
    assert respliced(render({"a": 1}), {"a": 1}, {}, {"a": None}) is None


def test_working_memory_blocks_match_a_full_render_after_many_updates() -> None:
    wm = WorkingMemory(schema={"type": "object"}, budget=(0, 100_000), nulls="delete")
    stack = MemoryStack([wm], store="memory://")
    spliced = recounted = 0
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        for i in range(60):
            patch: dict[str, Any] = {"projects": {f"p{i % 7}": {"n": i, "tags": [str(i)]}}}
            if i % 5 == 0:
                patch["projects"][f"p{(i + 3) % 7}"] = None
            if i % 11 == 0:
                patch[f"top{i}"] = {"x": i}
            assert run.call_tool("working-memory/update", patch)["ok"]
            block = handle.render()
            assert block == f"<working_memory>\n{render(handle.state)}\n</working_memory>"
            # The prompt item is the block and the guidelines, spliced as one text.
            (made,) = wm.recall(handle, 100_000)
            item = made["content"]
            assert item == block + wm._tail
            # The count, kept up to date from the changed pieces, stays within the error it
            # tracks of a full count.
            counted, error = handle._item_tokens[1:]
            assert handle._item_tokens[0] is item
            assert abs(counted - estimate_tokens(item)) <= error
            spliced += handle._spliced is not None and handle._spliced[1] is item
            recounted += error == 0
            # What a new process reads back (snapshot and journal) is the state.
            assert read_state(stack.store, handle.namespace) == (handle.state, handle.version)
    assert spliced >= 50 and 1 <= recounted < 30, (spliced, recounted)


def test_the_working_memory_item_carries_its_kept_count() -> None:
    # The block's count, kept up to date by splicing, is noted for the prompt item, so the
    # context gate counting that item does not read 60 KB again.
    from memstrata import ContextGate
    from memstrata.tokens import _memo_get

    state = {"projects": {f"p{i:03d}": {"name": f"Project {i}", "n": i} for i in range(600)}}
    wm = WorkingMemory(schema={"type": "object"}, budget=(0, 200_000))
    stack = MemoryStack([wm], store="memory://", gate=ContextGate(max_input_tokens=400_000))
    with stack.run(thread_id="t") as run:
        assert run.call_tool("working-memory/update", state)["ok"]
    for i in range(5):
        with stack.run(thread_id="t") as run:
            assert run.call_tool("working-memory/update", {"projects": {"p007": {"n": -i}}})["ok"]
            # Noted when the item is made, before anything counts it...
            handle = run.layer("working-memory")
            (made,) = wm.recall(handle, 200_000)
            item = made["content"]
            noted = _memo_get("o200k_base", item)
            # ... and the item the gate then sees is that very text.
            prepared = run.prepare([{"role": "user", "content": "hi"}])
            assert any(m["content"] is item for m in prepared)
            error = run.layer("working-memory")._item_tokens[2]
            assert noted is not None and abs(noted - estimate_tokens(item)) <= error + 1


def test_a_large_blocks_count_is_recounted_rarely_and_stays_within_its_error() -> None:
    state = {"projects": {f"p{i:03d}": {"status": "open", "tags": ["a"]} for i in range(1000)}}
    wm = WorkingMemory(schema={"type": "object"}, budget=(0, 200_000))
    stack = MemoryStack([wm], store="memory://")
    recounts = 0
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        handle.update(state)
        for i in range(150):
            patch = {"projects": {f"p{i * 7 % 1000:03d}": {"status": f"s{i}", "tags": [str(i)]}}}
            handle.update(patch)
            item, counted, error = handle._item_tokens
            assert item is handle._rendered[1]
            assert abs(counted - estimate_tokens(item)) <= error
            recounts += error == 0
    # About 12k tokens: 1% allows 120 tokens of error, four per update; 64 would have meant a
    # full count every 16 updates.
    assert 1 <= recounts <= 6, recounts


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=32, max_size=120),
    picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
)
def test_large_objects_are_searched_from_a_guess_and_still_spliced_exactly(
    sizes: list[int], picks: list[int]
) -> None:
    # Members of very different lengths: the guessed start is often past the member or far
    # before it, and the member must be found either way.
    from memstrata.indented_json import HINT_MIN_CHARS, _find_member

    old = {"big": {f"k{i}": {"text": "x" * size, "n": i} for i, size in enumerate(sizes)}}
    text = render(old)
    assume(len(text) >= HINT_MIN_CHARS)
    members = old["big"]
    lo, hi = text.index('"big": {') + 7, len(text) - 2
    for key in members:
        head = f'\n    "{key}": '
        assert _find_member(text, head, lo, hi, members, key) == text.find(head, lo, hi)
    keys = [f"k{pick % len(sizes)}" for pick in picks]
    patch = {"big": {key: {"n": -1, "text": "changed"} for key in keys}}
    new = deep_merge(old, patch)
    assert respliced(text, old, new, patch) == render(new)


def _chain(
    steps: int, patch_of: Any, nulls: str = "keep"
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """``steps`` splices in a row into a 1,000-member object; the last state, its text and the
    one before it."""
    state: dict[str, Any] = {"big": {f"k{i:04d}": {"n": i, "pad": "x" * 30} for i in range(1000)}}
    text = render(state)
    before = state
    for step in range(steps):
        patch = patch_of(step)
        merged = deep_merge(state, patch, nulls=nulls)
        spliced = respliced(text, state, merged, patch)
        assert spliced == render(merged), step
        before, state, text = state, merged, spliced
    return state, text, before


def test_a_chain_of_splices_carries_the_key_positions() -> None:
    from memstrata.indented_json import _key_orders

    state, _, before = _chain(4, lambda step: {"big": {f"k{step * 97:04d}": {"n": -step}}})
    # Marked by the first splice, built by the second, carried since: the newest object's
    # positions are its key order, and the old object's entry is gone.
    entry = _key_orders.get(id(state["big"]))
    assert entry is not None and entry[0] is state["big"]
    assert entry[1] == {key: index for index, key in enumerate(state["big"])}
    assert id(before["big"]) not in _key_orders
    # Appended members take the next positions.
    state, _, _ = _chain(4, lambda step: {"big": {f"new{step}": step, "k0001": {"n": step}}})
    positions = _key_orders[id(state["big"])][1]
    assert positions == {key: index for index, key in enumerate(state["big"])}
    assert list(positions)[-4:] == ["new0", "new1", "new2", "new3"]
    # A removed member ends the chain: its positions would be off by one from there on.
    patches = [{"big": {"k0001": {"n": 0}}}, {"big": {"k0002": {"n": 0}}}, {"big": {"k0003": None}}]
    state, _, before = _chain(3, patches.__getitem__, nulls="delete")
    assert "k0003" not in state["big"] and id(before["big"]) in _key_orders
    assert id(state["big"]) not in _key_orders


def test_wrong_key_positions_cost_a_search_never_a_wrong_splice() -> None:
    from memstrata.indented_json import _key_orders, _key_orders_lock

    old = {"big": {f"k{i:04d}": {"n": i, "pad": "y" * (i % 50)} for i in range(500)}}
    text = render(old)
    # Every key placed at the wrong end of the object.
    wrong = {key: 499 - index for index, key in enumerate(old["big"])}
    with _key_orders_lock:
        _key_orders[id(old["big"])] = (old["big"], wrong)
    for key in ("k0000", "k0250", "k0499"):
        patch = {"big": {key: {"n": "changed"}}}
        merged = deep_merge(old, patch)
        assert respliced(text, old, merged, patch) == render(merged), key
        with _key_orders_lock:
            _key_orders[id(old["big"])] = (old["big"], wrong)
