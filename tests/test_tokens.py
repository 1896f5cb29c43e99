"""Tests of the tokens kernel against tiktoken (the exact peer) and the pure-Python reference."""

from __future__ import annotations

import base64
import copy
import json
import random
import statistics
from typing import Any

import adversarial_text as adv
import pytest
import reference_tokens as ref
from hypothesis import example, given, settings
from hypothesis import strategies as st

import memstrata
from memstrata import _core
from memstrata.exceptions import (
    InvalidInputError,
    InvalidOptionError,
    UnsupportedTypeError,
)
from memstrata.tokens import (
    EstimatingCounter,
    ExactCounter,
    TokenCounter,
    count_message_tokens,
    count_tokens,
    encoding_for,
    estimate_messages,
    estimate_tokens,
    exact_count,
    fits_exactly,
    fits_within,
)

ENCODINGS = ["o200k_base", "cl100k_base"]

# Text that exercises every branch of the pre-tokenisers and of the feature pass.
ALPHABET = st.sampled_from(
    list("abcxyzABCXYZ0123456789 \t\n\r.,;:'\"{}[]()_-/\\!?<>|@#$%^&*=+~`")
    + list("éèüßñøåçÀÉ")  # 2-byte Latin
    + list("привет")  # Cyrillic
    + list("你好中文字符國語漢")  # ideographs, simplified and traditional
    + list("ひらがなカタカナ")  # kana
    + list("한국어조선말")  # hangul
    + list("。、「」\uff01\uff1f")  # CJK and fullwidth punctuation
    + ["😀", "🚀", "\u0301", "\u200b", "\U00020000"]  # emoji, combining, zero-width, ext B
)
TEXTS = st.one_of(st.text(), st.text(alphabet=ALPHABET, max_size=300))


def _peer(encoding: str) -> Any:
    return ref.tiktoken_encoding(encoding)


# --- exact counting --------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_count_tokens_equals_tiktoken_on_the_corpus(encoding: str) -> None:
    peer = _peer(encoding)
    for split in ("calibrate", "heldout", "evaluate"):
        for _, path in ref.corpus_files(split):
            text = path.read_text(encoding="utf-8")
            assert count_tokens(text, encoding=encoding) == len(peer.encode_ordinary(text)), path


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_count_tokens_of_a_long_text_equals_tiktoken(encoding: str) -> None:
    # Long texts are counted in chunks cut at line starts, on several threads: the chunks'
    # counts must add up to tiktoken's count of the whole.
    peer = _peer(encoding)
    texts = [
        p.read_text(encoding="utf-8")
        for s in ("calibrate", "heldout")
        for _, p in ref.corpus_files(s)
    ]
    whole = "\n".join(texts)
    assert len(whole.encode()) > 1 << 19
    for text in (whole, whole.replace("\n", "\r\n"), "\n\n".join(reversed(texts))):
        assert count_tokens(text, encoding=encoding) == len(peer.encode_ordinary(text))


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=15, deadline=None)
@given(lines=st.lists(st.text(alphabet=ALPHABET, max_size=60), min_size=1, max_size=40))
def test_count_tokens_of_generated_long_text_equals_tiktoken(
    encoding: str, lines: list[str]
) -> None:
    # Past the size counted in chunks, with every kind of character at every line start.
    block = "\n".join(lines) + "\n"
    text = block * (200_000 // len(block) + 1)
    assert count_tokens(text, encoding=encoding) == len(_peer(encoding).encode_ordinary(text))


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=TEXTS)
def test_count_tokens_equals_tiktoken_on_generated_text(encoding: str, text: str) -> None:
    assert count_tokens(text, encoding=encoding) == len(_peer(encoding).encode_ordinary(text))


def test_special_tokens_are_ordinary_text() -> None:
    text = "<|endoftext|> and <|im_start|>"
    for encoding in ENCODINGS:
        assert count_tokens(text, encoding=encoding) == len(_peer(encoding).encode_ordinary(text))


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=TEXTS, delta=st.integers(-3, 3))
def test_fits_within_agrees_with_count(encoding: str, text: str, delta: int) -> None:
    exact = count_tokens(text, encoding=encoding)
    limit = max(0, exact + delta)
    assert fits_within(text, limit, encoding=encoding) is (exact <= limit)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_fits_within_on_long_texts_matches_count(encoding: str) -> None:
    # Long texts go through the growing-prefix path; check it at and around the exact count.
    for _, path in ref.corpus_files("heldout")[::3]:
        text = path.read_text(encoding="utf-8")
        exact = count_tokens(text, encoding=encoding)
        for limit in (0, 1, 10, 500, 5000, exact - 1, exact, exact + 1):
            assert fits_within(text, max(limit, 0), encoding=encoding) is (exact <= limit), (
                path.name,
                limit,
            )


