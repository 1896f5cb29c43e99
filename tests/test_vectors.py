"""cosine_top_k and VectorSet against the float64 references in reference_vectors.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from reference_vectors import ReferenceVectorSet, cosine_scores

import memstrata
from memstrata.exceptions import (
    DimensionMismatchError,
    InvalidInputError,
    NonFiniteNumberError,
    UnsupportedTypeError,
    ZeroVectorError,
)

TOL = 1e-5

small_floats = st.floats(-100, 100, width=32)


@st.composite
def matrix_and_query(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(0, 40))
    d = draw(st.integers(1, 40))
    # Small integers make exact ties and zero rows common; floats cover the rest.
    elements = draw(st.sampled_from([st.integers(-2, 2).map(float), small_floats]))
    matrix = draw(hnp.arrays(np.float32, (n, d), elements=elements))
    query = draw(hnp.arrays(np.float32, (d,), elements=elements).filter(lambda q: q.any()))
    return matrix, query


def check_top_k(
    indices: list[int],
    scores: list[float],
    ref: np.ndarray,
    k: int,
    threshold: float | None,
    *,
    ties_by_index: bool = True,
) -> None:
    """The result is a valid top-k of ``ref`` up to float32 rounding."""
    floor = -math.inf if threshold is None else threshold
    assert len(indices) == len(set(indices)) <= k
    for i, s in zip(indices, scores):
        assert not np.isnan(ref[i]), "a zero row was returned"
        assert abs(s - ref[i]) <= TOL
        assert s >= floor
    for (i, a), (j, b) in zip(zip(indices, scores), zip(indices[1:], scores[1:])):
        assert a > b or (a == b and (i < j or not ties_by_index)), "not best first"
    chosen = set(indices)
    rest = [s for i, s in enumerate(ref) if i not in chosen and not np.isnan(s)]
    if len(indices) < k:
        assert all(s < floor + TOL for s in rest), "a qualifying row is missing"
    elif rest:
        assert max(rest) <= min(scores) + TOL, "a better row was left out"


@given(matrix_and_query(), st.integers(1, 50), st.none() | st.floats(-1, 1))
def test_cosine_top_k_matches_reference(
    mq: tuple[np.ndarray, np.ndarray], k: int, threshold: float | None
) -> None:
    matrix, query = mq
    before = (matrix.copy(), query.copy())
    indices, scores = memstrata.cosine_top_k(matrix, query, k, threshold=threshold)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    check_top_k(indices.tolist(), scores.tolist(), cosine_scores(matrix, query), k, threshold)
    np.testing.assert_array_equal(matrix, before[0])
    np.testing.assert_array_equal(query, before[1])


def test_large_matrix_parallel_path_matches_reference() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((20_000, 64), dtype=np.float32)
    matrix[123] = 0
    query = rng.standard_normal(64, dtype=np.float32)
    for k in (1, 10, 1000):
        indices, scores = memstrata.cosine_top_k(matrix, query, k)
        check_top_k(indices.tolist(), scores.tolist(), cosine_scores(matrix, query), k, None)
    assert 123 not in memstrata.cosine_top_k(matrix, query, 20_000)[0]


def test_ties_go_to_the_lower_index_and_zero_rows_are_skipped() -> None:
    matrix = np.array([[0, 0], [2, 0], [1, 1], [5, 0], [0, 0], [1, 0]], dtype=np.float32)
    indices, scores = memstrata.cosine_top_k(matrix, np.array([3, 0], dtype=np.float32), 10)
    assert indices.tolist() == [1, 3, 5, 2]
    assert scores[:3].tolist() == [1.0, 1.0, 1.0]
    indices, _ = memstrata.cosine_top_k(matrix, np.array([1, 0], np.float32), 4, threshold=0.9)
    assert indices.tolist() == [1, 3, 5]


def test_other_dtypes_and_layouts_are_converted() -> None:
    rng = np.random.default_rng(2)
    matrix = rng.standard_normal((50, 8))
    query = rng.standard_normal(8)
    want = memstrata.cosine_top_k(matrix.astype(np.float32), query.astype(np.float32), 5)
    for m, q in [
        (matrix, query),
        (np.asfortranarray(matrix.astype(np.float32)), query),
        (matrix.astype(np.float32)[:, ::1], query.tolist()),
        (matrix.tolist(), query.astype(np.float32)),
    ]:
        got = memstrata.cosine_top_k(m, q, 5)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], atol=1e-6)
    strided = np.repeat(matrix.astype(np.float32), 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(memstrata.cosine_top_k(strided, query, 5)[0], want[0])
    ints = np.array([[1, 0], [0, 1]], dtype=np.int64)
    assert memstrata.cosine_top_k(ints, [0, 2], 1)[0].tolist() == [1]


def test_empty_matrix_gives_empty_result() -> None:
    indices, scores = memstrata.cosine_top_k(np.zeros((0, 3), np.float32), [1, 0, 0], 3)
    assert indices.shape == (0,) and scores.shape == (0,)


def test_cosine_top_k_errors() -> None:
    m = np.ones((3, 4), dtype=np.float32)
    q = np.ones(4, dtype=np.float32)
    with pytest.raises(DimensionMismatchError, match="query: expected dimension 4, got 3") as e:
        memstrata.cosine_top_k(m, q[:3], 1)
    assert (e.value.expected, e.value.got) == (4, 3)
    with pytest.raises(ZeroVectorError, match="query is a zero vector"):
        memstrata.cosine_top_k(m, np.zeros(4, np.float32), 1)
    bad = m.copy()
    bad[2, 1] = np.nan
    bad[1, 3] = np.inf
    with pytest.raises(NonFiniteNumberError, match=r"matrix\[1, 3\] is inf") as e2:
        memstrata.cosine_top_k(bad, q, 1)
    assert e2.value.path == "matrix[1, 3]"
    with pytest.raises(NonFiniteNumberError, match=r"query\[0\] is NaN"):
        memstrata.cosine_top_k(m, np.array([np.nan, 1, 1, 1], np.float32), 1)
    for k in (0, -3):
        with pytest.raises(InvalidInputError, match=f"k must be at least 1, got {k}"):
            memstrata.cosine_top_k(m, q, k)
    with pytest.raises(InvalidInputError, match="threshold must be a number, got NaN"):
        memstrata.cosine_top_k(m, q, 1, threshold=math.nan)
    with pytest.raises(InvalidInputError, match=r"matrix must be a 2-D array \(n, d\), got shape"):
        memstrata.cosine_top_k(q, q, 1)
    with pytest.raises(InvalidInputError, match=r"query must be a 1-D array \(d,\)"):
        memstrata.cosine_top_k(m, m, 1)
    with pytest.raises(UnsupportedTypeError, match="matrix must be an array of real numbers"):
        memstrata.cosine_top_k(np.array([["a", "b"]]), q[:2], 1)
    with pytest.raises(UnsupportedTypeError, match="complex"):
        memstrata.cosine_top_k(m.astype(np.complex64), q, 1)
    with pytest.raises(UnsupportedTypeError, match="query must be an array of real numbers"):
        memstrata.cosine_top_k(m, [object()] * 4, 1)


# --- VectorSet ---

ids_st = st.sampled_from([f"id{i}" for i in range(12)])


@st.composite
def operations(draw: st.DrawFn) -> tuple[int, list[tuple[str, list[str], np.ndarray]]]:
    dim = draw(st.integers(1, 24))
    ops: list[tuple[str, list[str], np.ndarray]] = []
    nonzero = hnp.arrays(np.float32, (dim,), elements=small_floats).filter(lambda v: v.any())
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            ids = draw(st.lists(ids_st, min_size=0, max_size=6))
            rows = [draw(nonzero) for _ in ids]
            ops.append(("add", ids, np.array(rows, np.float32).reshape(len(ids), dim)))
        else:
            ops.append(("remove", draw(st.lists(ids_st, max_size=4)), np.zeros(0)))
    return dim, ops


@given(operations(), hnp.arrays(np.float32, 24, elements=small_floats), st.integers(1, 15))
def test_vector_set_behaves_like_the_reference(
    dim_ops: tuple[int, list[tuple[str, list[str], np.ndarray]]], query24: np.ndarray, k: int
) -> None:
    dim, ops = dim_ops
    query = query24[:dim]
    real = memstrata.VectorSet(dim)
    model = ReferenceVectorSet(dim)
    for op, ids, vectors in ops:
        if op == "add":
            before = vectors.copy()
            real.add(ids, vectors)
            model.add(ids, vectors)
            np.testing.assert_array_equal(vectors, before)
        else:
            assert real.remove(ids) == model.remove(ids)
    assert len(real) == len(model.vectors)
    assert all(i in real for i in model.vectors)
    assert real.dim == dim
    if not query.any():
        with pytest.raises(ZeroVectorError):
            real.top_k(query, k)
        return
    expected = model.scores(query)
    got = real.top_k(query, k)
    ids = sorted(expected)
    ref = np.array([expected[i] for i in ids])
    # Ties follow storage order, which removals permute: not the sorted order used here.
    positions = [ids.index(i) for i, _ in got]
    check_top_k(positions, [s for _, s in got], ref, k, None, ties_by_index=False)
    best = max(expected.values(), default=None)
    duplicate = real.find_duplicate(query, 0.5)
    if best is None or best < 0.5 - TOL:
        assert duplicate is None
    elif best >= 0.5 + TOL:
        assert duplicate is not None and abs(duplicate[1] - best) <= TOL


def test_vector_set_large_prefiltered_search_is_exact() -> None:
    rng = np.random.default_rng(3)
    dim = 384
    centre = rng.standard_normal(dim)
    # Near-duplicates of one direction: the prefilter's hardest case.
    data = (centre + 0.05 * rng.standard_normal((5000, dim))).astype(np.float32)
    vs = memstrata.VectorSet(dim)
    ids = [f"m{i}" for i in range(5000)]
    vs.add(ids, data)
    vs.remove(ids[::7])
    kept = [i for n, i in enumerate(ids) if n % 7]
    unit = data[[n for n in range(5000) if n % 7]].astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    for _ in range(5):
        q = (centre + 0.05 * rng.standard_normal(dim)).astype(np.float32)
        for k, t in [(1, None), (10, None), (200, 0.998)]:
            got = vs.top_k(q, k, threshold=t)
            ref = unit @ (q / np.linalg.norm(q))
            positions = [kept.index(i) for i, _ in got]
            check_top_k(positions, [s for _, s in got], ref, k, t, ties_by_index=False)


def test_vector_set_ranks_by_weighted_similarity_plus_bias_exactly() -> None:
    """AgentMind's composite score (0.6 * similarity + a per-entry bias up to 0.4) through the
    prefiltered search, against float64 numpy, for related and unrelated queries."""
    rng = np.random.default_rng(11)
    dim, n = 384, 6000
    centres = rng.standard_normal((6, dim))
    data = (centres[rng.integers(0, 6, n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)
    biases = rng.uniform(0.0, 0.4, n).astype(np.float32)
    ids = [f"e{i}" for i in range(n)]
    vs = memstrata.VectorSet(dim)
    vs.add(ids, data, biases=biases)
    unit = data.astype(np.float64) / np.linalg.norm(data.astype(np.float64), axis=1, keepdims=True)
    queries = [centres[i] + 0.3 * rng.standard_normal(dim) for i in range(4)]
    queries += [rng.standard_normal(dim) for _ in range(2)]
    for q in queries:
        q = q.astype(np.float32)
        for weight, k, t in [(0.6, 5, 0.35), (0.6, 20, None), (0.0, 3, None), (2.0, 1, 0.5)]:
            got = vs.top_k(q, k, threshold=t, weight=weight)
            ref = weight * (unit @ (q / np.linalg.norm(q))) + biases
            order = np.argsort(-ref, kind="stable")
            if t is not None:
                order = order[ref[order] >= t - TOL]
            want = order[:k]
            assert len(got) == len(want)
            for (i, score), j in zip(got, want):
                # The same entry, or one whose score ties it within float32 rounding.
                assert abs(score - ref[j]) <= TOL
                assert abs(ref[ids.index(i)] - ref[j]) <= TOL
    # Replacing a vector without biases resets its bias; a bias alone can win at weight 0.
    vs.add(["e0"], data[:1])
    assert vs.top_k(data[1], 1, weight=0.0)[0][1] == pytest.approx(float(biases.max()))
    assert dict(vs.top_k(data[0], n))["e0"] == pytest.approx(1.0)


@st.composite
def prefiltered_sets(draw: Any) -> tuple[Any, list[Any], Any]:
    """Sets large enough for the prefilter (and its four-bit pass: several blocks of 256 rows),
    with ties (repeated rows, one row throughout, biases on a grid), magnitudes from 1e-30 to
    1e30 and extreme elements, and queries among them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dim = draw(st.sampled_from([1, 3, 17, 64, 70, 384]))
    n = draw(st.integers(520, 1300))
    shape = draw(st.sampled_from(["random", "repeated", "equal"]))
    if shape == "random":
        data = rng.standard_normal((n, dim))
        data *= rng.choice([1.0, 1e-30, 1e30, 1e-3, 3e3], size=(n, 1))
        extreme = rng.random(n) < 0.1
        data[extreme, rng.integers(0, dim, int(extreme.sum()))] = np.finfo(np.float32).max
    elif shape == "repeated":
        data = rng.standard_normal((5, dim))[rng.integers(0, 5, n)]
    else:
        data = np.repeat(rng.standard_normal((1, dim)), n, axis=0)
    data = data.astype(np.float32)
    data[~data.any(axis=1), 0] = 1.0
    if draw(st.booleans()):
        biases = np.round(rng.uniform(0.0, 0.4, n) * 10) / 10
    else:
        biases = rng.uniform(-0.5, 0.5, n)
    vs = memstrata.VectorSet(dim)
    vs.add([f"e{i}" for i in range(n)], data, biases=biases.astype(np.float32))
    queries = [data[int(rng.integers(0, n))], rng.standard_normal(dim).astype(np.float32)]
    return vs, [q for q in queries if q.any()], n


