"""TeamState: the claim trailer, the document, FIFO soft cap, audit log, atomic writes, layer."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from loop_timing import loop_lag

from memstrata import MemoryStack, count_tokens, estimate_tokens
from memstrata.exceptions import InvalidInputError
from memstrata.layers.team_state import TeamState, extract_claim
from memstrata.stores import InMemoryStore
from memstrata.tokens import ExactCounter

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
    # Unchanged: the very same text (the context gate reuses its count).
    (again,) = mine.recall(mine, 1000)
    assert again["content"] is item["content"]
    theirs.record("second", shipped="b.py")
    (newer,) = mine.recall(mine, 1000)
    assert "### second" in newer["content"] and "### first" in newer["content"]
    (tmp_path / "current_state.json").unlink()
    assert mine.recall(mine, 1000) == []


# An unusable state directory switches the layer off -------------------------------------------


def _unusable_dirs(tmp_path: Path) -> list[tuple[str, Path | str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    cases: list[tuple[str, Path | str]] = [
        ("a file where the directory should be", a_file),
        ("a directory under a file", a_file / "team"),
        ("a path with NUL", str(tmp_path / "te\x00am")),
    ]
    if Path("/proc/self").is_dir():
        cases.append(("a directory nobody can create", "/proc/memstrata-team-state"))
    if os.geteuid() != 0:  # root writes through any mode
        read_only = tmp_path / "read-only"
        read_only.mkdir(mode=0o500)
        cases.append(("a read-only directory", read_only))
    return cases


def test_an_unusable_state_dir_switches_the_layer_off(tmp_path: Path, caplog) -> None:
    for what, state_dir in _unusable_dirs(tmp_path):
        caplog.clear()
        team = TeamState(state_dir=state_dir)
        stack = MemoryStack([team], store=InMemoryStore())
        with stack.run(thread_id="t") as run, caplog.at_level(logging.WARNING):
            messages = [{"role": "user", "content": "go"}]
            assert run.prepare(messages) == messages, what
            entry = team.record("parse config", shipped="config.py", claim="done")
            assert entry.objective == "parse config", what  # returned, not saved
            assert team.off_reason is not None, what
            assert run.prepare(messages) == messages, what
            assert team.record("again", shipped="x").objective == "again", what
            assert team.entries() == [], what
            assert team.prepend("Do X.") == "Do X.", what
            team.clear()
        warnings = [r for r in caplog.records if r.name == "memstrata.team_state"]
        assert len(warnings) == 1, (what, [r.getMessage() for r in warnings])
        message = warnings[0].getMessage()
        assert "switched off" in message and os.fspath(state_dir).replace("\x00", "\\x00") in (
            message
        ), (what, message)
    assert (tmp_path / "a-file").read_text() == "not a directory"


def test_a_state_file_another_writer_replaces_while_it_is_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader (a prepare, which reads without the lock) whose state file a writer renames a
    new one over between its open and its check (another process, or this process's async
    record writing in a worker thread): it reads the new file; the layer stays on."""
    team = TeamState(state_dir=tmp_path)
    team.record("first")
    other = TeamState(state_dir=tmp_path)
    real_fstat = os.fstat
    replaced: list[bool] = []

    def fstat(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        state = tmp_path / "current_state.json"
        if not replaced and state.exists() and state.stat().st_ino == info.st_ino:
            replaced.append(True)
            other.record("second")
        return info

    monkeypatch.setattr(os, "fstat", fstat)
    assert [entry.objective for entry in team.entries()] == ["first", "second"]
    assert replaced and team.off_reason is None


def test_bad_input_still_raises_when_the_layer_is_off(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    team = TeamState(state_dir=tmp_path / "a-file")
    team.record("x")
    assert team.off_reason is not None
    with pytest.raises(InvalidInputError, match="verdict"):
        team.record("x", verdict="maybe")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="state_dir must be a path"):
        TeamState(state_dir=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="state_dir must be a path"):
        TeamState(state_dir=None)  # type: ignore[arg-type]


# Token budget ---------------------------------------------------------------------------------


def _big_state(team: TeamState, count: int = 30) -> None:
    for i in range(count):
        team.record(
            f"step {i}",
            shipped=f"module_{i}.py: parsing, validation and error reporting " * 3,
            claim=f"claim {i}: everything in module_{i} works as specified " * 3,
        )


def test_the_block_fits_the_budget_the_stack_gives(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path, soft_cap_bytes=64_000)
    _big_state(team)
    assert estimate_tokens(team.render()) > 1000
    counter = ExactCounter()
    stack = MemoryStack([team], store=InMemoryStore(), tokens=counter)
    with stack.run(thread_id="t") as run:
        for budget in (50, 120, 400):
            (item,) = team.recall(run.layer("team-state"), budget)
            content = item["content"]
            assert counter.count(content) <= budget, budget
            assert content.startswith("## Team State\n### step 29"), budget
        # Whole entries go first, the oldest first: a mid-size budget shows the newest ones.
        (item,) = team.recall(run.layer("team-state"), 400)
        shown = [n for n in range(30) if f"### step {n}\n" in item["content"]]
        assert shown == list(range(30 - len(shown), 30)) and 1 < len(shown) < 30
        # Too small for even the heading of the newest entry: nothing.
        assert team.recall(run.layer("team-state"), 3) == []


def test_the_layers_own_budget_bounds_the_block_and_prepend(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path, soft_cap_bytes=64_000, budget=(0, 60))
    _big_state(team)
    stack = MemoryStack([team], store=InMemoryStore(), tokens=ExactCounter())
    with stack.run(thread_id="t") as run:
        out = run.prepare([{"role": "user", "content": "go"}])
        assert out[0]["content"].startswith("## Team State\n### step 29")
        assert count_tokens(out[0]["content"]) <= 60
    block = team.prepend("Do X.").removesuffix("\n\nDo X.")
    assert count_tokens(block) <= 60 and block.startswith("## Team State\n### step 29")
    # The newest entry alone is over the budget: it is cut, never dropped.
    assert "- shipped: module_29.py" in block and block.rstrip().endswith("…")


# Concurrent writers ---------------------------------------------------------------------------


def _record_many(state_dir: str, writer: int, count: int) -> None:
    team = TeamState(state_dir=state_dir, soft_cap_bytes=1_000_000)
    for i in range(count):
        team.record(f"w{writer}-{i}", shipped=f"file_{writer}_{i}.py")


def test_concurrent_processes_lose_no_entry(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_record_many, args=(os.fspath(tmp_path), w, 50)) for w in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    raw = json.loads((tmp_path / "current_state.json").read_text())
    names = [entry["objective"] for entry in raw["entries"]]
    assert sorted(names) == sorted(f"w{w}-{i}" for w in range(4) for i in range(50))
    # Each writer's own entries are in its order.
    for w in range(4):
        mine = [n for n in names if n.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(50)]
    md = (tmp_path / "current_state.md").read_text()
    assert md.count("### w") == 200


# Cutting non-ASCII text ----------------------------------------------------------------------


def test_an_oversized_non_ascii_claim_is_cut_by_characters(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    claim = "données vérifiées ✓ 数据已验证 " * 150  # about 3,900 characters, 3x the bytes
    claim = claim[:3990]
    team.record("huge", claim=claim)
    (entry,) = team.entries()
    assert entry.claim is not None and entry.claim.endswith(" …")
    kept = entry.claim.removesuffix(" …")
    assert len(kept) > 100 and claim.startswith(kept)
    assert len(team.render().encode()) <= 2048
    # Every field keeps some of its content, however multi-byte.
    team.record("汉" * 2000, shipped="é" * 4000, claim="✓" * 4000, verified="😀" * 4000)
    (entry,) = team.entries()
    assert len((tmp_path / "current_state.md").read_bytes()) <= 2048 + 1
    for value in (entry.objective, entry.shipped, entry.claim, entry.verified):
        assert value and len(value.removesuffix(" …")) > 10, value


def test_the_audit_log_keeps_the_whole_entry_when_the_document_cuts_it(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    claim = "ü" * 3000
    team.record("big", claim=claim, verdict="fail")
    (line,) = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(line)["claim"] == claim
    assert team.entries()[0].claim != claim


def test_text_that_is_not_unicode_is_refused(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    with pytest.raises(InvalidInputError, match="claim is not valid Unicode"):
        team.record("x", claim="ok \ud800")
    assert not (tmp_path / "current_state.json").exists()


def test_an_entry_with_many_flags_keeps_the_first_and_counts_the_rest(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path, soft_cap_bytes=256)
    flags = [f"flag {i}: claim and verdict disagree on item {i}" for i in range(60)]
    team.record("review", claim="all good", verdict="fail", divergences=flags)
    md = (tmp_path / "current_state.md").read_text()
    assert len(md.encode()) <= 256 + 1
    assert "- DIVERGENCE: producer claimed success" in md
    assert re.search(r"- DIVERGENCE: \d+ more in audit\.jsonl$", md.rstrip())
    (line,) = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(line)["divergences"][1:] == flags


@pytest.mark.skipif(sys.platform == "win32", reason="another open file holds flock's lock")
def test_an_async_record_waiting_for_the_file_lock_does_not_block_the_loop(
    tmp_path: Path,
) -> None:
    """Another process holds the state directory's lock: a record awaited through the stack
    waits for it without blocking the event loop, and one cancelled meanwhile leaves no lock."""
    import fcntl

    team = TeamState(state_dir=tmp_path)
    team.record("first", shipped="a.py")
    stack = MemoryStack([team], store=InMemoryStore())
    other = os.open(tmp_path / "current_state.lock", os.O_RDWR)  # another process's open file
    fcntl.flock(other, fcntl.LOCK_EX)
    # Should the loop block after all, the lock still goes in a second and the test ends.
    fallback = threading.Timer(1.0, fcntl.flock, (other, fcntl.LOCK_UN))
    fallback.start()

    async def main() -> object:
        async with stack.arun(thread_id="t") as run:
            handle = run.alayer("team-state")
            cancelled = asyncio.create_task(handle.record("cancelled", shipped="x.py"))
            record = asyncio.create_task(handle.record("second", shipped="b.py"))
            lag = await loop_lag(0.4)  # the lock is held all along
            assert lag < 0.1, f"the loop was blocked for {lag:.3f} s"
            assert not record.done() and not cancelled.done()
            cancelled.cancel()
            fcntl.flock(other, fcntl.LOCK_UN)
            entry = await asyncio.wait_for(record, timeout=5)
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        return entry

    try:
        entry = asyncio.run(main())
    finally:
        fallback.cancel()
        fallback.join()
        os.close(other)
    assert [e.objective for e in team.entries()] == ["first", "second"]
    assert entry == team.entries()[-1]
    team.record("third")  # nothing was left locked
    assert [e.objective for e in team.entries()][-1] == "third"


@pytest.mark.parametrize(
    ("divergences", "named"),
    [("claim and verdict disagree", "str"), (None, "NoneType"), ({"a": "b"}, "dict"), (3, "int")],
)
def test_divergences_that_are_not_a_list_of_strings_are_refused(
    tmp_path: Path, divergences: object, named: str
) -> None:
    # A text would otherwise become one flag per character.
    team = TeamState(state_dir=tmp_path)
    team.record("ok", shipped="a")
    before = (tmp_path / "current_state.md").read_bytes()
    with pytest.raises(
        InvalidInputError, match=f"divergences must be a list of strings, got {named}"
    ):
        team.record("x", divergences=divergences)  # type: ignore[arg-type]
    assert (tmp_path / "current_state.md").read_bytes() == before
    assert team.record("y", divergences=("one", "two")).divergences == ["one", "two"]


@pytest.mark.parametrize(
    ("artifact", "body"),
    [
        (
            "def parse(): ...\r\n\r\n## summary_for_state_doc\r\nParses all.\r\n",
            "def parse(): ...\r\n",
        ),
        ("def parse(): ...\n\n  ## summary_for_state_doc\nParses all.\n", "def parse(): ...\n"),
        ("x\r\n## summary_for_state_doc:\r\nParses all.\r\n   ## Notes\r\nkept\r\n", None),
    ],
)
def test_a_trailer_with_crlf_line_ends_or_indented_is_extracted(
    artifact: str, body: str | None
) -> None:
    stripped, claim = extract_claim(artifact)
    assert claim == "Parses all."
    assert "summary_for_state_doc" not in stripped
    if body is not None:
        assert stripped == body
    else:
        assert stripped == "x\r\n   ## Notes\r\nkept\r\n"


def test_prepend_refuses_a_prompt_that_is_not_text(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    for state in ("empty", "recorded"):
        with pytest.raises(InvalidInputError, match="prompt must be a string, got NoneType"):
            team.prepend(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="prompt must be a string, got bytes"):
            team.prepend(b"next")  # type: ignore[arg-type]
        if state == "empty":
            team.record("parse config", shipped="config.py")
    assert team.prepend("next").endswith("\n\nnext")


@pytest.mark.parametrize("cap", [64, 65, 90, 120])
def test_an_entry_with_every_field_long_fits_a_small_cap(tmp_path: Path, cap: int) -> None:
    # Cut to one character each, its four lines and a flag still pass a cap this small.
    team = TeamState(state_dir=tmp_path, soft_cap_bytes=cap)
    long = "\U0003ff8c" * 50 + " श৴৪ौक़ " * 40
    team.record(
        "parse " * 30,
        shipped=long,
        claim=long,
        verified=long,
        verdict="fail",
        divergences=[long, long, long],
    )
    document = (tmp_path / "current_state.md").read_bytes()
    assert len(document) <= cap + 1  # and its final line break
    assert document.startswith(b"### parse")
    audited = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert audited["claim"] == long.strip() and len(audited["divergences"]) == 4


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"objective": 5}, "objective"),
        ({"objective": None}, "objective"),
        ({"objective": "a", "divergences": "xyz"}, "divergences"),
        ({"objective": "a", "divergences": [1]}, "divergences"),
        ({"objective": "a", "claim": 7}, "claim"),
        ({"objective": "a", "verdict": "maybe"}, "verdict"),
        ({"objective": "a", "at": 3}, "at"),
    ],
)
def test_a_state_file_with_a_field_of_the_wrong_type_is_moved_aside(
    tmp_path: Path, caplog, entry: dict, field: str
) -> None:
    # Written by hand or by another program: the plan goes on, as with a damaged file.
    (tmp_path / "current_state.json").write_text(json.dumps({"entries": [entry]}))
    team = TeamState(state_dir=tmp_path)
    assert team.prepend("next") == "next"
    assert f"an entry's {field} is not what record writes" in caplog.text
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("current_state.json.corrupt-")]
    assert json.loads(aside.read_text()) == {"entries": [entry]}
    stack = MemoryStack([TeamState(state_dir=tmp_path)], store=InMemoryStore())
    team.record("two", shipped="b")
    with stack.run(thread_id="t") as run:
        assert "### two" in run.prepare([])[0]["content"]


