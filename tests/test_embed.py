"""hash_embed against the pure-Python re-implementation in reference_embed.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference_embed import hash_embed as reference_embed

import memstrata
from memstrata.exceptions import InvalidInputError, UnsupportedTypeError, ZeroVectorError

# Characters on which Python's str.lower and Rust's to_lowercase agree whatever the Unicode
# versions of the two: ASCII, Latin-1, Greek (final sigma included), Cyrillic, CJK, emoji, and
# the whitespace and punctuation the tokenizer splits on.
ALPHABET = (
    "abcXYZ019 .,;!?'\"-_()[]{}\t\n"
    "éÉàÀçÇßẞİıøØ"
    "αβΓΔσςΣΟΔΟΣ"
    "абвАБВ"
    "中文字😀"
    "\u00a0\u2003\u3000\u2019\u201c\u2014\u2026"
)
texts_st = st.lists(st.text(alphabet=ALPHABET, max_size=40), max_size=8)


@given(texts_st, st.sampled_from([1, 2, 7, 64, 384]))
def test_matches_reference(texts: list[str], dim: int) -> None:
    before = list(texts)
    got = memstrata.hash_embed(texts, dim)
    assert got.dtype == np.float32 and got.shape == (len(texts), dim)
    want = np.array(reference_embed(texts, dim), dtype=np.float64).reshape(len(texts), dim)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert texts == before


def test_many_texts_parallel_path_matches_reference() -> None:
    texts = [f"Belief number {i}: the user prefers {i % 7} spaces." for i in range(300)]
    got = memstrata.hash_embed(texts, 96)
    np.testing.assert_allclose(got, np.array(reference_embed(texts, 96)), atol=1e-6)


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_near_duplicates_high_unrelated_low() -> None:
    texts = [
        "The staging environment uses a different API key than production.",
        "Staging uses a different API key than production",
        "My daughter's birthday party is on Saturday afternoon.",
        "Prefer tabs over spaces when formatting Go code.",
        "The user is allergic to peanuts and shellfish.",
    ]
    v = memstrata.hash_embed(texts)
    assert cos(v[0], v[1]) >= 0.7
    for i in range(5):
        for j in range(i + 1, 5):
            if (i, j) != (0, 1):
                assert abs(cos(v[i], v[j])) < 0.3, (i, j, cos(v[i], v[j]))


def test_rows_are_unit_and_empty_texts_are_zero_rows() -> None:
    v = memstrata.hash_embed(["Hello, world", "", "   \n\t", "?!", "x"], dim=32)
    norms = np.linalg.norm(v, axis=1)
    np.testing.assert_allclose(norms[[0, 4]], 1.0, atol=1e-6)
    assert norms[1:4].tolist() == [0.0, 0.0, 0.0]
    vs = memstrata.VectorSet(32)
    with pytest.raises(ZeroVectorError, match='the vector for id "empty"'):
        vs.add(["ok", "empty"], v[:2])


def test_case_insensitive_and_deterministic_across_processes() -> None:
    a, b = memstrata.hash_embed(["Deploy To STAGING", "deploy to staging"], 48)
    np.testing.assert_array_equal(a, b)
    code = "import memstrata; print(memstrata.hash_embed(['same in every process'], 16).tolist())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(memstrata.hash_embed(["same in every process"], 16).tolist())


def test_empty_list() -> None:
    assert memstrata.hash_embed([], 5).shape == (0, 5)


def test_errors() -> None:
    for dim in (0, -2, 65_537):
        with pytest.raises(InvalidInputError, match=f"dim must be between 1 and 65536, got {dim}"):
            memstrata.hash_embed(["x"], dim)
    with pytest.raises(UnsupportedTypeError, match="texts must be a list of str, not a single"):
        memstrata.hash_embed("a sentence")
    with pytest.raises(UnsupportedTypeError, match=r"texts\[1\] must be a str, got bytes") as e:
        memstrata.hash_embed(["ok", b"bytes"])
    assert e.value.path == "texts[1]"
    with pytest.raises(UnsupportedTypeError, match="texts must be a list of str, got int"):
        memstrata.hash_embed(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"texts\[0\] is not valid Unicode"):
        memstrata.hash_embed(["\ud800"])
