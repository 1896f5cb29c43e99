"""Adversarial text for the token estimator: one generator shared by the property tests
(tests/test_tokens.py, drawing from fixed seeds) and the random search
(tools/explore_tokens.py, drawing from fresh ones).

A text is one to six segments of one kind each, concatenated or interleaved a few characters
at a time, so that a part the estimator cannot bound sits inside ordinary text.
"""

from __future__ import annotations

import base64
import random

LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = LOWER.upper()
PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# Every kind of whitespace the pre-tokenisers know, the ones the estimator reads as
# punctuation (vertical tab, form feed) or as other characters (no-break and ideographic
# spaces) included.
WHITESPACE = [" ", "\t", " \t", "\t ", "\n", "\r\n", "\r", "\n\n ", "  \n", "\t\n", "\u3000",
              "\u00a0", "\f", "\v"]  # fmt: skip
WORDS = ["hello", "the", "x", "Foo", "\u00e9", "\u6570\u636e", "ok", "--", "a", "I", "is",
         "und", "de", "\u043f\u0440\u0438\u0432\u0435\u0442", "\ud55c", "\u306e", "::", "()",
         "0", "42", "\u00df"]  # fmt: skip
PROSE = ["the", "agent", "memory", "of", "a", "context", "window", "is", "budget", "tokens."]
CODE = "def f(x):\n    return {'a': [1, 2, 3], \"b\": x}\n"
# Blocks to draw random code points from: Latin-1 and Latin Extended, Greek, Cyrillic,
# Armenian, Hebrew, Arabic, Syriac, Devanagari, Bengali, Gurmukhi, Tamil, Telugu, Malayalam,
# Thai, Lao, Myanmar, Georgian, Hangul Jamo, Ethiopic, Cherokee, Khmer, Latin and Greek
# Extended, punctuation, arrows, box drawing, symbols, dingbats, CJK symbols, kana, CJK
# extension A, ideographs, Yi, hangul, private use, presentation forms, variation selectors,
# fullwidth forms, Linear B, mathematical letters, emoji, ideographs extensions B and G, tags.
BLOCKS = [0x80, 0x100, 0x370, 0x400, 0x530, 0x590, 0x600, 0x700, 0x900, 0x980, 0xA00, 0xB80,
          0xC00, 0xD00, 0xE00, 0xE80, 0x1000, 0x10A0, 0x1100, 0x1200, 0x13A0, 0x1780, 0x1E00,
          0x1F00, 0x2000, 0x2190, 0x2500, 0x2600, 0x2700, 0x3000, 0x3040, 0x3400, 0x4E00,
          0xA000, 0xAC00, 0xE000, 0xFB00, 0xFE00, 0xFF00, 0x10000, 0x1D400, 0x1F300, 0x1F600,
          0x1F900, 0x20000, 0x30000, 0xE0000]  # fmt: skip

# Kinds of segment whose features set them apart from ordinary text, and words the
# vocabularies do not hold, made of letters that look like a language's (pronounceable
# nonsense, random letters of one script as words, one unknown word repeated, random letters
# glued by punctuation, random kana): their features are those of ordinary words or Japanese,
# only the vocabulary tells them apart. The estimator bounds
# both, alone or mixed with any other (ALL_KINDS). The regression cases of tests/test_tokens.py
# name the kinds they were drawn from.
KINDS = ["ws", "wsmix", "char", "word", "b64", "b64lines", "hex", "digits", "emoji", "script",
         "anycp", "longword", "caps", "rwords", "punct", "control", "prose", "code"]  # fmt: skip
WORD_KINDS = ["pronounceable", "script_words", "unknown_word", "glued", "kana"]
# Dense mixtures of scripts (short words whose letters change script every few characters,
# letters with diacritics or Cyrillic between digits) and runs of the katakana prolonged sound
# mark and middle dot, which o200k spells up to four a token.
MIX_KINDS = ["mixed_scripts", "digit_letters", "kana_marks"]
ALL_KINDS = KINDS + WORD_KINDS + MIX_KINDS


def _char(rng: random.Random, lo: int, hi: int) -> str:
    c = rng.randint(lo, hi)
    return chr(0xFFFD if 0xD800 <= c <= 0xDFFF else c)


