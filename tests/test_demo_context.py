"""The context-layers demo runs end to end and reaches every gate state."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from memstrata.demos.context import FAKE_API_KEY, run_demo
from memstrata.stores import SQLiteStore


def test_demo_reaches_offload_warn_prune_and_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteStore(tmp_path / "demo.db") as store:
        run_demo(store, tmp_path)
    out = capsys.readouterr().out
    assert "offloaded" in out and "kept inline" in out
    assert out.count("log WARNING memstrata.context_gate") == 1
    assert "gate: soft warning" in out
    assert "gate: pruned, then passed" in out
    assert "the gate REFUSED the call" in out
    checkpoint = next((tmp_path / "checkpoints").glob("iter-*.json"))
    assert stat.S_IMODE(os.stat(checkpoint).st_mode) == 0o600
    text = checkpoint.read_text()
    assert FAKE_API_KEY not in text and FAKE_API_KEY not in out
    assert json.loads(text)["redacted"] is True
    # Offloaded results are kept per thread, under a hash of the thread id.
    (offloaded,) = (tmp_path / "tool_calls" / "threads").glob("*/call_1.txt")
    assert offloaded.stat().st_size > 50_000
    assert "BLOCKED by the context gate" in (tmp_path / "team" / "current_state.md").read_text()
    assert "repo_map of the installed memstrata package" in out
