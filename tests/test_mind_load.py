"""Loading a mind in bulk: the native vector decoder, the rows it fills, and the entries built
from stored payloads (each checked against the one-at-a-time path it replaces)."""

from __future__ import annotations

import base64
import gc
from typing import Any

import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memstrata._core import decode_vectors_b64, split_vector_members
from memstrata.exceptions import InvalidInputError, UnsupportedTypeError
from memstrata.layers.mind.entries import (
    MindBelief,
    MindGoal,
    MindReflection,
    decode_vector,
    encode_vector,
    entries_from_payloads,
    entry_from_payload,
)
from memstrata.layers.mind.vectors import (
    BLOCK_ROWS,
    VectorRows,
    append_encoded,
    vector_dim,
)

# Every float32 bit pattern, NaN and infinities included: decoding is about bytes.
any_float32 = st.integers(0, 2**32 - 1).map(
    lambda bits: np.frombuffer(int(bits).to_bytes(4, "little"), dtype="<f4")[0]
)


def bits(matrix: Any) -> Any:
    return np.ascontiguousarray(matrix, dtype=np.float32).view(np.uint32)


# --- decode_vectors_b64 -------------------------------------------------------------------------


@given(
    st.integers(1, 40).flatmap(lambda dim: hnp.arrays(np.float32, (5, dim), elements=any_float32))
)
def test_decode_matches_the_encoder_bit_for_bit(matrix: Any) -> None:
    texts = [encode_vector(row) for row in matrix]
    decoded, ok = decode_vectors_b64(texts, matrix.shape[1])
    assert decoded.dtype == np.float32 and decoded.shape == matrix.shape
    assert ok.dtype == np.bool_ and ok.all()
    assert (bits(decoded) == bits(matrix)).all()
    for text, row in zip(texts, decoded):
        assert (bits(decode_vector(text)) == bits(row)).all()


def test_decode_refuses_what_the_encoder_never_writes() -> None:
    good = encode_vector(np.arange(1, 6, dtype=np.float32))  # 20 bytes: one "=" of padding
    assert good.endswith("=") and not good.endswith("==")
    bad = [
        good[:-1],  # short
        good + "====",  # long
        " " + good[1:],  # whitespace
        good[:4] + "\n" + good[5:],  # a line break
        good[:-2] + "-=",  # URL-safe alphabet
        good[:-2] + "==",  # the padding moved
        good[:4] + "=" + good[5:],  # padding inside
        good[:-2] + "\u00e9=",  # not ASCII
        encode_vector(np.arange(4, dtype=np.float32)),  # another dimension
        good.encode(),  # bytes, not text
        None,
        5,
        ["a"],
    ]
    decoded, ok = decode_vectors_b64([good, *bad, good], 5)
    assert ok.tolist() == [True] + [False] * len(bad) + [True]
    assert (decoded[1:-1] == 0).all()
    assert decoded[0].tolist() == decoded[-1].tolist() == [1, 2, 3, 4, 5]


def test_decode_ignores_unused_bits_of_the_last_symbol_as_cpython_does() -> None:
    good = encode_vector(np.arange(1, 6, dtype=np.float32))
    symbols = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = symbols[symbols.index(good[-2]) ^ 1]  # "xxx=" holds 16 bits: the low 2 are unused
    lax = good[:-2] + last + "="
    assert base64.b64decode(lax, validate=True) == base64.b64decode(good)
    decoded, ok = decode_vectors_b64([lax], 5)
    assert ok.all() and decoded[0].tolist() == [1, 2, 3, 4, 5]


def test_decode_in_parallel_equals_serial() -> None:
    # Past 4 MB of output the rows are decoded on both cores.
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3000, 384)).astype(np.float32)
    texts: list[Any] = [encode_vector(row) for row in matrix]
    texts[17] = texts[17][:-4] + "!!!="
    decoded, ok = decode_vectors_b64(texts, 384)
    assert ok.sum() == 2999 and not ok[17] and (decoded[17] == 0).all()
    keep = np.arange(3000) != 17
    assert (bits(decoded[keep]) == bits(matrix[keep])).all()


def test_decode_empty_and_arguments() -> None:
    decoded, ok = decode_vectors_b64([], 3)
    assert decoded.shape == (0, 3) and ok.shape == (0,)
    with pytest.raises(InvalidInputError, match="dim must be between 1 and 65536"):
        decode_vectors_b64(["AAAA"], 0)
    with pytest.raises(InvalidInputError, match="dim"):
        decode_vectors_b64(["AAAA"], 65537)
    with pytest.raises(UnsupportedTypeError, match="not a single str"):
        decode_vectors_b64("AAAAAAAA", 1)
    with pytest.raises(UnsupportedTypeError, match="sequence"):
        decode_vectors_b64(5, 1)  # type: ignore[arg-type]


# --- VectorRows and append_encoded --------------------------------------------------------------


