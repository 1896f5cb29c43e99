"""The context layers in one scripted tool loop (Modulatio): offloading, the gate, team state.

A triage agent works through a long tool loop against a small model window. The model's side is
recorded below as data (``RECORDED_CALLS``: the tool calls it made, in order), so no LLM runs;
the tools are the agent's own, returning deterministic payloads. Each iteration prints what the
model would be sent after ``run.prepare()``, which ends at the context gate:

* large tool results are offloaded to ``<workdir>/tool_calls/threads/<thread hash>/`` and
  replaced by a digest;
* the model reads one back, page by page, with ``read_tool_result``;
* the gate passes, warns once, prunes old tool results, then refuses with a redacted checkpoint
  in ``<workdir>/checkpoints/`` when the recent verbatim pages alone overflow the window;
* the team state (with a producer's claim extracted from its artifact) rides along as a prompt
  item, and the refusal is recorded there for the next sub-objective;
* ``repo_map`` shows the installed package's shape within a small budget.

Run it alone with ``python -m memstrata.demos.context [workdir]``.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import memstrata
from memstrata import (
    ContextGate,
    MemoryStack,
    RecoverableContextError,
    TeamState,
    ToolResults,
    extract_claim,
    repo_map,
)
from memstrata.stores import SQLiteStore, Store

RULE = "─" * 78
WINDOW = 10_000  # a deliberately small model window, so the loop reaches every gate state

# A fake, made-up key the user pasted into the task: it must not reach the checkpoint.
FAKE_API_KEY = "sk-proj-dEm0OnLy4x9Kq2Lw7Rt1Yu5Io8Pa3Sd6Fg"

SYSTEM = "You triage production incidents. Use tools; cite incident ids."
USER = (
    "Triage last month's incidents for the edge fleet. The incidents API takes the key "
    f"{FAKE_API_KEY}; summarise the top causes."
)

# The producer's output for the previous sub-objective, with its state-doc trailer.
PREVIOUS_ARTIFACT = """# Edge fleet inventory

| host | region | version |
|------|--------|---------|
| edge-1 ... edge-12 | eu-west | 4.2.1 |

## summary_for_state_doc
Inventoried 12 edge hosts in eu-west, all on 4.2.1; edge-7 was rebooted twice this month.
"""

# What the model asked for, iteration by iteration (recorded, not generated).
RECORDED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("http_get", {"url": "https://api.example.com/v1/incidents?since=2026-10-01"}),
    ("http_get", {"url": "https://status.example.com/edge"}),
    ("http_get", {"url": "https://logs.example.com/edge-7.log"}),
    ("read_tool_result", {"call_id": "call_1", "max_tokens": 2500}),
    ("read_tool_result", {"call_id": "call_1", "offset": "<next>", "max_tokens": 2500}),
    ("read_tool_result", {"call_id": "call_1", "offset": "<next>", "max_tokens": 1000}),
    ("read_tool_result", {"call_id": "call_1", "offset": "<next>", "max_tokens": 2500}),
    ("read_tool_result", {"call_id": "call_1", "offset": "<next>", "max_tokens": 6000}),
]


def http_get(url: str) -> str:
    """The agent's own HTTP tool, returning deterministic payloads of realistic size."""
    if "incidents" in url:
        causes = ["disk full", "cert expired", "OOM kill", "upstream timeout", "config drift"]
        incidents = [
            {
                "id": f"INC-{4000 + i}",
                "host": f"edge-{1 + (i * 7) % 12}",
                "cause": causes[(i * 3) % 5],
                "minutes": (i * 37) % 240,
                "note": f"paged on-call; mitigated by {'restart' if i % 2 else 'rollback'}",
            }
            for i in range(420)
        ]
        return json.dumps({"incidents": incidents, "total": len(incidents), "page": 1}, indent=1)
    if "status" in url:
        return "edge fleet: 11/12 healthy; edge-7 degraded since 2026-11-20 03:10 UTC"
    return "\n".join(
        f"2026-11-{1 + i // 200:02d}T{(i // 8) % 24:02d}:{i % 60:02d}:00Z edge-7 "
        f"{'WARN disk 9' + str(i % 10) + '% full' if i % 5 == 0 else 'INFO request served 200'}"
        for i in range(4000)
    )


def show(title: str, text: str, *, width: int = 76, max_lines: int = 6) -> None:
    print(f"  ┌ {title}")
    lines = text.splitlines() or [""]
    for line in lines[:max_lines]:
        print("  │ " + (line if len(line) <= width else line[: width - 2] + " …"))
    if len(lines) > max_lines:
        print(f"  │ … {len(lines) - max_lines} more lines")
    print("  └")