@given(piece=st.text(alphabet=ALPHABET, min_size=1, max_size=50), limit=st.integers(0, 3000))
def test_fits_within_on_generated_long_texts(piece: str, limit: int) -> None:
    text = piece * (6000 // len(piece) + 1)
    assert fits_within(text, limit) is (count_tokens(text) <= limit)


def test_fits_within_reads_only_what_the_limit_needs() -> None:
    """Its cost follows the limit, not the text: it never even looks at the 10 MB tail. A lone
    surrogate there, which cannot be encoded and makes count_tokens fail, goes unnoticed. (The
    speed itself is measured in benches/test_tokens.py.)"""
    text = "The agent stores a reflection, then a goal. " * 240_000 + "\ud800 tail"
    assert len(text) >= 10_000_000
    with pytest.raises(InvalidInputError):
        count_tokens(text)
    assert fits_within(text, 10) is False
    assert fits_within(text[:2_000], 10_000) is True


# --- the estimator ---------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=TEXTS)
def test_features_match_the_reference(encoding: str, text: str) -> None:
    expected = ref.features(text, encoding)
    assert _core._token_features(text, encoding=encoding) == expected
    assert _core._token_features(text, encoding=encoding, via_utf8=True) == expected


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_features_match_the_reference_on_the_corpus(encoding: str) -> None:
    for category, chunk in ref.corpus_chunks("heldout")[::7]:
        assert _core._token_features(chunk, encoding=encoding) == ref.features(chunk, encoding), (
            category
        )


# Runs longer than the 64-unit blocks the pass classifies at a time, crossing their edges.
LONG_RUNS = st.lists(
    st.tuples(st.text(alphabet=ALPHABET, min_size=1, max_size=3), st.integers(1, 150)),
    max_size=20,
).map(lambda pieces: "".join(piece * times for piece, times in pieces))


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=LONG_RUNS)
def test_features_match_the_reference_across_blocks(encoding: str, text: str) -> None:
    expected = ref.features(text, encoding)
    assert _core._token_features(text, encoding=encoding) == expected
    assert _core._token_features(text, encoding=encoding, via_utf8=True) == expected


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_features_match_the_reference_on_a_text_long_enough_to_split(encoding: str) -> None:
    """Past ~200K characters the pass runs on several threads; the sum must not change."""
    chunks = [chunk for _, chunk in ref.corpus_chunks("heldout")]
    text = "".join(chunks)
    while len(text) < 600_000:
        text += text
    expected = ref.features(text, encoding)
    assert _core._token_features(text, encoding=encoding) == expected
    assert _core._token_features(text, encoding=encoding, via_utf8=True) == expected
    ascii_text = text.encode("ascii", "ignore").decode()
    assert _core._token_features(ascii_text, encoding=encoding) == ref.features(
        ascii_text, encoding
    )


@given(text=TEXTS)
def test_estimate_is_a_non_negative_int_and_zero_only_for_empty(text: str) -> None:
    for model in (None, "gpt-4"):
        n = estimate_tokens(text, model=model)
        assert isinstance(n, int)
        assert (n == 0) is (text == "")


def test_estimate_is_pure_and_deterministic() -> None:
    text = "def f(x):\n    return {'a': [1, 2, 3]}\n"
    assert estimate_tokens(text) == estimate_tokens(text)
    assert text == "def f(x):\n    return {'a': [1, 2, 3]}\n"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_estimate_accuracy_on_the_held_out_corpus(encoding: str) -> None:
    """Loose bounds on files of the kinds the coefficients were fitted on; the targets are
    checked on sources of other kinds (the test below)."""
    peer = _peer(encoding)
    errors: dict[str, list[float]] = {}
    for category, chunk in ref.corpus_chunks("heldout"):
        exact = len(peer.encode_ordinary(chunk))
        estimate = estimate_tokens(chunk, model=encoding)
        errors.setdefault(category, []).append(abs(estimate - exact) / exact)
    assert set(errors) == set(ref.CATEGORIES)
    for category, errs in errors.items():
        assert statistics.median(errs) < 0.10, (category, statistics.median(errs))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_estimate_meets_its_targets_on_sources_it_was_not_fitted_to(encoding: str) -> None:
    """Median <= 5 % and p95 <= 15 % per category on the ``evaluate`` split: code in C++, Java,
    TypeScript and SQL, READMEs and man pages of other programs, npm manifests and ISO code
    tables, CJK catalogues of other programs, HTML and CSV, Arabic, Hebrew, Hindi, Thai,
    Vietnamese and Indonesian catalogues (tests/corpus/tokens/evaluate/MANIFEST.tsv), none of
    which the coefficients were fitted on.
    Every chunk of it stays within a factor of 2 of its count."""
    peer = _peer(encoding)
    errors: dict[str, list[float]] = {}
    for category, chunk in ref.corpus_chunks("evaluate"):
        exact = len(peer.encode_ordinary(chunk))
        estimate = estimate_tokens(chunk, model=encoding)
        assert exact / 2 <= estimate <= exact * 2, (category, estimate, exact, chunk[:80])
        errors.setdefault(category, []).append(abs(estimate - exact) / exact)
    assert set(errors) == set(ref.EVALUATION_CATEGORIES)
    for category in ("prose", "code", "json", "cjk"):
        median, p95 = ref.error_quantiles(errors[category])
        assert len(errors[category]) >= 40, category
        assert median <= 0.05 and p95 <= 0.15, (category, f"{median:.2%}", f"{p95:.2%}")