def test_vector_dim_is_read_from_the_length() -> None:
    for dim in (1, 2, 3, 4, 5, 383, 384, 385, 1536):
        assert vector_dim(encode_vector(np.ones(dim, dtype=np.float32))) == dim
    # Lengths no float32 vector has, and values that are not text.
    assert [vector_dim(x) for x in ("", "AAAA", "A" * 12 + "A", "A" * 20, None, b"AAAAAAAA")] == [
        0,
        0,
        0,
        0,
        0,
        0,
    ]


def test_append_crosses_blocks_in_order() -> None:
    rows = VectorRows(3)
    rows.append(np.ones((5, 3), dtype=np.float32))
    matrix = np.arange(3 * (BLOCK_ROWS + 10), dtype=np.float32).reshape(-1, 3) + 1
    added = rows.append(matrix)
    assert added == list(range(5, 5 + BLOCK_ROWS + 10)) and rows.size == BLOCK_ROWS + 15
    assert (rows.gather(added) == matrix).all()
    assert rows.append(np.zeros((0, 3), dtype=np.float32)) == []
    rows.seal()
    assert all(rows.usable(r) for r in range(rows.size))


def test_a_few_rows_take_a_few_rows_of_room_and_grow_in_place_of_a_whole_block() -> None:
    # A server keeps hundreds of small minds (one per user): each must not hold a block of
    # 8,192 rows (12 MB at dim 384) for its few vectors.
    rows = VectorRows(384)
    rows.append(np.ones((3, 384), dtype=np.float32))
    assert rows.nbytes <= 16 * 384 * 4
    rows.seal()
    held = rows.blocks()  # a reader (a ranker being built) keeps the blocks it was given
    matrix = np.arange(384 * 40, dtype=np.float32).reshape(-1, 384) + 1
    assert rows.append(matrix) == list(range(3, 43))
    assert rows.nbytes <= 64 * 384 * 4
    rows.seal()
    assert np.allclose(held[0][:3], rows.gather(range(3)))  # what it could see is still there
    assert np.allclose(rows.gather(range(3, 43)), matrix / np.linalg.norm(matrix, axis=1)[:, None])
    assert np.allclose(rows.dots(np.ones(384, dtype=np.float32))[:3], np.sqrt(384))
    rows.append(np.ones((BLOCK_ROWS, 384), dtype=np.float32))  # fills the block, then a next
    assert len(rows.blocks()[0]) == BLOCK_ROWS and rows.size == BLOCK_ROWS + 43
    rows.seal()
    assert all(rows.usable(r) for r in range(rows.size))


def test_a_block_sized_matrix_at_a_block_start_becomes_the_block() -> None:
    rows = VectorRows(4)
    block = np.arange(4 * BLOCK_ROWS, dtype=np.float32).reshape(-1, 4) + 1
    expected = block.copy()
    assert rows.append(block) == list(range(BLOCK_ROWS))
    assert rows.blocks()[0] is block  # taken as it is, not copied
    off = VectorRows(4)
    off.append(np.ones((1, 4), dtype=np.float32))
    copied = expected.copy()
    off.append(copied)  # lands mid-block: copied across two blocks
    assert all(b is not copied for b in off.blocks()) and off.size == BLOCK_ROWS + 1
    for store, first in ((rows, 0), (off, 1)):
        store.seal()
        got = store.gather(range(first, first + BLOCK_ROWS))
        unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
        assert np.allclose(got, unit) and store.usable(first + BLOCK_ROWS - 1)


def test_append_encoded_groups_by_dimension_and_skips_non_vectors() -> None:
    rng = np.random.default_rng(1)
    wide = rng.standard_normal((BLOCK_ROWS + 3, 4)).astype(np.float32)
    narrow = rng.standard_normal((2, 3)).astype(np.float32)
    texts: list[Any] = [encode_vector(v) for v in wide]
    texts[1:1] = [encode_vector(narrow[0]), None, "not a vector", encode_vector(narrow[1])]
    texts.append(encode_vector(wide[0])[:-2] + "*=")  # right length, a stray character
    held: dict[int, VectorRows] = {4: VectorRows(4)}
    held[4].append(np.ones((2, 4), dtype=np.float32))  # rows already there come first
    dims, placed = append_encoded(held, texts)
    assert len(dims) == len(placed) == len(texts)
    pairs = list(zip(dims, placed))
    assert pairs[1:5] == [(3, 0), (0, -1), (0, -1), (3, 1)] and pairs[-1] == (0, -1)
    wide_places = [pairs[0], *pairs[5:-1]]
    assert wide_places == [(4, 2 + n) for n in range(len(wide))]
    assert (held[4].gather([row for _, row in wide_places]) == wide).all()
    assert (held[3].gather([0, 1]) == narrow).all()
    for rows in held.values():
        rows.seal()
    unit = held[4].gather([2])[0]
    assert np.isclose(np.linalg.norm(unit), 1.0)
    assert append_encoded({}, []) == ([], [])
    assert append_encoded({}, [None, "x", 3]) == ([0, 0, 0], [-1, -1, -1])