def _word(rng: random.Random, alphabet: str, lo: int, hi: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def segment(rng: random.Random, kind: str) -> str:
    """A segment of ``kind`` of about 1 to 3,000 characters."""
    n = rng.choice([1, 2, 3, 5, 10, 30, 100, 300, 1000, 3000])
    if kind == "ws":
        return rng.choice(WHITESPACE) * n
    if kind == "wsmix":
        return "".join(rng.choice(WHITESPACE) for _ in range(n))
    if kind == "char":
        ranges = [(33, 126), (0x80, 0x2FFF), (0x1F300, 0x1FAFF), (0x80, 0x10FFFF)]
        return rng.choice([_char(rng, lo, hi) for lo, hi in ranges]) * n
    if kind == "word":
        word = rng.choice(WORDS)
        return (word + rng.choice(["", " ", "\n", ", ", "\t", "  ", ".", "\t\t"])) * n
    if kind == "b64":
        return base64.b64encode(rng.randbytes(n)).decode()
    if kind == "b64lines":
        text = base64.b64encode(rng.randbytes(n)).decode()
        width = rng.choice([60, 64, 76])
        return "\n".join(text[i : i + width] for i in range(0, len(text), width))
    if kind == "hex":
        return rng.choice([str.lower, str.upper])(rng.randbytes(n).hex())
    if kind == "digits":
        return "".join(rng.choice("0123456789") for _ in range(n))
    if kind == "emoji":
        return "".join(rng.choice([_char(rng, 0x1F300, 0x1F64F), _char(rng, 0x2600, 0x27BF),
                                   _char(rng, 0x1F900, 0x1F9FF)]) for _ in range(n))  # fmt: skip
    if kind == "script":
        lo = rng.choice(BLOCKS)
        return "".join(_char(rng, lo, lo + 0xFF) for _ in range(n))
    if kind == "anycp":
        return "".join(_char(rng, 0, 0x10FFFF) for _ in range(n))
    if kind == "longword":
        return _word(rng, LOWER, 30 + n, 30 + n)
    if kind == "caps":
        return _word(rng, UPPER, n, n)
    if kind == "rwords":
        alphabet = rng.choice([LOWER, UPPER, LOWER + UPPER + "0123456789"])
        separator = rng.choice([" ", "\n", ", ", "_", "."])
        return separator.join(_word(rng, alphabet, 1, 9) for _ in range(max(1, n // 5)))
    if kind == "punct":
        return "".join(rng.choice(PUNCT) for _ in range(n))
    if kind == "control":
        return "".join(rng.choice([chr(rng.randint(0, 31)), "\x7f", "a", " "]) for _ in range(n))
    if kind == "prose":
        return " ".join(rng.choice(PROSE) for _ in range(n))
    if kind == "code":
        return CODE * max(1, n // 30)
    if kind == "pronounceable":
        consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
        return " ".join(
            "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 4)))
            for _ in range(max(1, n // 5))
        )
    if kind == "script_words":
        lo, hi = rng.choice([(0x430, 0x44F), (0x3B1, 0x3C9), (0x5D0, 0x5EA), (0x627, 0x64A),
                             (0xE0, 0xFF), (0x905, 0x939), (0xE01, 0xE2E), (0x4E00, 0x9FFF),
                             (0xAC00, 0xD7A3), (0x3041, 0x30FF)])  # fmt: skip
        separator = rng.choice([" ", "", "\n"])
        return separator.join(
            "".join(_char(rng, lo, hi) for _ in range(rng.randint(1, 9)))
            for _ in range(max(1, n // 5))
        )
    if kind == "glued":
        # Words glued by ASCII punctuation rather than set apart by spaces: no space before
        # them to find them by.
        alphabet = rng.choice([LOWER, "".join(map(chr, range(0xE0, 0x100))),
                               "".join(map(chr, range(0x3B1, 0x3CA))),
                               "".join(map(chr, range(0x430, 0x450)))])  # fmt: skip
        glue = rng.choice([PUNCT, ".", ",-", "'"])
        return "".join(
            _word(rng, alphabet, 1, 9) + rng.choice(glue + " " * rng.randint(0, 1))
            for _ in range(max(1, n // 5))
        )
    if kind == "kana":
        # Random hiragana, katakana or both, with none of the kanji and particles of Japanese.
        lo, hi = rng.choice([(0x3041, 0x30FF), (0x3041, 0x3096), (0x30A1, 0x30FA)])
        return "".join(_char(rng, lo, hi) for _ in range(n))
    if kind == "mixed_scripts":
        scripts = rng.sample([LOWER, *(
            "".join(map(chr, range(lo, hi + 1)))
            for lo, hi in [(0xE0, 0xFF), (0x3B1, 0x3C9), (0x430, 0x44F), (0x5D0, 0x5EA),
                           (0x627, 0x64A), (0x3041, 0x30FF)]
        )], rng.randint(2, 4))  # fmt: skip
        separator = rng.choice([" ", "", "\n", "'", "."])
        return separator.join(
            "".join(_word(rng, rng.choice(scripts), 1, 3) for _ in range(rng.randint(1, 3)))
            for _ in range(max(1, n // 5))
        )
    if kind == "digit_letters":
        letters = rng.choice(["".join(map(chr, range(0xE0, 0x100))),
                              "".join(map(chr, range(0x430, 0x450)))])  # fmt: skip
        return "".join(
            _word(rng, "0123456789", 1, 2) + _word(rng, letters, 1, 2) + _word(rng, PUNCT, 0, 2)
            for _ in range(max(1, n // 4))
        )
    if kind == "kana_marks":
        marks = rng.choice(["\u30fc", "\u30fb", "\u30fc\u30fb"])
        return "".join(rng.choice(marks) for _ in range(n))
    if kind == "unknown_word":
        return (_word(rng, LOWER, 2, 7) + rng.choice([" ", "\n", ""])) * n
    raise ValueError(f"unknown segment kind {kind!r}")


def text(rng: random.Random, kinds: list[str] = ALL_KINDS) -> str:
    """One to six segments of ``kinds``, concatenated or interleaved in slices of 1 to 100
    characters."""
    parts = [segment(rng, rng.choice(kinds)) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.5 or len(parts) == 1:
        return "".join(parts)
    k = rng.choice([1, 2, 5, 20, 100])
    slices = [[part[i : i + k] for i in range(0, len(part), k)] for part in parts]
    out = []
    for i in range(max(map(len, slices))):
        out.extend(s[i] for s in slices if i < len(s))
    return "".join(out)