# The row names the accuracy tables give each evaluation category.
_TABLE_ROWS = {
    "prose": "prose",
    "code": "code",
    "json": "JSON",
    "cjk": "CJK",
    "markup": "markup",
    "other-scripts": "other scripts",
}


def test_the_accuracy_table_in_the_docs_is_the_measured_one() -> None:
    """docs/tokens.md's per-category errors are what the estimator measures now
    on the evaluation sources (rounded to 0.1 %): a change to the estimator that moves them
    fails here until the table says so."""
    measured: dict[str, list[str]] = {category: [] for category in _TABLE_ROWS}
    for encoding in ("o200k_base", "cl100k_base"):
        errors: dict[str, list[float]] = {}
        for category, chunk in ref.corpus_chunks("evaluate"):
            exact = count_tokens(chunk, encoding=encoding)
            estimate = estimate_tokens(chunk, model=encoding)
            errors.setdefault(category, []).append(abs(estimate - exact) / exact)
        for category in _TABLE_ROWS:
            median, p95 = ref.error_quantiles(errors[category])
            measured[category] += [f"{median:.1%}", f"{p95:.1%}"]
    for document in ("docs/tokens.md",):
        rows = (ref.CORPUS.parents[2] / document).read_text(encoding="utf-8").splitlines()
        for category, label in _TABLE_ROWS.items():
            row = next((r for r in rows if r.startswith(f"| {label} ") and r.count("%") == 4), None)
            assert row is not None, (document, label)
            shown = [cell.strip() for cell in row.strip("|").split("|") if "%" in cell]
            assert shown == measured[category], (document, label, shown, measured[category])


def test_the_evaluation_manifest_names_every_file_and_its_source() -> None:
    rows = (ref.CORPUS / "evaluate" / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()
    listed = {tuple(row.split("\t")[:2]) for row in rows[1:]}
    on_disk = {(category, path.name) for category, path in ref.corpus_files("evaluate")}
    assert listed == on_disk


# --- no collapse: adversarial texts -----------------------------------------------------------

_RNG = random.Random(20260922)
ADVERSARIAL = {
    "40,000 spaces": " " * 40_000,
    "10,000 newlines": "\n" * 10_000,
    "note + 100,000 newlines": "note" + "\n" * 100_000,
    "20,000 x 'a'": "a" * 20_000,
    "base64 of 15,000 random bytes": base64.b64encode(_RNG.randbytes(15_000)).decode(),
    "hex of 8,000 random bytes": _RNG.randbytes(8_000).hex(),
    "5,000 emoji": "\U0001f600" * 5_000,
    "5,000 random CJK ideographs": "".join(chr(_RNG.randint(0x4E00, 0x9FFF)) for _ in range(5_000)),
    "1,000-row markdown table": "| id | name | value | note |\n|---|---|---|---|\n"
    + "".join(f"| {i} | item{i} | {_RNG.random():.3f} | ok |\n" for i in range(1_000)),
    "20,000 random digits": "".join(_RNG.choice("0123456789") for _ in range(20_000)),
    "10,000 x '-'": "-" * 10_000,
    "5,000 tabs": "\t" * 5_000,
    "'  \\n' x 5,000": "  \n" * 5_000,
    "'\\r\\n' x 5,000": "\r\n" * 5_000,
    "'the\\n' x 5,000": "the\n" * 5_000,
    "one 5,000-letter word": "".join(
        _RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5_000)
    ),
    "Thai": "สวัสดีชาวโลกนี่คือข้อความทดสอบ " * 200,
    "Hindi": "नमस्ते दुनिया यह एक परीक्षण पाठ है " * 200,
    "random BMP code points": "".join(chr(_RNG.randint(0x80, 0xD7FF)) for _ in range(5_000)),
    "random astral code points": "".join(
        chr(_RNG.randint(0x10000, 0x10FFFF)) for _ in range(3_000)
    ),
    # A tab, unlike a space, is a token of its own before a word.
    "'und\\t' x 1,500": "und\t" * 1_500,
    # Random letters look like words to the model.
    "random consonant words": " ".join(
        "".join(_RNG.choice("bcdfghjklmnpqrstvwxz") for _ in range(_RNG.randint(2, 7)))
        for _ in range(600)
    ),
    # Words no vocabulary holds, spelt like a language's: the features are those of words.
    "'yexk ' x 3,000": "yexk " * 3_000,
    "pronounceable nonsense": " ".join(
        "".join(_RNG.choice("bcdfghjklmnprstvwz") + _RNG.choice("aeiou") for _ in range(3))
        for _ in range(600)
    ),
    "random Greek words, one a line": "\n".join(
        "".join(chr(_RNG.randint(0x3B1, 0x3C9)) for _ in range(_RNG.randint(1, 9)))
        for _ in range(600)
    ),
    "'ßßßß.ß ' x 500": "ßßßß.ß " * 500,
    "random kana": "".join(chr(_RNG.randint(0x3041, 0x30FF)) for _ in range(3_000)),
    # Up to four a token in o200k, where the model prices each at about half a token.
    "'ー' x 1,000": "ー" * 1_000,
    "'・' x 1,000": "・" * 1_000,
    "'ー・' x 500": "ー・" * 500,
    # One token each with its space, where the model prices a word by its letters.
    "'привет ' x 350": "привет " * 350,
}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_texts_stay_within_a_factor_of_two(encoding: str, name: str) -> None:
    text = ADVERSARIAL[name]
    exact = count_tokens(text, encoding=encoding)
    estimate = estimate_tokens(text, model=encoding)
    assert exact / 2 <= estimate <= 2 * exact, (name, estimate, exact)


