"""A pure-Python re-implementation of ``hash_embed`` (memstrata-hash-v2): the property tests
require the Rust kernel to match it to float tolerance, which pins the features, their weights
and the hashing scheme down completely (rust/src/embed.rs documents them)."""

from __future__ import annotations

import math
import string

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3

# Unicode White_Space (what Rust's char::is_whitespace uses), ASCII punctuation, and the
# typographic quotes, dashes and ellipsis.
WHITESPACE = {chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680]}
WHITESPACE |= {chr(c) for c in [*range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]}
SEPARATORS = (
    WHITESPACE
    | set(string.punctuation)
    | set("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00ab\u00bb")
)


def feature_hash(kind: bytes, data: bytes) -> int:
    """64-bit FNV-1a over ``kind + data``, then the murmur3 finaliser."""
    h = FNV_OFFSET
    for b in kind + data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


JOINERS = set(".,:")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """
    a about also am an and are as at be been being but by can could did do does for from had has
    have having he her here him his how i if in into is it its just may me might must my of on
    onto or our per s shall she should so than that the their them then there these they this
    those to too us very via was we were what when where which while who whom whose why will
    with would you your
    """
)
NEGATIONS = _words(
    """
    cannot neither never no nobody none nor not nothing without
    """
)
NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
        ]
    )
}
WORD, GRAMS, STOP, NUMBER, NEGATION, PAIR = 1.0, 2.0, 0.2, 3.0, 3.0, 1.0


def is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def tokens(text: str) -> list[str]:
    lower = text.lower()
    out: list[str] = []
    current: list[str] = []
    for i, ch in enumerate(lower):
        joins = (
            ch in JOINERS
            and bool(current)
            and is_digit(current[-1])
            and i + 1 < len(lower)
            and is_digit(lower[i + 1])
        )
        if ch in SEPARATORS and not joins:
            if current:
                out.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        out.append("".join(current))
    return out


def stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def embed_one(text: str, dim: int) -> list[float]:
    row = [0.0] * dim

    def add(kind: bytes, feature: str, weight: float) -> None:
        h = feature_hash(kind, feature.encode("utf-8"))
        bucket = ((h & 0xFFFFFFFF) * dim) >> 32
        row[bucket] += weight if h >> 63 == 0 else -weight

    items: list[str] = []
    prev = ""
    for token in tokens(text):
        if token in NEGATIONS or (token == "t" and prev.endswith("n")):
            add(b"x", "not", NEGATION)
            items.append("\0not")
        elif any(is_digit(c) for c in token):
            value = token.replace(",", "")
            add(b"n", value, NUMBER)
            items.append(value)
        elif token in NUMBER_WORDS:
            add(b"n", NUMBER_WORDS[token], NUMBER)
            items.append(NUMBER_WORDS[token])
        elif token in STOP_WORDS:
            add(b"s", token, STOP)
        else:
            stemmed = stem(token)
            add(b"w", stemmed, WORD)
            padded = f"<{token}>"
            grams = [padded[i : i + n] for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
            for gram in grams:
                add(b"g", gram, GRAMS / math.sqrt(len(grams)))
            items.append(stemmed)
        prev = token
    for first, second in zip(items, items[1:]):
        add(b"b", f"{first} {second}", PAIR)
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row] if norm > 0 else row


def hash_embed(texts: list[str], dim: int = 384) -> list[list[float]]:
    return [embed_one(t, dim) for t in texts]