@given(
    st.lists(
        st.one_of(
            st.integers(1, 6).map(lambda dim: np.full(dim, dim, dtype=np.float32)),
            st.sampled_from([None, "", "AAAA", "AAAAAAA=", "bad text"]),
        ),
        max_size=12,
    )
)
def test_append_encoded_places_every_vector_once(values: list[Any]) -> None:
    texts = [encode_vector(v) if isinstance(v, np.ndarray) else v for v in values]
    held: dict[int, VectorRows] = {}
    dims, placed = append_encoded(held, texts)
    for value, dim, row in zip(values, dims, placed):
        if isinstance(value, np.ndarray):
            assert dim == len(value) and (held[dim].gather([row])[0] == value).all()
        else:
            assert (dim, row) == (0, -1)
    used = [(d, r) for d, r in zip(dims, placed) if d]
    assert len(set(used)) == len(used)
    assert {d: r.size for d, r in held.items()} == {d: dims.count(d) for d in held}


def test_append_encoded_marks_zero_vectors_unusable() -> None:
    held: dict[int, VectorRows] = {}
    vectors = np.array([[0, 0], [np.nan, 1], [3, 4]], dtype=np.float32)
    _dims, placed = append_encoded(held, [encode_vector(v) for v in vectors])
    held[2].seal()
    assert [held[2].usable(row) for row in placed] == [False, False, True]


def test_usable_rows_and_dots_agree_with_the_row_at_a_time_answers() -> None:
    rows = VectorRows(3)
    rng = np.random.default_rng(8)
    matrix = rng.standard_normal((BLOCK_ROWS + 40, 3)).astype(np.float32)
    matrix[[5, BLOCK_ROWS + 3]] = 0.0
    matrix[7, 1] = np.inf
    rows.append(matrix)
    rows.seal()
    rows.append(matrix[:4])  # appended, not sealed yet: not usable
    probe = np.array([-1, 0, 5, 7, 9, BLOCK_ROWS + 3, BLOCK_ROWS + 39, rows.size - 1, rows.size])
    assert rows.usable_rows(probe).tolist() == [rows.usable(int(r)) for r in probe]
    assert rows.usable_rows(probe).tolist() == [
        False,
        True,
        False,
        False,
        True,
        False,
        True,
        False,
        False,
    ]
    query = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    dots = rows.dots(query)
    assert dots.shape == (rows.size,)
    usable = [r for r in range(BLOCK_ROWS + 40) if rows.usable(r)]
    assert np.allclose(dots[usable], rows.gather(usable) @ query, atol=1e-6)


# --- entries_from_payloads ----------------------------------------------------------------------

WRITTEN = [
    {
        "id": "b1",
        "type": "belief",
        "content": "the cache is cold",
        "confidence": "high",
        "tags": ["cache"],
        "createdAt": 1,
        "updatedAt": 2,
        "expiresAt": 9,
        "embedding": "AAAAAA==",
        "embeddingModel": "m",
    },
    {
        "id": "b2",
        "type": "belief",
        "content": "x",
        "confidence": "low",
        "tags": [],
        "createdAt": 1,
        "updatedAt": 2,
        "error": True,
        "previous": [{"content": "y", "updatedAt": 1}],
    },
    {
        "id": "r1",
        "type": "reflection",
        "content": "check twice",
        "pinned": True,
        "tags": ["a", "b"],
        "relatedTo": "g1",
        "createdAt": 3,
        "updatedAt": 4,
        "expiresAt": 10,
    },
    {
        "id": "g1",
        "type": "goal",
        "description": "ship",
        "priority": "high",
        "status": "active",
        "tags": [],
        "progress": ["half"],
        "createdAt": 1,
        "updatedAt": 1,
        "sequence": 4,
    },
]


def one_at_a_time(value: Any) -> Any:
    try:
        return entry_from_payload(value)
    except InvalidInputError as exc:
        return exc


def same(fast: Any, slow: Any) -> bool:
    if isinstance(slow, InvalidInputError):
        return isinstance(fast, InvalidInputError) and str(fast) == str(slow)
    return type(fast) is type(slow) and fast == slow


def test_written_entries_load_as_one_at_a_time() -> None:
    loaded = entries_from_payloads(WRITTEN)
    assert [type(e) for e in loaded] == [MindBelief, MindBelief, MindReflection, MindGoal]
    assert all(same(f, one_at_a_time(v)) for f, v in zip(loaded, WRITTEN))
    # The entry holds copies: nothing in it is the payload's own list.
    assert loaded[0].tags is not WRITTEN[0]["tags"]  # type: ignore[union-attr]
    assert loaded[1].previous[0] is not WRITTEN[1]["previous"][0]  # type: ignore[union-attr]


# Values a field might hold in a damaged or hand-edited store.
odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e3, max_value=1e3),
    st.sampled_from(["", "low", "medium", "high", "x", "belief", "reflection", "goal"]),
    st.lists(st.sampled_from(["a", "b"]), max_size=2),
    st.lists(st.one_of(st.integers(0, 2), st.none()), min_size=1, max_size=2),
    st.dictionaries(
        st.sampled_from(["content", "updatedAt"]), st.integers(0, 2) | st.text(max_size=2)
    ),
    st.lists(
        st.fixed_dictionaries({"content": st.text(max_size=2), "updatedAt": st.integers(0, 3)}),
        max_size=2,
    ),
    st.lists(st.integers(0, 1), max_size=1).map(lambda v: [{"content": "c", "updatedAt": 1.5}, *v]),
    # Around the edges of a 64-bit time, and numbers msgspec and orjson read apart.
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63), 1e19, -1e19, 1e300, -0.0, 1e3]),
    st.lists(st.fixed_dictionaries({"content": st.just("c"), "updatedAt": st.just(2**63)})),
)