def _drawn(seed: int, index: int, kinds: list[str] = adv.KINDS) -> str:
    """Text number ``index`` drawn from ``seed`` out of ``kinds`` (what
    tools/explore_tokens.py reports)."""
    rng = random.Random(seed)
    for _ in range(index):
        adv.text(rng, kinds)
    return adv.text(rng, kinds)


# Texts the random search found misjudged by more than a factor of 2 when the guard judged a
# text whole: (seed, index) of tools/explore_tokens.py --kinds features (adv.KINDS).
FOUND = [(2, 5), (2, 21), (6, 83), (8, 50), (10, 3), (12, 21), (12, 29), (13, 82), (16, 79),
         (18, 4), (19, 65), (23, 55), (31, 41), (33, 49), (34, 17), (36, 1), (39, 16), (39, 21),
         (41, 53), (44, 71), (45, 17), (49, 79), (55, 91), (58, 87), (94098219602, 24),
         (94098219805, 50), (1062478640217, 36)]  # fmt: skip


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(("seed", "index"), FOUND)
def test_found_texts_stay_within_a_factor_of_two(encoding: str, seed: int, index: int) -> None:
    text = _drawn(seed, index)
    exact = count_tokens(text, encoding=encoding)
    estimate = estimate_tokens(text, model=encoding)
    assert exact / 2 <= estimate <= 2 * exact, (estimate, exact, text[:80])


# Mixtures the random search found outside the factor of 2 while no check but the features'
# and the whole-chunk lookups judged a chunk: short words of random Greek, Cyrillic, Hebrew or
# Arabic letters, random kana cut into short pieces, pronounceable nonsense in texts of a few
# dozen characters, letters with diacritics between digits, scripts changing every few letters,
# runs of the katakana prolonged sound mark, parts that each keep another's sign under its
# threshold (random kana among CJK punctuation beside random Greek words; a CJK word repeated
# before a run of `・`; pronounceable nonsense between runs of random punctuation; random Greek
# words before tabs and random 4-byte characters the sample's windows miss). (seed, index)
# of tools/explore_tokens.py, by the kinds drawn from: adv.KINDS + adv.WORD_KINDS, --kinds words,
# all and mixes.
FOUND_KINDS = {"features and words": adv.KINDS + adv.WORD_KINDS, "words": adv.WORD_KINDS,
               "all": adv.ALL_KINDS, "mixes": adv.MIX_KINDS}  # fmt: skip
FOUND_MIXTURES = {
    "features and words": [
        (1027, 48), (1032, 14), (1047, 69), (1063, 7), (1085, 8), (1109, 76), (1117, 82),
        (1130, 58), (1149, 83), (1156, 0), (1167, 96), (1188, 62), (1214, 97), (1225, 39),
        (1275, 57), (1283, 87), (1298, 38), (1304, 19), (1356, 52), (1358, 15), (1374, 68),
        (1392, 79), (1394, 38), (1406, 21), (1417, 73), (1448, 78), (1462, 0), (1464, 20),
        (1483, 44), (1486, 28), (1495, 45),
    ],
    "words": [
        (5000, 16), (5000, 88), (5005, 46), (5008, 2), (5009, 90), (5027, 86), (5029, 94),
        (5036, 95), (5037, 22), (5037, 50), (5042, 16), (5053, 4), (5056, 42), (5059, 54),
        (5061, 9), (5062, 14), (5064, 65), (5065, 77), (5074, 3), (5077, 39), (5078, 95),
        (5083, 72), (5086, 74), (5087, 5), (5087, 54), (5092, 45), (5094, 48), (5098, 92),
        (70055, 97), (2026230088, 67),
    ],
    "all": [
        (100264, 4), (300097, 73), (400485, 51),
        (20019, 84), (20021, 67), (20055, 98), (20173, 49), (20183, 15), (20185, 5), (20185, 18),
        (20242, 84), (20295, 10), (20315, 51), (20316, 31), (20318, 6), (20373, 88), (20387, 47),
        (20403, 83), (20416, 56), (20435, 58), (20474, 58), (60136, 16), (7315, 44), (12278, 22),
        (12156, 53), (9377, 56), (2026113445, 9), (2026120919, 50), (2026150778, 55),
        (2026150868, 10), (2026170150, 54),
    ],
    "mixes": [
        (40000, 18), (40006, 15), (40006, 29), (40016, 57), (40024, 23), (40024, 66), (40028, 35),
        (40028, 38), (40034, 17), (40049, 23), (40050, 2), (40050, 19), (40050, 26), (40052, 45),
        (40056, 26), (40056, 51), (40057, 37), (40057, 39), (40060, 40), (40060, 51), (40063, 49),
        (40067, 84), (40073, 92), (40076, 75), (40082, 40), (40084, 41), (40085, 99), (40095, 47),
        (40099, 90),
    ],
}  # fmt: skip


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    ("kinds", "seed", "index"),
    [(kinds, seed, index) for kinds, found in FOUND_MIXTURES.items() for seed, index in found],
)
def test_found_mixtures_stay_within_a_factor_of_two(
    encoding: str, kinds: str, seed: int, index: int
) -> None:
    text = _drawn(seed, index, FOUND_KINDS[kinds])
    exact = count_tokens(text, encoding=encoding)
    estimate = estimate_tokens(text, model=encoding)
    assert exact / 2 <= estimate <= 2 * exact, (estimate, exact, text[:80])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_texts_under_64_characters_are_counted_exactly(encoding: str) -> None:
    """Counting a text this short costs about what estimating it does."""
    rng = random.Random(64)
    for _ in range(200):
        text = adv.text(rng)[: rng.randint(1, 63)]
        assert estimate_tokens(text, model=encoding) == count_tokens(text, encoding=encoding)