@given(
    prefiltered_sets(),
    st.integers(1, 60),
    st.none() | st.floats(-2, 2) | st.just(10.0),
    st.just(0.6) | st.floats(0, 3),
)
def test_vector_set_prefilter_answers_as_its_exhaustive_scan(
    case: tuple[Any, list[Any], int], k: int, threshold: float | None, weight: float
) -> None:
    """Below a quarter of the set, ``top_k`` takes the prefilter; for ``k`` past it, the
    exhaustive scan. The first ``k`` of the exhaustive answer are the prefiltered answer: the
    same ids, in the same order, with the same float32 scores."""
    vs, queries, n = case
    for q in queries:
        got = vs.top_k(q, k, threshold=threshold, weight=weight)
        exhaustive = vs.top_k(q, n, threshold=threshold, weight=weight)
        assert got == exhaustive[:k]
        if threshold is not None and threshold > weight + 0.5:
            assert got == []


def test_vector_set_refuses_bad_biases_and_weights() -> None:
    vs = memstrata.VectorSet(2)
    with pytest.raises(InvalidInputError, match="got 2 ids but 1 biases"):
        vs.add(["a", "b"], [[1, 0], [0, 1]], biases=[0.5])
    with pytest.raises(InvalidInputError, match=r'biases\[1\] \(id "b"\) must be a finite number'):
        vs.add(["a", "b"], [[1, 0], [0, 1]], biases=[0.5, np.inf])
    with pytest.raises(UnsupportedTypeError, match="biases must be an array of real numbers"):
        vs.add(["a"], [[1, 0]], biases=["high"])
    assert len(vs) == 0
    vs.add(["a", "b"], [[1, 0], [0, 1]], biases=[0.0, 0.5])
    for weight in (-0.1, math.nan, math.inf, 1e300):
        with pytest.raises(InvalidInputError, match="weight must be a finite number >= 0"):
            vs.top_k([1, 0], 1, weight=weight)
    assert [i for i, _ in vs.top_k([1, 0], 2)] == ["a", "b"]
    assert [i for i, _ in vs.top_k([1, 0], 2, weight=0.25)] == ["b", "a"]