@st.composite
def damaged(draw: st.DrawFn) -> Any:
    base = dict(draw(st.sampled_from(WRITTEN)))
    for key in draw(
        st.lists(st.sampled_from([*base, "previous", "pinned", "expiresAt"]), max_size=3)
    ):
        if draw(st.booleans()):
            base.pop(key, None)
        else:
            base[key] = draw(odd_values)
    return draw(st.sampled_from([base, base, base, [base], "belief", None]))


@given(st.lists(damaged(), max_size=6))
def test_any_value_loads_as_one_at_a_time(values: list[Any]) -> None:
    loaded = entries_from_payloads(values)
    assert len(loaded) == len(values)
    for fast, value in zip(loaded, values):
        assert same(fast, one_at_a_time(value)), (value, fast)


def test_entries_are_compact_structs_with_their_own_lists() -> None:
    belief, _, reflection, goal = entries_from_payloads(WRITTEN)
    for entry in (belief, reflection, goal):
        assert not hasattr(entry, "__dict__")
        assert not gc.is_tracked(entry)  # they hold no cycles: the collector skips them
        with pytest.raises(AttributeError):
            entry.surprise = 1  # type: ignore[union-attr]
    assert isinstance(belief, MindBelief)
    assert (belief.type, reflection.type, goal.type) == ("belief", "reflection", "goal")
    assert msgspec.structs.replace(belief, content="z").content == "z"
    made = MindBelief(id="b", content="c", confidence="low", created_at=1, updated_at=1)
    fresh = MindBelief(id="b", content="c", confidence="low", created_at=1, updated_at=1)
    assert made.tags == [] and made.tags is not fresh.tags
    assert made == fresh and made != msgspec.structs.replace(fresh, error=True)
    with pytest.raises(TypeError):  # the times and the kind's choices are required
        MindBelief(id="b", content="c")  # type: ignore[call-arg]
    assert repr(reflection).startswith("MindReflection(id=")


# --- a full read from the stored JSON text ------------------------------------------------------


def _vector(dim: int, seed: int) -> Any:
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


def _raw_texts() -> dict[str, bytes]:
    """Stored texts around the vector member, as memstrata writes them and as a hand-edited
    or foreign writer might: each must load as a whole-value parse loads it."""

    def bare(payload: Any) -> dict[str, Any]:
        return {k: v for k, v in payload.items() if k not in ("embedding", "embeddingModel")}

    belief, reflection, goal = bare(WRITTEN[0]), bare(WRITTEN[2]), bare(WRITTEN[3])
    v16, other16, v8 = (encode_vector(_vector(d, s)) for d, s in ((16, 1), (16, 2), (8, 3)))

    def text(payload: dict[str, Any], **extra: Any) -> bytes:
        return orjson.dumps({**payload, **extra})

    def belief_as(id_: str) -> dict[str, Any]:
        return {**belief, "id": id_}

    m = '"embeddingModel":"m"'
    return {
        "belief/plain": text(belief_as("plain"), embedding=v16, embeddingModel="m"),
        "belief/first": (
            f'{{"embedding":"{v16}",{m},' + text(belief_as("first")).decode()[1:]
        ).encode(),
        "belief/spaced": (
            text(belief_as("spaced")).decode()[:-1] + f' ,\n "embedding" :\t"{v16}" , {m} }}\n'
        ).encode(),
        "belief/escapedkey": (
            text(belief_as("escapedkey")).decode()[:-1] + f',"embe\\u0064ding":"{v16}",{m}}}'
        ).encode(),
        "belief/twice": (
            text(belief_as("twice")).decode()[:-1]
            + f',"embedding":"{other16}",{m},"embedding":"{v16}"}}'
        ).encode(),
        "belief/escapedvalue": (
            text(belief_as("escapedvalue")).decode()[:-1]
            + ',"embedding":"'
            + v16.replace("/", "\\/").replace("A", "\\u0041")
            + f'",{m}}}'
        ).encode(),
        "belief/otherdim": text(belief_as("otherdim"), embedding=v8, embeddingModel="m"),
        "belief/number": text(belief_as("number"), embedding=5, embeddingModel="m"),
        "belief/nested": text(belief_as("nested"), meta={"embedding": v16}, embeddingModel="m"),
        "belief/none": text(belief_as("none")),
        "belief/notjson": b'{"id":"notjson","embedding":"' + v16.encode() + b'",',
        "belief/foreign": text(belief_as("elsewhere"), embedding=v16, embeddingModel="m"),
        f"reflection/{reflection['id']}": text(reflection, embedding=v16, embeddingModel="m"),
        f"goal/{goal['id']}": text(goal),
    }