# Mixtures of one to six segments (runs of whitespace, newlines, one character or word,
# base64, hex, digits, emoji and symbols, random code points of many scripts, long words,
# random letters, punctuation, control characters, prose, code, words no vocabulary holds),
# concatenated or interleaved.
ADVERSARIAL_TEXTS = st.integers(0, 2**64 - 1).map(lambda seed: adv.text(random.Random(seed)))


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=600, deadline=None, derandomize=True)  # one case set: reproducible
@given(text=ADVERSARIAL_TEXTS)
@example(text="\t" * 100 + "hello\n" * 100)  # short lines: a newline per word, once missed
def test_estimate_never_collapses(encoding: str, text: str) -> None:
    """On any mixture of the segments the estimator bounds, the estimate stays within a factor
    of 2 of the exact count."""
    exact = count_tokens(text, encoding=encoding)
    estimate = estimate_tokens(text, model=encoding)
    assert exact / 2 <= estimate <= 2 * exact, (estimate, exact)


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=50, deadline=None, derandomize=True)
@given(text=ADVERSARIAL_TEXTS)
def test_estimate_matches_the_reference_guard(encoding: str, text: str) -> None:
    """The kernel distrusts its model exactly where the reference does, and then counts."""
    expected = ref.estimate(text, encoding, ref.coefficients(encoding))
    assert estimate_tokens(text, model=encoding) == expected


# Pieces of the texts the word and kana lookups read: kana of every range the features count,
# with the marks that follow kana; letters with diacritics, Greek and Cyrillic; known words and
# nonsense; ASCII punctuation that glues them; and characters next to which a slice at the wrong
# byte would break (combining marks, joiners, variation selectors, fullwidth forms, emoji,
# supplementary planes, C1 controls).
_KANA = [chr(c) for c in [*range(0x3040, 0x3100), *range(0x31F0, 0x3200), *range(0xFF66, 0xFFA0)]]
_LETTERS = [chr(c) for c in [*range(0xC0, 0x250), *range(0x391, 0x3CA), *range(0x410, 0x450)]]
_PUNCTUATION = list(".,;:-/()[]{}!?\"'#$%&*+<=>@\\^_`|~")
_AROUND = ["\u0301", "\u3099", "\u200d", "\ufe0f", "\ufe0e", "\uff01", "\uff21", "\u3000",
           "ー", "ゝ", "ヾ", "々", "😀", "👨\u200d👩\u200d👧", "\u2014", "\U00020000",
           "\U0010fffd", "\ue000", "\x85", " ", "\n", "\t", "1"]  # fmt: skip
_PIECES = st.one_of(
    st.text(st.sampled_from(_KANA), min_size=1, max_size=40),
    st.text(st.sampled_from(_LETTERS), min_size=1, max_size=8),
    st.text(st.sampled_from("bcdfghjklmnpqrstvwxzaeiou"), min_size=1, max_size=10),
    st.sampled_from(["the", "cat", "cryptography", "naïve", "café", "ファイル", "です"]),
    st.sampled_from(_PUNCTUATION + _AROUND),
)
# Pieces joined, then repeated up to a drawn length (cut anywhere, inside a joined sequence
# too), so that the chunks' edges of 1,024 code points fall among them.
GLUED_AND_KANA_TEXTS = st.builds(
    lambda pieces, separator, length: (separator.join(pieces) * length)[:length],
    st.lists(_PIECES, min_size=1, max_size=60),
    st.sampled_from(["", " ", "."]),
    st.integers(1, 3_500),
)


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=GLUED_AND_KANA_TEXTS)
@example(text="à." * 1_500)  # one glued word across the chunks
@example(text="ｦﾂﾗｱﾎｬﾝ" * 300)  # kana pairs across the chunks' edges
@example(text="あ")
def test_estimate_matches_the_reference_on_glued_words_and_kana(encoding: str, text: str) -> None:
    """Words glued to punctuation and kana next to every kind of character, across the
    chunks' edges: the kernel's lookups read the same words and pairs as the reference's."""
    expected = ref.estimate(text, encoding, ref.coefficients(encoding))
    assert estimate_tokens(text, model=encoding) == expected


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_words_the_vocabularies_do_not_hold_stay_within_a_factor_of_two(encoding: str) -> None:
    """Pronounceable nonsense, random letters of one script as words, one unknown word
    repeated: texts of these kinds alone, whose features are those of ordinary words."""
    misjudged = []
    for seed in range(300):
        text = _drawn(seed, 0, adv.WORD_KINDS)
        exact = count_tokens(text, encoding=encoding)
        estimate = estimate_tokens(text, model=encoding)
        if not exact / 2 <= estimate <= 2 * exact:
            misjudged.append((seed, estimate, exact, text[:40]))
    assert not misjudged, misjudged