def run_demo(store: Store, workdir: Path) -> None:
    """Runs the scripted loop; files go under ``workdir``, layer state into ``store``."""
    workdir.mkdir(parents=True, exist_ok=True)
    team = TeamState(state_dir=workdir / "team")
    team.clear()
    tool_results = ToolResults(tool_calls_dir=workdir / "tool_calls")
    gate = ContextGate(
        model="demo-edge-model", max_input_tokens=WINDOW, checkpoints_dir=workdir / "checkpoints"
    )
    stack = MemoryStack([team, tool_results], store=store, gate=gate)
    # Show the gate's log lines where the reader looks.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("  log %(levelname)s %(name)s: %(message)s"))
    gate_logger = logging.getLogger("memstrata.context_gate")
    saved = gate_logger.level, gate_logger.propagate
    gate_logger.addHandler(handler)
    gate_logger.setLevel(logging.INFO)
    gate_logger.propagate = False
    try:
        _loop(stack, team, gate)
    finally:
        gate_logger.removeHandler(handler)
        gate_logger.setLevel(saved[0])
        gate_logger.propagate = saved[1]
    print(RULE)
    print("Team state for the next sub-objective (current_state.md):")
    show("## Team State", team.render(), max_lines=12)
    print(RULE)
    package = Path(memstrata.__file__).parent
    digest = repo_map(package, max_tokens=700)
    print("repo_map of the installed memstrata package, 700-token budget:")
    show("repo_map", digest, max_lines=16)


def _loop(stack: MemoryStack, team: TeamState, gate: ContextGate) -> None:

    print(RULE)
    print("Context layers: a long tool loop against a 10,000-token window")
    artifact, claim = extract_claim(PREVIOUS_ARTIFACT)
    team.record(
        "inventory the edge fleet",
        shipped="inventory table (12 hosts)",
        claim=claim,
        verified="12 hosts confirmed against the CMDB",
        verdict="pass",
    )
    print(
        f"  previous sub-objective: the producer's trailer was removed from the artifact "
        f"({len(PREVIOUS_ARTIFACT)} -> {len(artifact)} chars) and recorded as its claim"
    )

    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
    ]
    next_offset: int | None = 0
    with stack.run(thread_id="demo-context") as run:
        offload = run.layer("tool-results")
        for iteration, (name, args) in enumerate([*RECORDED_CALLS, ("done", {})], start=1):
            print(RULE)
            try:
                prompt = run.prepare(conversation, call_id=f"iter-{iteration}")
            except RecoverableContextError as exc:
                print(f"Iteration {iteration}: the gate REFUSED the call")
                print(f"  {exc}")
                checkpoint = json.loads(Path(exc.checkpoint_path).read_text("utf-8"))
                print(
                    f"  checkpoint {exc.checkpoint_path} (mode 0600): redaction_policy="
                    f"{checkpoint['redaction_policy']}"
                )
                user = next(m for m in checkpoint["messages"] if m["role"] == "user")
                show("the user's message as checkpointed", textwrap.fill(user["content"], 76))
                tool = [m for m in checkpoint["messages"] if m["role"] == "tool"][-1]
                show("the latest tool result as checkpointed", tool["content"])
                team.record(
                    "triage edge incidents",
                    shipped="nothing: BLOCKED by the context gate",
                    verified=f"decompose required; checkpoint {Path(exc.checkpoint_path).name}",
                )
                break
            tokens = gate.estimate(prompt)
            if any(_pruned(m) for m in prompt):
                state = "pruned, then passed"
            elif tokens >= gate.soft_warn_at_pct * WINDOW:
                state = "soft warning (logged once per run)"
            else:
                state = "pass"
            print(
                f"Iteration {iteration}: what the model sees: {len(prompt)} messages, "
                f"~{tokens:,} tokens padded ({tokens / WINDOW:.0%} of the window); gate: {state}"
            )
            shown = prompt[len(prompt) - min(2, len(conversation) - 1) :]
            if iteration == 1:
                for message in prompt:
                    if message["role"] == "system" and message["content"].startswith("## Team"):
                        show(
                            "system (team state, injected by the TeamState layer)",
                            message["content"],
                        )
            for message in shown:
                body = message.get("content") or json.dumps(message.get("tool_calls"))
                show(message["role"], body, max_lines=4)
            pruned = [m["tool_call_id"] for m in prompt if _pruned(m)]
            if pruned:
                print(f"  pruned to placeholders: {', '.join(pruned)}")
            if name == "done":
                break
            call_id = f"call_{iteration}"
            if args.get("offset") == "<next>":
                args = {**args, "offset": next_offset}
            conversation.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                }
            )
            if name == "read_tool_result":
                result = run.call_tool(name, args)
                next_offset = result.get("next_offset")
                content = result["content"]
                print(
                    f"  model called read_tool_result({json.dumps(args)}) -> chars "
                    f"{result['offset']:,}..{result['offset'] + len(content):,} of "
                    f"{result['total_chars']:,}"
                )
            else:
                raw = http_get(args["url"])
                content = offload.offload(call_id, raw)
                where = "offloaded" if content != raw else "kept inline"
                print(f"  model called {name}({args['url']}) -> {len(raw):,} chars, {where}")
            conversation.append({"role": "tool", "tool_call_id": call_id, "content": content})


def _pruned(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "tool"
        and isinstance(content, str)
        and content.startswith("[summarized: call_id=")
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    workdir = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="memstrata-context-demo-"))
    with SQLiteStore(workdir / "demo.db") as store:
        run_demo(store, workdir)
    print(f"(files under {workdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
