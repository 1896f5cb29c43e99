"""hash_embed on 1,000 sentences against a reasonably written numpy hashing embedder.

The peer computes the features of hash_embed's version 1 (words and the character 3- to 5-grams
of ``<word>``), hashes them with ``zlib.crc32`` (C speed, deterministic) and accumulates with
``np.add.at``. Version 2 does more per text (stems, weighted n-grams, numbers, negation, word
pairs), so the ratio is a floor.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import numpy as np
from benchkit import compare

import memstrata

DIM = 384
WORDS = [
    "the",
    "user",
    "prefers",
    "staging",
    "production",
    "deploy",
    "key",
    "api",
    "environment",
    "release",
    "notes",
    "agent",
    "memory",
    "belief",
    "goal",
    "reflection",
    "tool",
    "call",
    "budget",
    "token",
    "window",
    "context",
    "summary",
    "python",
    "rust",
    "vector",
    "search",
    "daughter",
    "birthday",
    "saturday",
    "afternoon",
    "meeting",
    "tuesday",
    "coffee",
    "tabs",
    "spaces",
    "formatting",
]


def sentences(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(6, 16)))
        out.append(" ".join(words).capitalize() + ".")
    return out


TOKEN = re.compile(r"[^\W_]+|\d+", re.UNICODE)


def numpy_hash_embed(texts: list[str], dim: int = DIM) -> np.ndarray:
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        features: list[int] = []
        for word in TOKEN.findall(text.lower()):
            features.append(zlib.crc32(b"w" + word.encode()))
            padded = f"<{word}>"
            for n in (3, 4, 5):
                for i in range(len(padded) - n + 1):
                    features.append(zlib.crc32(padded[i : i + n].encode()))
        if not features:
            continue
        h = np.array(features, dtype=np.uint64)
        signs = np.where(h & 1, -1.0, 1.0).astype(np.float32)
        np.add.at(out[row], (h >> np.uint64(1)) % np.uint64(dim), signs)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def test_hash_embed_1000_sentences(benchmark: Any) -> None:
    texts = sentences(1000)
    compare(
        benchmark,
        f"hash_embed 1,000 sentences dim={DIM}",
        lambda: memstrata.hash_embed(texts, DIM),
        {"numpy + zlib.crc32 hashing embedder": lambda: numpy_hash_embed(texts)},
        target="report",
    )


def test_hash_embed_single_sentence(benchmark: Any) -> None:
    text = ["The staging environment uses a different API key than production."]
    compare(
        benchmark,
        "hash_embed 1 sentence",
        lambda: memstrata.hash_embed(text, DIM),
        {"numpy + zlib.crc32 hashing embedder": lambda: numpy_hash_embed(text)},
        target="report",
    )
