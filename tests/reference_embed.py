"""A pure-Python re-implementation of ``hash_embed``: the property tests require the Rust
kernel to match it to float tolerance, which pins the hashing scheme down completely."""

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


def words(text: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    for ch in text.lower():
        if ch in SEPARATORS:
            if current:
                out.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        out.append("".join(current))
    return out


def embed_one(text: str, dim: int) -> list[float]:
    row = [0.0] * dim

    def add(kind: bytes, feature: str) -> None:
        h = feature_hash(kind, feature.encode("utf-8"))
        bucket = ((h & 0xFFFFFFFF) * dim) >> 32
        row[bucket] += 1.0 if h >> 63 == 0 else -1.0

    for word in words(text):
        add(b"w", word)
        padded = f"<{word}>"
        for n in (3, 4, 5):
            for start in range(len(padded) - n + 1):
                add(b"g", padded[start : start + n])
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row] if norm > 0 else row


def hash_embed(texts: list[str], dim: int = 384) -> list[list[float]]:
    return [embed_one(t, dim) for t in texts]