def test_vector_set_add_replace_remove_and_duplicates() -> None:
    vs = memstrata.VectorSet(3)
    vs.add(["a", "b"], np.array([[1, 0, 0], [0, 2, 0]], np.float32))
    assert len(vs) == 2 and "a" in vs and "c" not in vs and 3 not in vs
    vs.add(["a"], [[0, 0, 5]])
    assert len(vs) == 2
    assert vs.top_k([0, 0, 1], 1) == [("a", 1.0)]
    assert vs.find_duplicate(np.array([0, 1, 0.01], np.float32), 0.99)[0] == "b"
    assert vs.find_duplicate([1, 0, 0], 0.5) is None
    assert vs.remove(["a", "zzz", "a"]) == 1
    assert len(vs) == 1 and "a" not in vs
    assert vs.top_k([0, 1, 0], 5, threshold=0.1) == [("b", 1.0)]
    vs.add(["x", "x"], [[1, 0, 0], [0, 0, 1]])
    assert vs.top_k([0, 0, 1], 1) == [("x", 1.0)]
    assert repr(vs) == "VectorSet(dim=3, len=2)"


def test_vector_set_errors_name_the_id_and_change_nothing() -> None:
    vs = memstrata.VectorSet(2)
    with pytest.raises(ZeroVectorError, match=r'the vector for id "b" \(vectors\[1\]\)'):
        vs.add(["a", "b"], [[1, 0], [0, 0]])
    with pytest.raises(NonFiniteNumberError, match=r'vectors\[0, 1\] \(id "a"\) is NaN'):
        vs.add(["a"], [[1, np.nan]])
    assert len(vs) == 0
    with pytest.raises(DimensionMismatchError, match="vectors: expected dimension 2, got 3"):
        vs.add(["a"], [[1, 0, 0]])
    with pytest.raises(InvalidInputError, match="ids has 2 entries but vectors has 1 rows"):
        vs.add(["a", "b"], [[1, 0]])
    with pytest.raises(UnsupportedTypeError, match="ids must be a list of str, not a single str"):
        vs.add("ab", [[1, 0], [0, 1]])
    with pytest.raises(UnsupportedTypeError, match=r"ids\[1\] must be a str, got int") as e:
        vs.add(["a", 1], [[1, 0], [0, 1]])
    assert e.value.path == "ids[1]"
    vs.add(["a"], [[1, 0]])
    with pytest.raises(DimensionMismatchError, match="query: expected dimension 2, got 1"):
        vs.top_k([1], 1)
    with pytest.raises(DimensionMismatchError, match="vector: expected dimension 2, got 3"):
        vs.find_duplicate([1, 0, 0], 0.9)
    with pytest.raises(ZeroVectorError, match="vector is a zero vector"):
        vs.find_duplicate([0, 0], 0.9)
    with pytest.raises(InvalidInputError, match="k must be at least 1, got 0"):
        vs.top_k([1, 0], 0)
    with pytest.raises(InvalidInputError, match="threshold must be a number"):
        vs.find_duplicate([1, 0], math.nan)
    for dim in (0, -1, 65_537):
        with pytest.raises(InvalidInputError, match="dim must be between 1 and 65536"):
            memstrata.VectorSet(dim)
    assert len(vs) == 1


