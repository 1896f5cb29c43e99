"""SharedMemory (seed 004): the API, the three tools, the prompt, isolation and persistence."""

from __future__ import annotations

import json
import logging
import pathlib
import re
from typing import Any

import pytest

from memstrata import MemoryStack, SQLiteStore
from memstrata.exceptions import InvalidInputError, NonFiniteNumberError, UnsupportedTypeError
from memstrata.layers import SharedMemory, memory_keys
from memstrata.stores import InMemoryStore

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_key_helpers() -> None:
    assert memory_keys.step("s1") == "step:s1"
    assert memory_keys.task("research") == "task:research"
    assert memory_keys.input("url") == "input:url"
    assert memory_keys.shared("top") == "shared:top"


def test_set_overwrites_the_value_but_keeps_created_at() -> None:
    memory = SharedMemory()
    first = memory.set(key="task:t1", kind="task_result", value={"v": 1}, title="T1")
    second = memory.set(key="task:t1", kind="task_result", value={"v": 2})
    assert second.created_at == first.created_at
    assert memory.get_value("task:t1") == {"v": 2}
    assert memory.has("task:t1") and not memory.has("task:t2")
    assert memory.get("task:t2") is None and memory.get_value("task:t2") is None
    assert [e.key for e in memory.snapshot()] == ["task:t1"]


@pytest.fixture
def populated() -> SharedMemory:
    memory = SharedMemory()
    memory.set(key="input:topic", kind="input", value="chips", title="topic")
    memory.set(key="step:s1", kind="step_result", value=[1], source="research")
    memory.set(key="task:research", kind="task_result", value={"f": 1}, source="research")
    memory.set(key="step:s2", kind="step_result", value=[2], source="summary")
    memory.set(key="shared:top", kind="shared", value="url", source="agent")
    return memory


def keys(entries: list[Any]) -> list[str]:
    return [e.key for e in entries]


def test_list_filters(populated: SharedMemory) -> None:
    assert keys(populated.list()) == [
        "input:topic",
        "step:s1",
        "task:research",
        "step:s2",
        "shared:top",
    ]
    assert keys(populated.list(kind="step_result")) == ["step:s1", "step:s2"]
    assert keys(populated.list(kind=["task_result", "input"])) == ["input:topic", "task:research"]
    assert keys(populated.list(keys=["step:s2", "nope", "input:topic"])) == [
        "input:topic",
        "step:s2",
    ]
    assert keys(populated.list(key_prefix="step:")) == ["step:s1", "step:s2"]
    assert keys(populated.list(sources=["research"])) == ["step:s1", "task:research"]
    assert keys(populated.list(kind="step_result", sources=["summary"])) == ["step:s2"]
    with pytest.raises(InvalidInputError, match="unknown kind 'result'"):
        populated.list(kind="result")


def test_overwrite_with_another_kind_keeps_order(populated: SharedMemory) -> None:
    populated.set(key="step:s1", kind="shared", value="moved")
    assert keys(populated.list(kind="shared")) == ["step:s1", "shared:top"]
    assert keys(populated.list(kind="step_result")) == ["step:s2"]


def test_clear_selectively(populated: SharedMemory) -> None:
    assert populated.clear(kind="step_result") == 2
    assert populated.clear(key_prefix="input:") == 1
    assert keys(populated.list()) == ["task:research", "shared:top"]
    assert populated.clear() == 2
    assert len(populated) == 0


