"""SharedMemory tools over 10k entries, against a plain-Python dict implementation of NodeTool's
AgentMemory (what NodeTool's own code does: a Map, filter on every call, serialise each value to
size it) in the same run."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from benchkit import compare

from memstrata import MemoryStack
from memstrata.layers import SharedMemory
from memstrata.stores import InMemoryStore

KINDS = ("task_result", "step_result", "input", "shared")


def entries(n: int = 10_000) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        kind = KINDS[i % 4]
        prefix = {
            "task_result": "task",
            "step_result": "step",
            "input": "input",
            "shared": "shared",
        }
        out.append(
            {
                "key": f"{prefix[kind]}:{i:05d}",
                "kind": kind,
                "value": {"summary": f"result {i}", "items": list(range(i % 7)), "ok": True},
                "source": f"agent{i % 13}",
                "title": f"Entry {i}",
                "createdAt": 1_700_000_000_000 + i,
            }
        )
    return out


class PlainMemory:
    """NodeTool's AgentMemory as a Python developer would port it."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def set(self, entry: dict[str, Any]) -> None:
        old = self.entries.get(entry["key"])
        self.entries[entry["key"]] = {
            **entry,
            "createdAt": old["createdAt"] if old else entry["createdAt"],
        }

    def memory_list(self, args: dict[str, Any]) -> dict[str, Any]:
        kinds = args.get("kind")
        kinds = {kinds} if isinstance(kinds, str) else set(kinds) if kinds else None
        prefix, sources = args.get("key_prefix"), args.get("sources")
        matches = [
            e
            for e in self.entries.values()
            if (kinds is None or e["kind"] in kinds)
            and (prefix is None or e["key"].startswith(prefix))
            and (sources is None or e.get("source") in sources)
        ]
        matches.sort(key=lambda e: e["createdAt"])
        newest = matches[-200:]
        return {
            "total": len(matches),
            "returned": len(newest),
            "truncated": len(matches) > 200,
            "entries": [
                {
                    "key": e["key"],
                    "kind": e["kind"],
                    "title": e.get("title"),
                    "source": e.get("source"),
                    "valueBytes": len(
                        json.dumps(e["value"], separators=(",", ":"), ensure_ascii=False).encode()
                    ),
                    "createdAt": datetime.fromtimestamp(e["createdAt"] / 1000, tz=timezone.utc)
                    .isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
                }
                for e in newest
            ],
        }

    def memory_read(self, args: dict[str, Any]) -> dict[str, Any]:
        found, missing = {}, []
        for key in args["keys"]:
            if key in self.entries:
                found[key] = self.entries[key]
            else:
                missing.append(key)
        return {"entries": found, "missing": missing}


def setup() -> tuple[Any, PlainMemory]:
    memory = SharedMemory()
    plain = PlainMemory()
    for e in entries():
        memory.set(
            key=e["key"], kind=e["kind"], value=e["value"], source=e["source"], title=e["title"]
        )
        plain.set(e)
    run = MemoryStack([memory], store=InMemoryStore()).run(thread_id="bench").open()
    return run, plain


FILTERS = [
    ("kind", {"kind": "task_result"}),
    ("kind + sources", {"kind": ["task_result", "shared"], "sources": ["agent1", "agent2"]}),
    ("key_prefix", {"key_prefix": "step:0"}),
]


def test_memory_list_with_filters(benchmark: Any) -> None:
    run, plain = setup()
    for _label, args in FILTERS:
        ours_result = run.call_tool("memory_list", args)
        plain_result = plain.memory_list(args)
        assert ours_result["total"] == plain_result["total"] > 0
        assert [e["key"] for e in ours_result["entries"]] == [
            e["key"] for e in plain_result["entries"]
        ]
        assert [e["valueBytes"] for e in ours_result["entries"]] == [
            e["valueBytes"] for e in plain_result["entries"]
        ]
    args_all = FILTERS[0][1]
    compare(
        benchmark,
        "memory_list via call_tool, 10k entries, filter by kind",
        lambda: run.call_tool("memory_list", args_all),
        {"plain-Python dict": lambda: plain.memory_list(args_all)},
        target="report",
    )


def test_memory_list_prefix_and_sources(benchmark: Any) -> None:
    run, plain = setup()
    args = {"key_prefix": "step:0", "sources": ["agent1", "agent2", "agent3"]}
    assert run.call_tool("memory_list", args)["total"] == plain.memory_list(args)["total"]
    compare(
        benchmark,
        "memory_list via call_tool, 10k entries, key_prefix + sources",
        lambda: run.call_tool("memory_list", args),
        {"plain-Python dict": lambda: plain.memory_list(args)},
        target="report",
    )


def test_memory_read_ten_keys(benchmark: Any) -> None:
    run, plain = setup()
    args = {"keys": [f"task:{i:05d}" for i in range(0, 40, 4)]}
    assert run.call_tool("memory_read", args)["missing"] == []
    memory = run.layer("shared-memory").memory
    compare(
        benchmark,
        "memory_read of 10 keys (the tool handler), 10k entries",
        lambda: memory.tool_read(args),
        {"plain-Python dict": lambda: plain.memory_read(args)},
        target="report",
    )


def test_memory_read_through_call_tool(benchmark: Any) -> None:
    """The same read as the model makes it: JSON arguments parsed, validated and dispatched."""
    run, plain = setup()
    raw = json.dumps({"keys": [f"task:{i:05d}" for i in range(0, 40, 4)]})
    compare(
        benchmark,
        "memory_read of 10 keys via call_tool(JSON text), 10k entries",
        lambda: run.call_tool("memory_read", raw),
        {"plain-Python dict + json.loads": lambda: plain.memory_read(json.loads(raw))},
        target="report",
    )