def _loaded_as_whole_values(texts: dict[str, bytes]) -> Any:
    """What loading gives when each value is parsed whole (the path the cut must agree with)."""
    from memstrata.layers.mind.committed import _Committed
    from memstrata.stores.base import item_of

    oracle = _Committed(None, None)
    items = []
    for key in sorted(texts):
        try:
            value = orjson.loads(texts[key])
        except orjson.JSONDecodeError:
            continue
        items.append(item_of(("m",), key, value, 1, 0.0, 0.0, None))
    oracle.add_many(items)
    oracle.seal()
    return oracle


def _same_load(fast: Any, slow: Any) -> None:
    assert fast.beliefs == slow.beliefs and fast.reflections == slow.reflections
    assert fast.goals == slow.goals
    assert fast.vectors.keys() == slow.vectors.keys()
    for id_, (model, dim, row) in slow.vectors.items():
        got_model, got_dim, got_row = fast.vectors[id_]
        assert (got_model, got_dim, got_row >= 0) == (model, dim, row >= 0), id_
        assert type(got_model) is type(model), id_  # 2**64 == 2.0**64
        if row >= 0:
            want = slow.rows[dim].gather([row])
            assert (bits(fast.rows[dim].gather([got_row])) == bits(want)).all(), id_


def _sqlite_with_raw_values(path: Any, ns: tuple[str, ...], raw: dict[str, Any]) -> Any:
    """A SQLite store whose rows of ``ns`` hold ``raw`` as written, bypassing the encoder (as a
    foreign writer or a hand edit would)."""
    import sqlite3

    from memstrata.stores import SQLiteStore
    from memstrata.stores.base import encode_namespace

    store = SQLiteStore(str(path))
    for key in raw:
        store.put(ns, key, 0)
    with sqlite3.connect(path) as conn:
        for key, value in raw.items():
            conn.execute(
                "UPDATE items SET value = ? WHERE namespace = ? AND key = ?",
                (value, encode_namespace(ns), key),
            )
    return store


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_full_read_loads_as_whole_values_do(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest, caplog: Any
) -> None:
    """The full read cuts each vector out of the stored text and parses the rest; whatever
    the text (the member first or last, spaced, escaped, twice, of another dimension, not a
    string, nested, missing, not JSON at all), the entries and vectors are those a parse of the
    whole value gives, and a text that is not JSON is skipped with a warning."""

    from memstrata.layers.mind.committed import refresh
    from memstrata.stores import PostgresStore

    ns = ("mind", "raw")
    texts = _raw_texts()
    store: Any
    if backend == "sqlite":
        store = _sqlite_with_raw_values(tmp_path / "raw.db", ns, texts)
    else:
        # jsonb keeps one of a key written twice and rewrites escapes: PostgreSQL sees only
        # the JSON values, stored from the texts as parsed.
        store = PostgresStore(request.getfixturevalue("postgres_url"))
        for key in store.changes(ns).items:
            store.delete(ns, key.key)
        texts = {k: t for k, t in texts.items() if k != "belief/notjson"}
        for key, text in texts.items():
            store.put(ns, key, orjson.loads(text))
    try:
        with caplog.at_level("WARNING", logger="memstrata.agent_mind"):
            committed, _ = refresh(None, store, ns)
        _same_load(committed, _loaded_as_whole_values(texts))
        assert {"plain", "first", "spaced", "escapedkey", "twice", "escapedvalue"} <= set(
            committed.beliefs
        )
        assert committed.vectors["twice"][1] == 16 and committed.vectors["otherdim"][1] == 8
        assert "notjson" not in committed.beliefs and "elsewhere" not in committed.beliefs
        if backend == "sqlite":
            assert any("'belief/notjson'" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_full_read_of_several_blocks_loads_as_whole_values_do(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """Past a block of entries the full read takes its batches a block at a time; goals,
    malformed texts, float times and vectors of another dimension, in the middle of batches,
    leave the rows of every other entry where a whole-value parse puts them."""
    from memstrata.layers.mind.committed import LOAD_BATCH, refresh
    from memstrata.stores import PostgresStore

    ns = ("mind", "blocks")
    belief, reflection = dict(WRITTEN[0]), dict(WRITTEN[2])
    texts: dict[str, bytes] = {}
    count = 2 * LOAD_BATCH + 300
    for n in range(count):
        kind, base = ("belief", belief) if n < count * 2 // 3 else ("reflection", reflection)
        id_ = f"{n:06d}"
        payload = {**base, "id": id_, "embedding": encode_vector(_vector(16, n))}
        if n % 2999 == 5:
            payload["createdAt"] = 1.5  # read by the lenient path
        if n % 4001 == 7:
            payload["embedding"] = encode_vector(_vector(8, n))
        texts[f"{kind}/{id_}"] = orjson.dumps(payload)
    for n in range(12):  # sorted between the beliefs and the reflections
        texts[f"goal/g{n}"] = orjson.dumps({**WRITTEN[3], "id": f"g{n}"})
    if backend == "sqlite":
        texts["belief/004500x"] = b'{"id":"004500x","type":"belief",'  # not JSON
        store: Any = _sqlite_with_raw_values(tmp_path / "blocks.db", ns, texts)
    else:
        store = PostgresStore(request.getfixturevalue("postgres_url"))
        for key in store.changes(ns).items:
            store.delete(ns, key.key)
        values = {key: orjson.loads(text) for key, text in texts.items()}
        store.update_many(ns, {key: (lambda _, v=v: v) for key, v in values.items()})
    try:
        committed, _ = refresh(None, store, ns)
        _same_load(committed, _loaded_as_whole_values(texts))
        assert len(committed.beliefs) + len(committed.reflections) == count
        assert len(committed.goals) == 12 and committed.vectors["004008"][1] == 8
    finally:
        store.close()


@pytest.mark.parametrize("as_str", [False, True])
def test_each_entry_keeps_the_model_its_own_text_names(as_str: bool) -> None:
    """The model of a batch's vectors is read once and then recognised by how each text ends;
    texts in a row that end alike but name another model, or none, or name it twice, nested,
    escaped, spaced or inside a string, each keep the model a whole-value parse gives."""
    from memstrata.layers.mind.committed import _Committed

    v16 = encode_vector(_vector(16, 1))
    base = {k: v for k, v in WRITTEN[0].items() if k not in ("embedding", "embeddingModel")}

    def text(id_: str, ending: str) -> bytes:
        body = orjson.dumps({**base, "id": id_, "embedding": v16}).decode()[:-1]
        return (body + ending).encode()

    endings = {
        "plain": ',"embeddingModel":"m"}',
        "again": ',"embeddingModel":"m"}',
        "other": ',"embeddingModel":"m2"}',
        "back": ',"embeddingModel":"m"}',
        "twice": ',"embeddingModel":"z","embeddingModel":"m"}',
        "twicelast": ',"embeddingModel":"m","embeddingModel":"z"}',
        "escaped": ',"embeddingModel":"\\u006d"}',
        "spaced": ',"embeddingModel" : "m" }',
        "nested": ',"meta":{"x":1,"embeddingModel":"m"}}',
        "instring": ',"note":"\\",\\"embeddingModel\\":\\"m\\"}"}',
        "number": ',"embeddingModel":5}',
        "none": "}",
        "null": ',"embeddingModel":null}',
        "last": ',"embeddingModel":"m"}',
    }
    texts = {
        f"belief/{n:02d}{id_}": text(f"{n:02d}{id_}", e)
        for n, (id_, e) in enumerate(endings.items())
    }
    loaded = _Committed(None, None)
    loaded.add_encoded([(key, t.decode() if as_str else t, None) for key, t in texts.items()])
    loaded.seal()
    oracle = _loaded_as_whole_values(texts)
    _same_load(loaded, oracle)
    models = {id_: m for id_, (m, _d, _r) in loaded.vectors.items()}
    assert models == {id_: m for id_, (m, _d, _r) in oracle.vectors.items()}
    assert [models[f"{n:02d}{id_}"] for n, id_ in enumerate(endings)][:6] == [
        "m",
        "m",
        "m2",
        "m",
        "m",
        "z",
    ]


def test_a_stored_value_that_is_not_text_is_skipped_and_the_rest_loads(
    tmp_path: Any, caplog: Any
) -> None:
    """SQLite keeps whatever a foreign writer puts in a row (a number, a real): such a value is
    not JSON text and is skipped with a warning, as a malformed text is; the mind still opens
    with every other entry and its vector."""

    from memstrata.layers.mind.committed import refresh

    ns = ("mind", "raw")
    texts = _raw_texts()
    store = _sqlite_with_raw_values(
        tmp_path / "raw.db", ns, {**texts, "belief/integer": 5, "belief/real": 0.5}
    )
    try:
        with caplog.at_level("WARNING", logger="memstrata.agent_mind"):
            committed, _ = refresh(None, store, ns)
        _same_load(committed, _loaded_as_whole_values(texts))
        warned = " ".join(r.getMessage() for r in caplog.records)
        assert "'belief/integer'" in warned and "'belief/real'" in warned
    finally:
        store.close()


def test_a_text_handed_over_as_a_str_with_a_lone_surrogate_is_skipped(caplog: Any) -> None:
    """A store may hand its texts over as str: one holding a lone surrogate has no UTF-8 form
    and is not JSON text; it is skipped with a warning and the batch loads without it."""
    from memstrata.layers.mind.committed import _Committed

    texts = _raw_texts()
    batch = [(key, texts[key].decode(), None) for key in sorted(texts)]
    batch.insert(1, ("belief/surrogate", '{"id":"surrogate","content":"\ud800"}', None))
    loaded = _Committed(None, None)
    with caplog.at_level("WARNING", logger="memstrata.agent_mind"):
        loaded.add_encoded(batch)
    loaded.seal()
    _same_load(loaded, _loaded_as_whole_values(texts))
    assert any("'belief/surrogate'" in r.getMessage() for r in caplog.records)


@given(
    st.lists(damaged(), max_size=6),
    st.lists(st.sampled_from([8, 16]), max_size=6),
    st.lists(st.one_of(st.just("m"), st.text(max_size=3), odd_values), max_size=6),
)
def test_any_stored_text_loads_as_whole_values_do(
    values: list[Any], dims: list[int], models: list[Any]
) -> None:
    """Damaged payloads with vectors of mixed dimensions and models of any kind, through the
    cut and through a whole parse, on a store that hands the texts over as written."""
    from memstrata.layers.mind.committed import _Committed

    texts: dict[str, bytes] = {}
    for n, value in enumerate(values):
        if isinstance(value, dict) and n < len(dims):
            value = {
                **value,
                "embedding": encode_vector(_vector(dims[n], n)),
                "embeddingModel": models[n] if n < len(models) else "m",
            }
        key = f"{value.get('type')}/{value.get('id')}" if isinstance(value, dict) else f"x/{n}"
        texts[key] = orjson.dumps(value)
    fast = _Committed(None, None)
    fast.add_encoded([(key, texts[key], None) for key in sorted(texts)])
    fast.seal()
    _same_load(fast, _loaded_as_whole_values(texts))


def test_split_vector_members_arguments() -> None:
    vector = encode_vector(_vector(4, 0))
    text = f'{{"a":1,"embedding":"{vector}"}}'
    rests, matrix = split_vector_members([text, text.encode(), b"{}"], "embedding")
    assert rests == [b'{"a":1}', b'{"a":1}', None] and matrix.shape == (3, 4)
    assert (bits(matrix[0]) == bits(decode_vector(vector))).all() and not matrix[2].any()
    assert split_vector_members([b"{}"], "embedding")[1].shape == (1, 0)
    assert split_vector_members([text], "embedding", 5)[0] == [None]
    with pytest.raises(InvalidInputError, match="dim must be between 1 and 65536, got 0"):
        split_vector_members([text], "embedding", 0)
    with pytest.raises(UnsupportedTypeError, match="not a single bytes"):
        split_vector_members(b"{}", "embedding")
    with pytest.raises(UnsupportedTypeError, match="each text must be bytes or str, got int"):
        split_vector_members([b"{}", 3], "embedding")


def test_the_dimension_the_texts_share_most_is_split_whatever_comes_first() -> None:
    """Without a dim, the vectors most texts hold set it: one stored vector of another
    dimension, however large, neither sends every other text to a whole parse nor sizes the
    matrix (a 65,536-wide row for each of the batch's texts would be 256 MB)."""
    common = [encode_vector(_vector(16, n)) for n in range(1023)]
    texts = [
        f'{{"id":"odd","embedding":"{encode_vector(_vector(65_536, 0))}"}}'.encode(),
        *(f'{{"id":"{n}","embedding":"{v}"}}'.encode() for n, v in enumerate(common)),
    ]
    rests, matrix = split_vector_members(texts, "embedding")
    assert matrix.shape == (1024, 16)
    assert rests[0] is None and rests[1:] == [f'{{"id":"{n}"}}'.encode() for n in range(1023)]
    assert (bits(matrix[1:]) == bits(np.stack([decode_vector(v) for v in common]))).all()
    # A tie goes to the dimension seen first.
    tie = [texts[0], texts[1], f'{{"embedding":"{encode_vector(_vector(8, 0))}"}}'.encode()]
    assert split_vector_members(tie[1:], "embedding")[1].shape == (2, 16)
    assert split_vector_members(tie[::-1], "embedding")[1].shape == (3, 8)


@pytest.mark.parametrize("enabled_before", [True, False])
def test_a_full_read_pauses_the_cycle_collector_and_restores_it(
    enabled_before: bool, tmp_path: Any
) -> None:
    """The collections a full read's allocations set off find nothing to free (every entry is
    kept) but walk all of them again and again: the collector is off while it reads, and left
    as it was found afterwards, also when the read fails."""
    import gc

    from memstrata.layers.mind.committed import refresh
    from memstrata.stores import SQLiteStore

    class Noting(SQLiteStore):
        fail = False

        def encoded_each(self, namespace: Any, each: Any) -> Any:
            seen.append(gc.isenabled())
            if self.fail:
                raise OSError("disk gone")
            return super().encoded_each(namespace, each)

    seen: list[bool] = []
    store = Noting(str(tmp_path / "m.db"))
    store.put(("m",), "belief/b1", dict(WRITTEN[0], id="b1"))
    was = gc.isenabled()
    try:
        (gc.enable if enabled_before else gc.disable)()
        committed, _ = refresh(None, store, ("m",))
        assert list(committed.beliefs) == ["b1"] and gc.isenabled() == enabled_before
        store.fail = True
        with pytest.raises(OSError, match="disk gone"):
            refresh(None, store, ("m",))
        assert gc.isenabled() == enabled_before and seen == [False, False]
    finally:
        (gc.enable if was else gc.disable)()
        store.close()


def _belief_text(id_: str, members: str = "", model: str = '"m"') -> bytes:
    """A stored belief as memstrata writes it, with ``members`` added before its vector and
    ``model`` as the value of its last member, the model's name."""
    body = orjson.dumps({**WRITTEN[0], "id": id_, "embedding": encode_vector(_vector(16, 1))})
    return (
        body[: body.rindex(b',"embeddingModel"')]
        + members.encode()
        + b',"embeddingModel":'
        + model.encode()
        + b"}"
    )


def _loads_as_whole_values(texts: dict[str, bytes]) -> Any:
    from memstrata.layers.mind.committed import _Committed

    loaded = _Committed(None, None)
    loaded.add_encoded([(key, texts[key], None) for key in sorted(texts)])
    loaded.seal()
    oracle = _loaded_as_whole_values(texts)
    _same_load(loaded, oracle)

    # The models compared with their types (2**64 == 2.0**64), a nested list by its depth
    # (comparing lists a thousand deep would pass Python's recursion limit).
    def model(value: Any) -> Any:
        depth = 0
        while type(value) is list and value:
            value, depth = value[0], depth + 1
        return (type(value), value, depth)

    models = {id_: model(m) for id_, (m, _d, _r) in loaded.vectors.items()}
    assert models == {id_: model(m) for id_, (m, _d, _r) in oracle.vectors.items()}
    return loaded


def test_texts_nested_past_the_recursion_limit_load_as_whole_values_do(caplog: Any) -> None:
    """msgspec reads nesting only as deep as Python's recursion limit, orjson to a depth of
    1,024: a stored text nested deeper than the one allows (in a member the entry does not
    know, in ``previous``, or in its model) loads as a parse of the whole value does, and the
    rest with it, never failing the whole read."""
    from memstrata.layers.mind.committed import _Committed

    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth

    texts = {
        f"belief/{id_}": _belief_text(id_, members)
        for id_, members in (
            ("plain", ""),
            ("extra1000", ',"x":' + nested(1000)),
            ("extra1023", ',"x":' + nested(1023)),
            ("extra2000", ',"x":' + nested(2000)),
            ("previous", ',"previous":[{"content":"y","updatedAt":1,"d":' + nested(1020) + "}]"),
        )
    }
    with caplog.at_level("WARNING", logger="memstrata.agent_mind"):
        loaded = _loads_as_whole_values(texts)
    assert set(loaded.beliefs) == {"plain", "extra1000", "extra1023", "previous"}
    # A model as deep: compared by its depth (Python compares such lists only so deep).
    models = {f"belief/model{d}": _belief_text(f"model{d}", model=nested(d)) for d in (1000, 2000)}
    deep = _Committed(None, None)
    deep.add_encoded([(key, text, None) for key, text in models.items()])
    model = deep.vectors["model1000"][0]
    for _ in range(999):
        assert type(model) is list and len(model) == 1
        model = model[0]
    assert model == [] and set(deep.beliefs) == {"model1000"}
    assert {"model1000"} == {k.partition("/")[2] for k, t in models.items() if _parses(t)}


def _parses(text: bytes) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def test_numbers_msgspec_and_orjson_read_apart_load_as_whole_values_do() -> None:
    """orjson reads an integer past 64 bits as a float and refuses a number past a double's
    range; msgspec keeps the integer exact and refuses such a model outright. A stored model,
    time or ``previous`` time of that kind loads as a parse of the whole value does, and the
    read goes on past it."""
    big = "123456789012345678901234567890"
    texts = {
        f"belief/{id_}": _belief_text(id_, members, model)
        for id_, members, model in (
            ("plain", "", '"m"'),
            ("modelbig", "", big),
            ("modelnegative", "", "-" + big),
            ("model2e64", "", "18446744073709551616"),
            ("modelu64", "", "18446744073709551615"),
            ("modelhuge", "", "1e400"),
            ("modeldigits", "", "9" * 400 + ".5"),
            ("modelinside", "", f'{{"a":{big}}}'),
            ("createdbig", f',"createdAt":{big}', '"m"'),
            ("created2e64", ',"createdAt":18446744073709551616', '"m"'),
            ("previousbig", f',"previous":[{{"content":"y","updatedAt":{big}}}]', '"m"'),
        )
    }
    goal = {**WRITTEN[3], "id": "gbig"}
    texts["goal/gbig"] = orjson.dumps(goal)[:-1] + f',"sequence":{big}}}'.encode()
    loaded = _loads_as_whole_values(texts)
    assert {"plain", "modelbig", "modelu64", "modelinside"} <= set(loaded.beliefs)
    assert loaded.vectors["modelu64"][0] == 2**64 - 1


@pytest.mark.parametrize(
    "number", ["1e400", "-1e400", "9" * 400], ids=["exponent", "negative", "digits"]
)
def test_a_number_past_a_double_in_an_unknown_member_loads_as_whole_values_do(
    number: str,
) -> None:
    """msgspec skips a member its entry does not know without reading its numbers, where
    orjson refuses a whole text holding a number past a double's range: such a text, a goal's
    or a belief's, is skipped as a whole-value parse skips it."""
    texts = {"belief/b": _belief_text("b", f',"note":{number}')}
    goal = orjson.dumps({**WRITTEN[3], "id": "g"})
    texts["goal/g"] = goal[:-1] + f',"note":[{number}]}}'.encode()
    loaded = _loads_as_whole_values(texts)
    assert not loaded.beliefs and not loaded.goals