# Texts of random letters glued by punctuation and of random kana (tests/adversarial_text.py,
# kinds "kana" and "glued", drawn from these seeds) that were estimated at under half their
# exact count while the word lookups took only words after a space, a tab or a line break and
# nothing looked at kana: random kana alone, with Greek or Cyrillic words, with Latin letters
# glued by punctuation.
GLUED_AND_KANA = [2355, 2358, 2360, 2368, 2372, 2377, 2379, 2384, 2385, 2395]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    "text",
    [
        # Random letters with diacritics glued by punctuation: no space sets the words apart.
        "àààà÷à.à÷÷ààà.ààà÷à " * 20,
        "à à\nà\nàààà\nà àà÷à\nàààà÷à.à÷÷ààà.ààà÷à ",
        # Pronounceable nonsense glued by punctuation.
        "".join(f"{w}{p}" for w, p in zip(["boca", "fedi", "mupo", "zatu", "vi"] * 60, ".,-:;/")),
    ]
    + [_drawn(seed, 0, ["kana", "glued"]) for seed in GLUED_AND_KANA]
    # Random halfwidth katakana and katakana phonetic extensions, and Japanese in halfwidth
    # katakana (each a token or more, 0.41 of its count in o200k): kana to the features, which
    # the pair table once left out.
    + ["ﾌｧｲﾙｦﾀﾞｳﾝﾛｰﾄﾞｼﾃｲﾏｽ｡ｼﾊﾞﾗｸｵﾏﾁｸﾀﾞｻｲ｡ｺﾝﾋﾟｭｰﾀｰﾉｾｯﾃｲｦｶｸﾆﾝｼﾃｸﾀﾞｻｲ｡" * 20]
    + [
        "".join(random.Random(seed).choices([chr(c) for c in range(first, last)], k=600))
        for seed, (first, last) in enumerate([(0xFF66, 0xFF9E), (0x31F0, 0x3200)])
    ],
)
def test_words_glued_by_punctuation_and_random_kana_stay_within_a_factor_of_two(
    encoding: str, text: str
) -> None:
    """Words glued to punctuation are looked up where such words carry a share of the value,
    and kana are judged by the pairs of them no token holds."""
    exact = count_tokens(text, encoding=encoding)
    estimate = estimate_tokens(text, model=encoding)
    assert exact / 2 <= estimate <= 2 * exact, (estimate, exact, text[:40])


def test_model_table() -> None:
    assert encoding_for(None) == "o200k_base"
    assert encoding_for("gpt-4o-mini-2024-07-18") == "o200k_base"
    assert encoding_for("gpt-4.1") == "o200k_base"
    assert encoding_for("o3-mini") == "o200k_base"
    assert encoding_for("gpt-5") == "o200k_base"
    assert encoding_for("gpt-4-0613") == "cl100k_base"
    assert encoding_for("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_for("text-embedding-3-small") == "cl100k_base"
    assert encoding_for("text-embedding-ada-002") == "cl100k_base"
    assert encoding_for("some-future-model") == "o200k_base"
    text = "日本語のテキストと English words 1234"
    assert estimate_tokens(text, model="gpt-4") == estimate_tokens(text, model="cl100k_base")
    assert estimate_tokens(text, model="gpt-4o") == estimate_tokens(text)


# --- messages --------------------------------------------------------------------------------

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant with long-term memory."},
    {"role": "user", "name": "alice", "content": "What did I say about Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "memory_search", "arguments": '{"query":"Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '[{"note":"loves Paris in May"}]'},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    },
]