def test_vector_set_add_rows_reads_unit_rows_in_place() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((900, 16))
    unit = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    blocks = [unit[:400].copy(), unit[400:].copy()]
    shared, own = memstrata.VectorSet(16), memstrata.VectorSet(16)
    order = rng.permutation(900)
    ids = [f"r{i}" for i in order]
    biases = rng.uniform(0, 0.4, 900).astype(np.float32)
    for part in (slice(0, 500), slice(500, 900)):
        shared.add_rows(ids[part], blocks, order[part], biases=biases[part])
    own.add(ids, unit[order], biases=biases)
    for query in rng.standard_normal((10, 16)):
        got = shared.top_k(query, 7, weight=0.6)
        want = own.top_k(query, 7, weight=0.6)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def test_vector_set_add_rows_errors_name_the_problem_and_change_nothing() -> None:
    unit = np.eye(3, dtype=np.float32)
    vs = memstrata.VectorSet(3)
    cases: list[tuple[type[Exception], str, list[Any], Any, Any]] = [
        (
            InvalidInputError,
            r"blocks\[0\] must be a float32 C-contiguous",
            [unit.astype(np.float64)],
            [0],
            None,
        ),
        (
            InvalidInputError,
            r"blocks\[0\] must be a float32 C-contiguous",
            [np.asfortranarray(np.eye(3, 4, dtype=np.float32)[:, :3])],
            [0],
            None,
        ),
        (
            InvalidInputError,
            r"blocks\[0\] must be a float32 C-contiguous array of shape \(n, 3\)",
            [np.eye(2, dtype=np.float32)],
            [0],
            None,
        ),
        (
            UnsupportedTypeError,
            "blocks must be a list of arrays, not a single one",
            unit,
            [0],
            None,
        ),
        (InvalidInputError, r"rows\[0\] must be at least 0, got -1", [unit], [-1], None),
        (
            InvalidInputError,
            r"rows\[0\] \(id \"a\"\) is 3, past the sources' 3 rows",
            [unit],
            [3],
            None,
        ),
        (InvalidInputError, "got 1 ids but 2 rows", [unit], [0, 1], None),
        (
            InvalidInputError,
            r"biases\[0\] \(id \"a\"\) must be a finite number",
            [unit],
            [0],
            [np.nan],
        ),
        (InvalidInputError, "has norm 2: shared rows must be unit vectors", [2 * unit], [0], None),
        (
            ZeroVectorError,
            r'the row for id "a" \(rows\[0\]\)',
            [np.zeros((1, 3), np.float32)],
            [0],
            None,
        ),
        (
            NonFiniteNumberError,
            r'rows\[0\] \(id "a"\), column 1 is NaN',
            [np.array([[0, np.nan, 1]], np.float32)],
            [0],
            None,
        ),
    ]
    for error, message, blocks, rows, biases in cases:
        with pytest.raises(error, match=message):
            vs.add_rows(
                ["a"][: len(rows)] if len(rows) == 1 else ["a"], blocks, rows, biases=biases
            )
        assert len(vs) == 0
    vs.add_rows(["a", "b"], [unit], [0, 2])
    with pytest.raises(InvalidInputError, match="cannot take vectors of its own"):
        vs.add(["c"], [[1, 0, 0]])
    own = memstrata.VectorSet(3)
    own.add(["a"], [[1, 0, 0]])
    with pytest.raises(InvalidInputError, match="cannot take shared rows"):
        own.add_rows(["b"], [unit], [1])
    assert vs.top_k([0, 0, 1], 1)[0][0] == "b" and len(vs) == 2 and len(own) == 1


def test_vector_set_is_safe_to_share_between_threads() -> None:
    import threading

    rng = np.random.default_rng(5)
    dim = 64
    vs = memstrata.VectorSet(dim)
    base = rng.standard_normal((2000, dim)).astype(np.float32)
    vs.add([f"b{i}" for i in range(2000)], base)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(200):
                vs.add([f"w{i}"], rng.standard_normal((1, dim)).astype(np.float32))
                if i % 3 == 0:
                    vs.remove([f"w{i - 1}"])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(200):
                # b7 itself is never touched by the writer, so it must always be found.
                assert vs.top_k(base[7], 1)[0][0] == "b7"
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (writer, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(vs) == 2000 + 200 - len(range(3, 200, 3))  # i = 0 removes the unknown "w-1"
