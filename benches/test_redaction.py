"""Secret redaction: 1 MB texts, ordinary and adversarial, and a 100 KB message checkpointed.

The peer is the pure-Python sweep the rules replaced (``tests/reference_redaction.py``: the same
shapes as Python ``re`` patterns with look-around, linear too but slower); the target is under
100 ms for a megabyte of any text. (The quadratic patterns before that took ~9 s on 40 KB of
``"secret"`` and 62 s to checkpoint one 100 KB message.)
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import tempfile
from typing import Any

import pytest
import reference_redaction
from benchkit import compare, fmt_seconds, record, timed

from memstrata import ContextGate, RecoverableContextError
from memstrata.redaction import redact_messages, redact_secrets

MB = 1 << 20
B64 = "Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA1b2C3d4E5f6G7h8I9j0KaLbMcNdOePfQgRhSiTjUkVlWmXnYoZp"


def _megabyte(unit: str) -> str:
    return unit * (MB // len(unit))


TEXTS = {
    "prose": _megabyte("The quick brown fox jumps over the lazy dog. "),
    "repeated keyword": _megabyte("secret"),
    "one letter": "a" * MB,
    "base64 run": "".join(B64[i % len(B64)] for i in range(MB)),
    "a colon": _megabyte("a:"),
    "url starts": _megabyte("https://"),
    "url user and colon": _megabyte("https://a:"),
    "account keys": _megabyte("AccountKey="),
    "key=value flood": _megabyte("api_key=abcdefgh "),
    "repeated quoted assignment": _megabyte('api_key="'),
    "near-miss tokens": _megabyte("sk-" + B64[:19] + " ghp_" + B64[:29] + " AKIA" + B64[:15] + " "),
    "equals": "=" * MB,
    "jwt starts": _megabyte("-eyJaaaa"),
    "bearer": _megabyte("Bearer "),
}


@pytest.mark.parametrize("name", list(TEXTS))
def test_redact_a_megabyte(benchmark: Any, name: str) -> None:
    text = TEXTS[name]
    assert redact_secrets(text) == reference_redaction.redact_secrets(text)
    compare(
        benchmark,
        f"redaction: 1 MB {name}",
        lambda: redact_secrets(text),
        {"pure-Python re sweep": lambda: reference_redaction.redact_secrets(text)},
        target="< 100 ms per MB",
    )


def test_checkpoint_a_100kb_message(benchmark: Any) -> None:
    """What the context gate does at a refusal: redact the conversation for the checkpoint."""
    messages = [
        {"role": "system", "content": "You are a research agent."},
        {"role": "user", "content": "secret " * (100_000 // 7)},
    ]
    directory = pathlib.Path(tempfile.mkdtemp())
    gate = ContextGate(max_input_tokens=1000, checkpoints_dir=directory)

    def refuse() -> None:
        with contextlib.suppress(RecoverableContextError):
            gate.check_and_compress(messages, "c")

    try:
        benchmark(refuse)
        t = timed(refuse, min_time=0.3, max_batches=50)
        r = timed(lambda: redact_messages(messages), min_time=0.3, max_batches=50)
    finally:
        shutil.rmtree(directory)
    print(
        f"\n[redaction] checkpoint of a 100 KB message: {fmt_seconds(t.median)} "
        f"(redaction alone {fmt_seconds(r.median)})"
    )
    record({"title": "redaction: checkpoint 100 KB", "ours": t.__dict__, "peers": {}, "ratios": {}})