def _convention(messages: list[dict[str, Any]], count: Any) -> int:
    """OpenAI's cookbook convention plus memstrata's documented choices, in plain Python."""
    if not messages:
        return 0
    total = 3
    for m in messages:
        total += 3 + count(m["role"])
        if m.get("name") is not None:
            total += count(m["name"]) + 1
        content = m.get("content")
        if isinstance(content, str):
            total += count(content)
        elif content is not None:
            for part in content:
                if part["type"] in ("text", "refusal"):
                    total += count(part[part["type"]])
                else:
                    total += 85
        for call in m.get("tool_calls") or []:
            f = call["function"]
            total += 3 + count(f["name"]) + count(f["arguments"])
        if m.get("tool_call_id") is not None:
            total += count(m["tool_call_id"])
    return total


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_count_message_tokens_follows_the_convention(encoding: str) -> None:
    peer = _peer(encoding)
    expected = _convention(MESSAGES, lambda t: len(peer.encode_ordinary(t)))
    assert count_message_tokens(MESSAGES, encoding=encoding) == expected
    assert ExactCounter(encoding).count_messages(MESSAGES) == expected


def test_cookbook_example() -> None:
    # The first two messages of OpenAI's cookbook example; for gpt-4o and gpt-4 the cookbook
    # prints the same formula's result, which _convention reproduces.
    msgs = [
        {"role": "system", "content": "You are a helpful, pattern-following assistant."},
        {"role": "system", "name": "example_user", "content": "New synergies will help."},
    ]
    for encoding in ENCODINGS:
        peer = _peer(encoding)
        n = len(peer.encode_ordinary("You are a helpful, pattern-following assistant."))
        m = len(peer.encode_ordinary("New synergies will help."))
        system = len(peer.encode_ordinary("system"))
        name = len(peer.encode_ordinary("example_user"))
        expected = 3 + (3 + system + n) + (3 + system + name + 1 + m)
        assert count_message_tokens(msgs, encoding=encoding) == expected


@pytest.mark.parametrize("model", [None, "gpt-4"])
def test_estimate_messages_uses_the_same_convention(model: str | None) -> None:
    expected = _convention(MESSAGES, lambda t: estimate_tokens(t, model=model))
    assert estimate_messages(MESSAGES, model=model) == expected
    assert EstimatingCounter(model).count_messages(MESSAGES) == expected


def test_messages_are_not_mutated_and_empty_costs_nothing() -> None:
    before = copy.deepcopy(MESSAGES)
    estimate_messages(MESSAGES)
    count_message_tokens(MESSAGES)
    assert before == MESSAGES
    assert estimate_messages([]) == 0
    assert count_message_tokens([]) == 0
    assert estimate_messages(({"role": "user", "content": "hi"},)) > 0  # tuples are fine


# --- the protocol ----------------------------------------------------------------------------


def test_counters_satisfy_the_protocol() -> None:
    class WordCounter:
        def count(self, text: str) -> int:
            return len(text.split())

        def count_messages(self, messages: Any) -> int:
            return sum(self.count(m["content"]) for m in messages)

    for counter in (EstimatingCounter(), EstimatingCounter("gpt-4"), ExactCounter(), WordCounter()):
        assert isinstance(counter, TokenCounter)
    assert not isinstance("not a counter", TokenCounter)
    assert ExactCounter("cl100k_base").count("hello world") == 2
    assert EstimatingCounter("gpt-4").encoding == "cl100k_base"
    assert memstrata.count_tokens is count_tokens


# --- the estimate's budgeted prefix ------------------------------------------------------------