def test_two_damaged_files_in_one_second_are_both_kept_aside(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    for damaged in ("{not json", "[1, 2"):
        (tmp_path / "current_state.json").write_text(damaged)
        assert team.entries() == []
    aside = sorted(
        p for p in tmp_path.iterdir() if p.name.startswith("current_state.json.corrupt-")
    )
    assert [p.read_text() for p in aside] == ["{not json", "[1, 2"]


def test_a_rewrite_in_the_same_timestamp_tick_shows_in_the_next_prompt(tmp_path: Path) -> None:
    """Another process rewrites the state with a document of the same size, within the file
    system's timestamp granularity (a second on many): the file may come back with the same
    inode number (freed by the rename), size and mtime, yet the next prompt shows the new
    document, never the one read before."""
    writer, reader = TeamState(state_dir=tmp_path), TeamState(state_dir=tmp_path)
    stack = MemoryStack([reader], store=InMemoryStore())
    path = tmp_path / "current_state.json"
    tick = (time.time_ns() // 1_000_000_000) * 1_000_000_000  # a 1-second file system's mtime
    writer.record("objective A", shipped="x1", verified="ok", verdict="pass")
    os.utime(path, ns=(tick, tick))
    with stack.run() as run:
        assert "objective A" in run.prepare([])[0]["content"]
    writer.clear()
    writer.record("objective C", shipped="x1", verified="ok", verdict="pass")
    os.utime(path, ns=(tick, tick))
    with stack.run() as run:
        assert "objective C" in run.prepare([])[0]["content"]


# Leader-reflect's write-back: the next state document, whole -----------------------------


def audit_lines(team: TeamState) -> list[dict[str, object]]:
    if not team.audit_path.exists():
        return []
    return [json.loads(line) for line in team.audit_path.read_text().splitlines()]


def test_the_leader_writes_the_next_document_and_every_replaced_entry_is_audited(
    tmp_path: Path,
) -> None:
    from memstrata.layers.team_state import StateEntry

    team = TeamState(state_dir=tmp_path)
    team.record("parse config", shipped="config.py", verified="3 of 3", verdict="pass")
    team.record("write loader", shipped="loader.py", claim="loads all", verdict="fail")
    first, second = team.entries()
    condensed = StateEntry("parse config and loader", shipped="config.py, loader.py (2 bugs)")
    flagged = StateEntry("next: fix loader", divergences=["loader claim unverified"])
    saved = team.rewrite([condensed, flagged])
    assert [e.objective for e in team.entries()] == [e.objective for e in saved]
    assert [e.objective for e in saved] == ["parse config and loader", "next: fix loader"]
    assert saved[0].at  # stamped now
    text = team.md_path.read_text()
    assert "parse config and loader" in text and "### write loader" not in text
    events = audit_lines(team)
    # record audited the failing claim; the rewrite audited both replaced entries, whole,
    # then the new entry's own flag.
    assert [(e["event"], e["objective"]) for e in events] == [
        ("divergence", "write loader"),
        ("replaced", "parse config"),
        ("replaced", "write loader"),
        ("divergence", "next: fix loader"),
    ]
    assert events[1]["shipped"] == first.shipped and events[2]["claim"] == second.claim


def test_entries_kept_as_they_were_are_neither_audited_nor_flagged_twice(tmp_path: Path) -> None:
    team = TeamState(state_dir=tmp_path)
    team.record("a", shipped="x")
    team.record("b", shipped="y", claim="all done", verdict="fail")
    kept = team.entries()
    before = audit_lines(team)
    assert team.rewrite(kept) == kept
    assert team.entries() == kept
    assert audit_lines(team) == before
    assert kept[1].divergences == ["producer claimed success; QC verdict is fail"]


def test_a_bad_rewrite_writes_nothing_and_names_what_was_wrong(tmp_path: Path) -> None:
    from memstrata.layers.team_state import StateEntry

    team = TeamState(state_dir=tmp_path)
    team.record("a", shipped="x")
    document = team.md_path.read_text()
    bad: list[tuple[object, str]] = [
        ("a text", "entries must be a list of StateEntry, got str"),
        ([{"objective": "a"}], r"entries\[0\] must be a StateEntry, got dict"),
        ([StateEntry("ok"), StateEntry("")], "objective is empty"),
        ([StateEntry("ok", verdict="maybe")], "verdict must be"),  # type: ignore[arg-type]
        ([StateEntry("ok", shipped="x" * 4001)], "shipped is 4,001 characters"),
        ([StateEntry("ok", divergences="one flag")], "divergences must be a list"),  # type: ignore[arg-type]
        ([StateEntry("ok")] * 1001, "entries holds more than 1000"),
    ]
    for entries, message in bad:
        with pytest.raises(InvalidInputError, match=message):
            team.rewrite(entries)  # type: ignore[arg-type]
    assert team.md_path.read_text() == document
    assert audit_lines(team) == []


def test_a_rewrite_past_the_soft_cap_keeps_the_newest_and_audits_the_rest_of_the_prior(
    tmp_path: Path,
) -> None:
    from memstrata.layers.team_state import StateEntry

    team = TeamState(state_dir=tmp_path, soft_cap_bytes=300)
    team.record("old", shipped="a")
    saved = team.rewrite([StateEntry(f"step {i}", shipped="s" * 60) for i in range(10)])
    assert len(saved) == 10
    assert [e.objective for e in team.entries()][-1] == "step 9"
    assert len(team.md_path.read_bytes()) <= 300 + 1
    assert [e["objective"] for e in audit_lines(team)] == ["old"]


def test_rewriting_an_entry_the_soft_cap_cut_leaves_it_and_the_audit_log_as_they_were(
    tmp_path: Path,
) -> None:
    # The cap cut the stored flag; the rewrite took the cut flag for a missing one, added the
    # automatic flag again and audited the entry as replaced and as a new divergence, on every
    # rewrite.
    team = TeamState(state_dir=tmp_path, soft_cap_bytes=200)
    team.record("parse " * 20, shipped="x " * 40, claim="all done " * 10, verdict="fail")
    document, before = team.md_path.read_text(), audit_lines(team)
    for _ in range(3):
        kept = team.entries()
        assert team.rewrite(kept) == kept
    assert team.md_path.read_text() == document
    assert audit_lines(team) == before


def test_equal_entries_replaced_by_one_are_each_audited(tmp_path: Path) -> None:
    import dataclasses

    team = TeamState(state_dir=tmp_path)
    first = team.record("step", shipped="x")
    team.rewrite([first, dataclasses.replace(first)])  # as two records in one second give
    team.rewrite([first])
    assert [e["event"] for e in audit_lines(team)] == ["replaced"]
    assert team.entries() == [first]


def test_a_long_rewrite_renders_each_entry_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each entry dropped for the soft cap rendered all the others again: 1,000 entries of
    # 4,000 characters took two minutes, holding the state directory's lock.
    from memstrata.layers.team_state import StateEntry

    renders = 0
    real = StateEntry.render

    def counted(self: StateEntry) -> str:
        nonlocal renders
        renders += 1
        return real(self)

    monkeypatch.setattr(StateEntry, "render", counted)
    team = TeamState(state_dir=tmp_path)
    entries = [StateEntry(f"step {i}", shipped="s" * 400) for i in range(300)]
    saved = team.rewrite(entries)
    assert len(saved) == 300 and team.entries()[-1].objective == "step 299"
    assert renders < 4 * len(entries), renders
