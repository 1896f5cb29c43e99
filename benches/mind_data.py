"""AgentMind benchmark data: a word corpus and a store filled as earlier runs leave it.

Shared by ``test_agent_mind.py`` and the whole-turn benchmark (``turn_scenario.py``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from memstrata import InMemoryStore, hash_embed
from memstrata.layers.mind.entries import encode_vector

DIM = 384
NS = ("mind", "bench")
DAY_MS = 86_400_000
WORDS = [
    "api",
    "billing",
    "cache",
    "cluster",
    "customer",
    "database",
    "deploy",
    "disk",
    "email",
    "error",
    "feature",
    "invoice",
    "latency",
    "login",
    "memory",
    "network",
    "outage",
    "payment",
    "queue",
    "region",
    "release",
    "schema",
    "search",
    "server",
    "session",
    "staging",
    "storage",
    "team",
    "ticket",
    "timeout",
    "token",
    "upgrade",
    "user",
    "vendor",
    "webhook",
    "window",
]


def corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"{' '.join(rng.choice(WORDS, 6))} note {i} {' '.join(rng.choice(WORDS, 4))}"
        for i in range(n)
    ]


def fill_store(
    n_beliefs: int, n_reflections: int, *, seed: int = 1, store: Any = None
) -> tuple[Any, list[str]]:
    """A store (``store``, else a new InMemoryStore) holding the entries, with vectors, as
    earlier runs would have left it."""
    store = store if store is not None else InMemoryStore()
    now = int(time.time() * 1000)
    rng = np.random.default_rng(seed)
    texts = corpus(n_beliefs + n_reflections, seed)
    vectors = hash_embed(texts, DIM)
    model = f"memstrata-hash-v2-{DIM}"
    levels = ("low", "medium", "high")
    updates = {}
    for i, (text, vector) in enumerate(zip(texts, vectors)):
        age = int(rng.integers(0, 60 * DAY_MS))
        common = {
            "content": text,
            "tags": [str(rng.choice(WORDS))],
            "createdAt": now - age,
            "updatedAt": now - age,
            "embedding": encode_vector(vector),
            "embeddingModel": model,
        }
        if i < n_beliefs:
            entry = {
                "id": f"b{i}",
                "type": "belief",
                "confidence": levels[i % 3],
                "expiresAt": now + (-DAY_MS if i % 17 == 0 else 30 * DAY_MS),
                **common,
            }
            if i % 23 == 0:
                entry["error"] = True
        else:
            entry = {"id": f"r{i}", "type": "reflection", "pinned": i % 97 == 0, **common}
        updates[f"{entry['type']}/{entry['id']}"] = (lambda v: lambda _cur: v)(entry)
    store.update_many(NS, updates)
    return store, texts