def _bisected_prefix(text: str, max_tokens: int, model: str) -> int:
    """The prefix bisecting the estimates of ``text``'s prefixes finds, one estimate a probe."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid], model=model) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


# Pieces repeated past several of the estimate's 1,024-code-point chunks.
PREFIX_PIECES = [
    "The agent keeps goals, beliefs and reflections between turns. ",
    '{"id": 17, "name": "item-17", "tags": ["a", "b"], "price": 21.25},\n',
    "def fit(text):\n    return text[:k]  # code\n",
    "東京は日本の首都です。人口は多い。",
    "한국어 문장입니다. ",
    "emoji 😀🚀 and astral \U0001d518\U0001d52b\U0001d526 \U00020000 text ",
    "word   \n\n\t  ",
    "naïve café — déjà vu, Ελληνικά, русский текст. ",
    "a\ud800b ",  # a lone surrogate, read as a code point
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(PREFIX_PIECES), st.integers(1, 120)), max_size=4),
    TEXTS,
    st.floats(0, 1.2),
    st.sampled_from(ENCODINGS),
)
def test_estimate_prefix_is_the_bisection_of_the_prefixes_estimates(
    pieces: list[tuple[str, int]], extra: str, share: float, encoding: str
) -> None:
    text = "".join(piece * n for piece, n in pieces) + extra
    max_tokens = int(estimate_tokens(text, model=encoding) * share)
    cut = _core.estimate_prefix(text, max_tokens, model=encoding)
    assert cut == _bisected_prefix(text, max_tokens, encoding)
    # The prefix is never estimated over the budget; one code point more is.
    assert estimate_tokens(text[:cut], model=encoding) <= max_tokens
    if cut < len(text):
        assert estimate_tokens(text[: cut + 1], model=encoding) > max_tokens


def test_estimate_prefix_of_the_empty_text_and_budgets_of_nothing_or_everything() -> None:
    assert _core.estimate_prefix("", 0) == 0
    assert _core.estimate_prefix("", 10) == 0
    assert _core.estimate_prefix("hello world", 0) == 0
    assert _core.estimate_prefix("hello world", 10**30) == len("hello world")


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: estimate_tokens(b"bytes"),  # type: ignore[arg-type]
        lambda: estimate_tokens(None),  # type: ignore[arg-type]
        lambda: count_tokens(3),  # type: ignore[arg-type]
        lambda: fits_within(["x"], 3),  # type: ignore[arg-type]
        lambda: fits_within("x", 1.5),  # type: ignore[arg-type]
        lambda: fits_within("x", True),
        lambda: _core.estimate_prefix(b"bytes", 3),  # type: ignore[arg-type]
        lambda: _core.estimate_prefix("x", 1.5),  # type: ignore[arg-type]
        lambda: _core.estimate_prefix("x", False),
    ],
)
def test_non_str_text_and_non_int_limit(call: Any) -> None:
    with pytest.raises(UnsupportedTypeError, match="must be"):
        call()


def test_negative_limit() -> None:
    with pytest.raises(InvalidInputError, match=r"limit must be >= 0, got -1"):
        fits_within("x", -1)
    with pytest.raises(InvalidInputError, match=r"max_tokens must be >= 0, got -2"):
        _core.estimate_prefix("x", -2)


def test_unknown_encoding_lists_the_valid_ones() -> None:
    for call in (
        lambda: count_tokens("x", encoding="p50k_base"),
        lambda: fits_within("x", 1, encoding="p50k_base"),
        lambda: count_message_tokens([], encoding="gpt2"),
        lambda: ExactCounter("r50k_base"),
    ):
        with pytest.raises(InvalidOptionError, match="'o200k_base', 'cl100k_base'"):
            call()


def test_lone_surrogate_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="surrogate"):
        count_tokens("a\ud800b")
    # The estimator reads code points, so it estimates a lone surrogate like any BMP character.
    assert estimate_tokens("a\udfffb") >= 1


@pytest.mark.parametrize(
    ("messages", "path", "error"),
    [
        ({"role": "user"}, "$", UnsupportedTypeError),
        ("hello", "$", UnsupportedTypeError),
        ([{"role": "user", "content": "ok"}, "oops"], "$[1]", UnsupportedTypeError),
        ([{"content": "no role"}], "$[0].role", InvalidInputError),
        ([{"role": 1, "content": "x"}], "$[0].role", UnsupportedTypeError),
        ([{"role": "user", "content": 42}], "$[0].content", UnsupportedTypeError),
        ([{"role": "user", "name": ["a"], "content": "x"}], "$[0].name", UnsupportedTypeError),
        (
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]}],
            "$[0].content[1].text",
            InvalidInputError,
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            "$[0].content[0].text",
            UnsupportedTypeError,
        ),
        ([{"role": "user", "content": ["plain"]}], "$[0].content[0]", UnsupportedTypeError),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
                }
            ],
            "$[0].tool_calls[0].function.arguments",
            UnsupportedTypeError,
        ),
    ],
)
def test_bad_messages_name_the_path(messages: Any, path: str, error: type[Exception]) -> None:
    for call in (estimate_messages, count_message_tokens):
        with pytest.raises(error) as info:
            call(messages)
        assert getattr(info.value, "path", None) == path or path in str(info.value)


def test_anthropic_blocks_are_priced_by_what_they_hold() -> None:
    """Anthropic-format messages: a tool_use block costs what the same OpenAI tool call costs,
    and a tool_result costs its content (often most of a prompt), not a flat part price."""
    arguments = {"city": "Paris", "units": "metric"}
    openai_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(arguments)},
            }
        ],
    }
    anthropic_call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "get_weather", "input": arguments}],
    }
    assert estimate_messages([anthropic_call]) == estimate_messages([openai_call])

    report = "edge-7 degraded since 03:10 UTC; disk 90% full on /var. " * 200
    openai_result = {"role": "tool", "tool_call_id": "c1", "content": report}
    anthropic_result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": report}],
    }
    nested = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "c1",
                "content": [{"type": "text", "text": report}],
            }
        ],
    }
    size = estimate_tokens(report)
    assert size > 1000
    for message in (anthropic_result, nested):
        assert abs(estimate_messages([message]) - estimate_messages([openai_result])) <= 10


class _WordCounter:
    """A caller's own counter: one token a word."""

    def count(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: Any) -> int:
        return sum(self.count(str(m.get("content", ""))) for m in messages)


@pytest.mark.parametrize(
    "counter", [EstimatingCounter(), EstimatingCounter("cl100k_base"), _WordCounter()]
)
def test_fits_exactly_answers_as_the_exact_count_does(counter: Any) -> None:
    texts = [
        "",
        "a",
        "hello world " * 50,
        "日本語のテキスト" * 40,
        "x" * 5000,
        "{}" * 300,
    ]
    for text in texts:
        tokens = exact_count(counter, text, keep=False)
        for limit in {-1, 0, 1, tokens - 1, tokens, tokens + 1, len(text)}:
            assert fits_exactly(counter, text, limit) == (limit >= 0 and tokens <= limit), (
                text[:20],
                limit,
            )
