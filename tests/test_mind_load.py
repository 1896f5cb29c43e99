"""Loading a mind in bulk: the native vector decoder, the rows it fills, and the entries built
from stored payloads (each checked against the one-at-a-time path it replaces)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memstrata._core import decode_vectors_b64
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


def test_entries_have_slots_and_stay_dataclasses() -> None:
    belief, _, reflection, goal = entries_from_payloads(WRITTEN)
    for entry in (belief, reflection, goal):
        assert not hasattr(entry, "__dict__")
        assert dataclasses.is_dataclass(entry)
        with pytest.raises(AttributeError):
            entry.surprise = 1  # type: ignore[union-attr]
    assert isinstance(belief, MindBelief)
    assert dataclasses.replace(belief, content="z").content == "z"
    assert [f.name for f in dataclasses.fields(MindBelief)][:3] == ["id", "content", "confidence"]
    assert (
        MindBelief("b", "c").tags == []
        and MindBelief("b", "c").tags is not MindBelief("b", "c").tags
    )
    assert repr(MindReflection("r", "c")).startswith("MindReflection(id='r'")
