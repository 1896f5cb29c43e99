"""AgentMind demo: an agent learns in one run and starts the next with it in its header.

The model's side is recorded as data (its tool calls, in order), so no LLM is needed. Run 1
records beliefs (one of them twice, deduplicated), a goal and reflections; the draft is flushed
to the store when the run closes. Run 2 starts with the ``--- AGENT MIND ---`` header built from
what run 1 committed, recalls a belief and updates the goal. Run 3 crashes: its belief is kept
flagged ``error: true`` and its goal is dropped, while the goal it completed stays completed.

Call: ``run_demo(store, workdir)`` with any :class:`~memstrata.stores.Store`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memstrata.embedders import HashingEmbedder
from memstrata.layers.mind import AgentMind
from memstrata.stack import MemoryStack
from memstrata.stores import Store

AGENT = "research-tracker"
RULE = "─" * 78
SYSTEM = (
    "You are a research tracker agent. At the start of each task, check your mind for relevant "
    "past context. At the end, record what you learned as beliefs and any performance notes as "
    "reflections."
)

# Each run: the user's task, then the model's recorded tool calls. "$goal" stands for the id
# the model read from an earlier result.
RUNS: list[dict[str, Any]] = [
    {
        "user": "Research the semiconductor supply chain for Q2.",
        "calls": [
            ("mind_recall", {"query": "semiconductor supply chain", "type": "all", "limit": 5}),
            (
                "mind_believe",
                {
                    "content": "TSMC Q2 2026 capacity is fully booked.",
                    "confidence": "high",
                    "tags": ["tsmc", "supply-chain"],
                },
            ),
            (
                "mind_believe",
                {"content": "TSMC's Q2 2026 capacity is fully booked", "confidence": "medium"},
            ),
            (
                "mind_believe",
                {"content": "Advanced packaging lead times are 40 weeks.", "confidence": "high"},
            ),
            (
                "mind_set_goal",
                {
                    "description": "Monitor TSMC Q3 2026 capacity announcements",
                    "priority": "high",
                    "tags": ["tsmc"],
                    "dueBy": "2026-09-30",
                },
            ),
            (
                "mind_reflect",
                {"content": "Always cite the filing date of a capacity figure.", "pin": True},
            ),
            (
                "mind_reflect",
                {
                    "content": "Queries naming specific companies return better results than "
                    "generic ones."
                },
            ),
        ],
    },
    {
        "user": "Any update on TSMC capacity?",
        "calls": [
            ("mind_recall", {"query": "TSMC capacity", "type": "belief"}),
            ("mind_recall", {"query": "TSMC capacity announcements", "type": "goal"}),
            ("mind_update_goal", {"id": "$goal", "progress": "Q3 guidance call scheduled"}),
        ],
    },
    {
        "user": "Wrap up the TSMC tracking.",
        "crash": True,
        "calls": [
            ("mind_complete_goal", {"id": "$goal", "outcome": "Q3 capacity confirmed booked"}),
            ("mind_believe", {"content": "Samsung foundry has spare 3nm capacity."}),
            ("mind_set_goal", {"description": "Compare Samsung and TSMC pricing"}),
        ],
    },
]


def show(title: str, text: str) -> None:
    print(f"  ┌ {title}")
    for line in text.splitlines() or [""]:
        print(f"  │ {line}")
    print("  └")


def run_demo(store: Store, workdir: Path) -> None:
    """Runs the three scripted runs against ``store`` and prints what the model sees.

    Args:
        store: Where the mind lives (the namespace is ``("mind", "research-tracker")``).
        workdir: Unused but kept for the common demo signature; nothing is written there.
    """
    # Every demo starts from an empty mind, however often it ran on this store before.
    for item in store.list(("mind", AGENT), limit=10_000):
        store.delete(item.namespace, item.key)
    stack = MemoryStack([AgentMind(embedder=HashingEmbedder())], store=store)
    ids: dict[str, str] = {}
    for number, script in enumerate(RUNS, start=1):
        print(RULE)
        print(f"AgentMind run {number}: {script['user']}")
        try:
            with stack.run(agent=AGENT) as run:
                messages = run.prepare(
                    [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": script["user"]},
                    ]
                )
                header = [m["content"] for m in messages if m["content"].startswith("--- AGENT")]
                if header:
                    show("header the model sees (built from the store at run start)", header[0])
                else:
                    print("  no header: the mind is empty (cold start)")
                names = [spec["function"]["name"] for spec in run.tool_specs("openai")]
                print(f"  tools offered: {', '.join(names)}")
                for name, arguments in script["calls"]:
                    args = {k: ids.get(v, v) if v == "$goal" else v for k, v in arguments.items()}
                    result = run.call_tool(name, args)
                    if name == "mind_set_goal" and "id" in result and "$goal" not in ids:
                        ids["$goal"] = result["id"]
                    print(f"  {name}({json.dumps(args)})")
                    print(f"    -> {_short(result)}")
                if script.get("crash"):
                    raise RuntimeError("the model call timed out")
        except RuntimeError as exc:
            print(f"  run failed ({exc}): error flush")
        print("  run closed: draft flushed in one transaction")
    print(RULE)
    entries = [item.value for item in store.list(("mind", AGENT), limit=1000)]
    print("What the store holds now:")
    for entry in entries:
        flag = " error" if entry.get("error") else ""
        text = entry.get("content") or entry.get("description")
        state = (
            entry.get("status")
            or entry.get("confidence")
            or ("pinned" if entry.get("pinned") else "")
        )
        print(f"  {entry['type']:<10} {state:<9}{flag:<6} {text}")


def _short(result: dict[str, Any]) -> str:
    if "result" in result and isinstance(result["result"], list):
        hits = result["result"]
        return json.dumps(
            [
                {k: h[k] for k in ("type", "content", "score", "status", "progress") if k in h}
                for h in hits
            ]
        )
    return json.dumps(result)
