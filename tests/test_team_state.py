"""TeamState: the claim trailer, the document, FIFO soft cap, audit log, atomic writes, layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata import MemoryStack
from memstrata.exceptions import InvalidInputError
from memstrata.layers.team_state import TeamState, extract_claim
from memstrata.stores import InMemoryStore

ARTIFACT = """# Parser

def parse(): ...

## summary_for_state_doc
Shipped parse() with error positions; tests cover empty input.
"""


def test_extract_claim_removes_the_trailer() -> None:
    body, claim = extract_claim(ARTIFACT)
    assert claim == "Shipped parse() with error positions; tests cover empty input."
    assert "summary_for_state_doc" not in body
    assert body == "# Parser\n\ndef parse(): ...\n"


def test_extract_claim_stops_at_the_next_heading_and_handles_no_trailer() -> None:
    text = "intro\n### Summary_For_State_Doc:\nclaim text\n## Appendix\nkept\n"
    body, claim = extract_claim(text)
    assert claim == "claim text"
    assert body == "intro\n## Appendix\nkept\n"
    assert extract_claim("no trailer here") == ("no trailer here", None)
    with pytest.raises(InvalidInputError, match="artifact must be a string"):
        extract_claim(None)  # type: ignore[arg-type]


def test_record_renders_and_prepends(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    assert team.prepend("Do X.") == "Do X."
    team.record(
        "parse config",
        shipped="config.py",
        claim="parser done",
        verified="12 tests pass",
        verdict="pass",
    )
    md = (tmp_path / "current_state.md").read_text()
    assert "### parse config" in md
    assert "- shipped: config.py" in md
    assert "- producer claim: parser done" in md
    assert "- QC verified: [pass] 12 tests pass" in md
    prompt = team.prepend("Do X.")
    assert prompt.startswith("## Team State\n### parse config")
    assert prompt.endswith("\n\nDo X.")
    assert not (tmp_path / "audit.jsonl").exists()


def test_divergences_are_flagged_and_audited(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    team.record(
        "write docs", claim="all documented", verified="3 functions lack docs", verdict="fail"
    )
    team.record("api", claim="done", verdict="pass", divergences=["claims 5 endpoints, QC saw 4"])
    md = team.render()
    assert "- DIVERGENCE: producer claimed success; QC verdict is fail" in md
    assert "- DIVERGENCE: claims 5 endpoints, QC saw 4" in md
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [entry["objective"] for entry in lines] == ["write docs", "api"]
    assert lines[0]["event"] == "divergence" and lines[0]["verdict"] == "fail"


def test_fifo_soft_cap_keeps_newest(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    for i in range(40):
        team.record(f"step {i}", shipped=f"module_{i}.py with a reasonably long description " * 2)
    md = (tmp_path / "current_state.md").read_text()
    assert len(md.encode()) <= 2048 + 1
    names = [e.objective for e in team.entries()]
    assert names[-1] == "step 39"
    assert "step 0" not in names and len(names) < 40
    # Newest first in the document.
    assert md.index("step 39") < md.index(f"step {40 - len(names)}")
    # A single entry larger than the cap is cut, not dropped.
    team.record("huge", shipped="x" * 3900)
    assert [e.objective for e in team.entries()] == ["huge"]
    assert len(team.render().encode()) <= 2048


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    team.record("ok", shipped="a")
    before = (tmp_path / "current_state.md").read_bytes()
    with pytest.raises(InvalidInputError, match="verdict"):
        team.record("x", verdict="maybe")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="objective is empty"):
        team.record("   ")
    with pytest.raises(InvalidInputError, match="claim is 5,000 characters"):
        team.record("x", claim="c" * 5000)
    with pytest.raises(InvalidInputError, match="shipped must be a string"):
        team.record("x", shipped=3)  # type: ignore[arg-type]
    assert (tmp_path / "current_state.md").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_corrupt_state_is_moved_aside(tmp_path: Path, caplog) -> None:
    team = TeamState(state_dir=tmp_path)
    team.record("one", shipped="a")
    (tmp_path / "current_state.json").write_text("{not json")
    assert team.entries() == []
    assert any(p.name.startswith("current_state.json.corrupt-") for p in tmp_path.iterdir())
    assert "unreadable" in caplog.text
    team.record("two", shipped="b")
    assert [e.objective for e in team.entries()] == ["two"]


def test_disabled_and_clear(tmp_path: Path) -> None:
    off = TeamState(state_dir=tmp_path / "off", enabled=False)
    off.record("x", shipped="y")
    assert not (tmp_path / "off").exists()
    assert off.prepend("p") == "p"
    team = TeamState(state_dir=tmp_path / "on")
    team.record("x", shipped="y", claim="c", verdict="fail")
    team.clear()
    assert team.render() == ""
    assert (tmp_path / "on" / "audit.jsonl").exists()


def test_as_a_layer_it_injects_the_block(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    stack = MemoryStack([team], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        assert run.prepare([{"role": "user", "content": "go"}]) == [
            {"role": "user", "content": "go"}
        ]
        team.record("first", shipped="a.py")
        out = run.prepare([{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}])
        assert out[1]["role"] == "system"
        assert out[1]["content"].startswith("## Team State\n### first")
        assert run.tool_specs() == []


def test_the_item_is_read_again_only_when_the_file_changed(tmp_path: Path) -> None:
    mine, theirs = TeamState(state_dir=tmp_path), TeamState(state_dir=tmp_path)  # two processes
    assert mine.recall(mine, 1000) == []
    theirs.record("first", shipped="a.py")
    (item,) = mine.recall(mine, 1000)
    assert "### first" in item["content"]
    # Unchanged: the very same text (the context gate reuses its count), without a read.
    (again,) = mine.recall(mine, 1000)
    assert again["content"] is item["content"]
    theirs.record("second", shipped="b.py")
    (newer,) = mine.recall(mine, 1000)
    assert "### second" in newer["content"] and "### first" in newer["content"]
    (tmp_path / "current_state.json").unlink()
    assert mine.recall(mine, 1000) == []