def test_listeners_see_writes_and_cannot_break_them(caplog: pytest.LogCaptureFixture) -> None:
    memory = SharedMemory()
    seen: list[str] = []
    unsubscribe = memory.subscribe(lambda entry: seen.append(entry.key))

    def broken(entry: Any) -> None:
        raise RuntimeError("panel crashed")

    memory.subscribe(broken)
    with caplog.at_level(logging.ERROR):
        memory.set(key="step:a", kind="step_result", value=1)
    assert seen == ["step:a"] and memory.has("step:a")
    assert "listener failed" in caplog.text
    unsubscribe()
    memory.set(key="step:b", kind="step_result", value=2)
    assert seen == ["step:a"]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"key": "", "kind": "shared", "value": 1}, InvalidInputError, "non-empty"),
        ({"key": "k", "kind": "result", "value": 1}, InvalidInputError, "kind must be one of"),
        ({"key": "k", "kind": "shared", "value": 1, "title": 5}, InvalidInputError, "title"),
        ({"key": "k", "kind": "shared", "value": {"a": {1, 2}}}, UnsupportedTypeError, "$.a"),
        ({"key": "k", "kind": "shared", "value": [float("nan")]}, NonFiniteNumberError, "$[0]"),
    ],
)
def test_bad_writes_are_refused(kwargs: dict[str, Any], error: type, fragment: str) -> None:
    memory = SharedMemory()
    with pytest.raises(error) as info:
        memory.set(**kwargs)
    assert fragment in str(info.value)
    assert len(memory) == 0


def run_for(memory: SharedMemory) -> Any:
    return MemoryStack([memory], store=InMemoryStore()).run(thread_id="t")


