"""Secret redaction: 1 MB texts, ordinary and adversarial, and a 100 KB message checkpointed.

No peer: the figure is the point (the quadratic patterns this replaced took ~9 s on 40 KB of
``"secret"`` and 62 s to checkpoint one 100 KB message). Every pattern runs in linear time, so
these stay proportional to the text's length whatever it holds.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import tempfile
from typing import Any

import pytest
from benchkit import fmt_seconds, record, timed

from memstrata import ContextGate, RecoverableContextError
from memstrata.redaction import redact_messages, redact_secrets

MB = 1 << 20
TEXTS = {
    "prose": "The quick brown fox jumps over the lazy dog. " * (MB // 45),
    "repeated keyword": "secret" * (MB // 6),
    "one letter": "a" * MB,
    "a colon": "a:" * (MB // 2),
    "url starts": "https://" * (MB // 8),
    "equals": "=" * MB,
    "jwt starts": "-eyJaaaa" * (MB // 8),
    "bearer": "Bearer " * (MB // 7),
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_redact_a_megabyte(benchmark: Any, name: str) -> None:
    text = TEXTS[name]
    benchmark(redact_secrets, text)
    t = timed(lambda: redact_secrets(text), min_time=0.3, max_batches=20)
    print(f"\n[redaction] 1 MB {name}: {fmt_seconds(t.median)} (median), p95 {fmt_seconds(t.p95)}")
    record({"title": f"redaction: 1 MB {name}", "ours": t.__dict__, "peers": {}, "ratios": {}})


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