def test_memory_list_tool_returns_metadata_only(populated: SharedMemory) -> None:
    populated.set(key="task:ü", kind="task_result", value={"text": "naïve ✓"}, title="Unicode")
    with run_for(populated) as run:
        result = run.call_tool("memory_list", {"kind": ["task_result"], "sources": None})
        assert result["error"]["code"] == "invalid_arguments"  # sources must be an array
        result = run.call_tool("memory_list", '{"kind": "task_result"}')
    assert (result["total"], result["returned"], result["truncated"]) == (2, 2, False)
    unicode_entry = result["entries"][1]
    assert "value" not in unicode_entry
    assert unicode_entry["valueBytes"] == len(
        json.dumps({"text": "naïve ✓"}, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert ISO.match(unicode_entry["createdAt"]) and unicode_entry["title"] == "Unicode"


def test_memory_list_is_capped_at_the_newest_200() -> None:
    memory = SharedMemory()
    for i in range(250):
        memory.set(key=f"step:{i:03d}", kind="step_result", value=i)
    with run_for(memory) as run:
        result = run.call_tool("memory_list", {})
    assert (result["total"], result["returned"], result["truncated"]) == (250, 200, True)
    assert result["entries"][0]["key"] == "step:050"
    assert result["entries"][-1]["key"] == "step:249"


def test_memory_read_reports_missing_keys(populated: SharedMemory) -> None:
    with run_for(populated) as run:
        result = run.call_tool("memory_read", {"keys": ["task:research", "step:summary"]})
    assert result["missing"] == ["step:summary"]
    entry = result["entries"]["task:research"]
    assert entry["value"] == {"f": 1} and entry["kind"] == "task_result"
    assert entry["source"] == "research" and isinstance(entry["createdAt"], int)


def test_memory_write_publishes_only_under_shared() -> None:
    memory = SharedMemory()
    with run_for(memory) as run:
        ok = run.call_tool(
            "memory_write",
            {"key": "top_source", "value": {"url": "x", "__proto__": {"p": 1}}, "title": "Top"},
        )
        assert ok["ok"] is True and ok["key"] == "shared:top_source" and ok["kind"] == "shared"
        assert ISO.match(ok["createdAt"])
        # A model cannot spoof a task result: whatever it writes lands under shared:.
        spoof = run.call_tool("memory_write", {"key": "task:research", "value": "fake"})
        assert spoof["key"] == "shared:task:research"
        for bad, fragment in [("", "empty"), ("a\nb", "control"), ("x" * 300, "limit is 256")]:
            result = run.call_tool("memory_write", {"key": bad, "value": 1})
            assert fragment in result["error"]["message"]
        assert run.call_tool("memory_write", {"value": 1})["error"]["code"] == "invalid_arguments"
    assert memory.get_value("shared:top_source") == {"url": "x"}
    assert not memory.has("task:research")


def test_prompt_section_and_upstream_hint_never_include_values(populated: SharedMemory) -> None:
    with run_for(populated) as run:
        run.layer("shared-memory").require(["task:research", "step:missing"])
        populated.set(key="task:research", kind="task_result", value="SECRET", title="Findings")
        prompt = run.prepare([{"role": "user", "content": "write the report"}])
    text = prompt[0]["content"]
    assert text.startswith("## Memory Tools (progressive disclosure)")
    assert "# Required upstream memory (call `memory_read` with these keys):" in text
    assert "- task:research — Findings" in text and "- step:missing" in text
    assert "SECRET" not in text


def test_copies_are_isolated_unless_entries_are_copied(populated: SharedMemory) -> None:
    assert len(populated.copy()) == 0
    clone = populated.copy(entries=True)
    assert keys(clone.list()) == keys(populated.list())
    clone.set(key="shared:new", kind="shared", value=1)
    assert not populated.has("shared:new")


def test_persistence_lets_a_workflow_resume(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "workflow.db"
    with SQLiteStore(path) as store:
        memory = SharedMemory(store=store, namespace=("wf", "run-1"))
        memory.set(key="input:q", kind="input", value="chips")
        memory.set(key="task:a", kind="task_result", value={"done": True}, title="A")
        memory.set(key="step:tmp", kind="step_result", value=0)
        memory.clear(key_prefix="step:")
        SharedMemory(store=store, namespace=("wf", "other")).set(key="x", kind="shared", value=1)
    with SQLiteStore(path) as store:
        resumed = SharedMemory(store=store, namespace=("wf", "run-1"))
        assert keys(resumed.list()) == ["input:q", "task:a"]
        assert resumed.get("task:a") is not None and resumed.get("task:a").title == "A"  # type: ignore[union-attr]
        assert resumed.get("task:a").created_at == memory.get("task:a").created_at  # type: ignore[union-attr]


def test_propagation_flow_of_the_seed() -> None:
    """Inputs seeded; a step and its task result written; a downstream step discovers the
    result with memory_list and fetches it with memory_read, as the model would."""
    memory = SharedMemory()
    stack = MemoryStack([memory], store=InMemoryStore())
    memory.set(key=memory_keys.input("topic"), kind="input", value="TSMC capacity", title="topic")

    with stack.run(thread_id="research") as run:
        topic = run.call_tool("memory_read", '{"keys": ["input:topic"]}')
        assert topic["entries"]["input:topic"]["value"] == "TSMC capacity"
        findings = {"findings": ["alpha", "beta"]}
        memory.set(key=memory_keys.step("s1"), kind="step_result", value=findings, source="s1")
        memory.set(
            key=memory_keys.task("research_phase"),
            kind="task_result",
            value=findings,
            source="research_phase",
            title="Research findings",
        )
        run.call_tool("memory_write", {"key": "top_source", "value": "https://example.com"})

    with stack.run(thread_id="report") as run:
        run.layer("shared-memory").require([memory_keys.task("research_phase")])
        prompt = run.prepare([{"role": "user", "content": "Write a report."}])
        assert "- task:research_phase — Research findings" in prompt[0]["content"]
        listed = run.call_tool("memory_list", '{"kind": ["task_result", "shared"]}')
        assert [e["key"] for e in listed["entries"]] == ["task:research_phase", "shared:top_source"]
        read = run.call_tool("memory_read", {"keys": [listed["entries"][0]["key"]]})
        assert read["entries"]["task:research_phase"]["value"] == findings


def test_spawned_runs_share_the_workflow_memory() -> None:
    memory = SharedMemory()
    stack = MemoryStack([memory], store=InMemoryStore())
    with stack.run(thread_id="p") as run, run.spawn(thread_id="c") as child:
        child.call_tool("memory_write", {"key": "from_child", "value": 1})
        assert run.call_tool("memory_read", {"keys": ["shared:from_child"]})["missing"] == []
