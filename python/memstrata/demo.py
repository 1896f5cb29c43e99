"""``make demo``: a scripted agent conversation on the embedded SQLite default.

The model's side is recorded (assistant messages and tool calls as data, in
``demo_conversation.json``), exactly as a server would feed memstrata, so no LLM is needed. Each
turn prints what the model would see: the system prompt, the ``<working_memory>`` block that
``run.prepare`` injects, the conversation (older tool results pruned to placeholders), and
token counts. The conversation is split across two processes: the second starts from what the
first left in the SQLite file, showing that the working memory survives a restart.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from memstrata import (
    MemoryStack,
    SharedMemory,
    WorkingMemory,
    count_tokens,
    estimate_messages,
    estimate_tokens,
    prune_sliding_window,
)
from memstrata._console import escape_what_output_cannot_encode
from memstrata.demos import agent_mind as mind_demo
from memstrata.demos import context as context_demo
from memstrata.exceptions import MemstrataError
from memstrata.layers import memory_keys
from memstrata.stores import SQLiteStore

THREAD = "demo-release-thread"
DEFAULT_DB = Path("demo-data") / "memstrata-demo.db"
RULE = "─" * 78

# What the release assistant's working memory may hold; updates are checked on the merged state.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {"type": "object", "additionalProperties": {"type": "string"}},
        "release": {
            "type": "object",
            "properties": {
                "checklist": {
                    "type": "object",
                    "additionalProperties": {
                        "enum": ["pending", "passed", "done", "scheduled", "blocked"]
                    },
                },
            },
        },
        "blockers": {"type": "array", "items": {"type": "string"}},
    },
}


def load_script() -> dict[str, Any]:
    text = resources.files("memstrata").joinpath("demo_conversation.json").read_text("utf-8")
    script: dict[str, Any] = json.loads(text)
    return script


def tool_result_text(spec: dict[str, Any]) -> str:
    """Expands a recorded tool result into the long payload a real tool would return."""
    line: str = spec["line"]
    return "\n".join(
        line.format(n=n, rows=(n * 7919) % 10_000) for n in range(1, spec["content_lines"] + 1)
    )


def show(title: str, text: str, *, width: int = 78, max_lines: int = 14) -> None:
    print(f"  ┌ {title}")
    lines = text.splitlines() or [""]
    for line in lines[:max_lines]:
        print("  │ " + (line if len(line) <= width else line[: width - 2] + " …"))
    if len(lines) > max_lines:
        print(f"  │ … {len(lines) - max_lines} more lines")
    print("  └")


def make_stack(store: SQLiteStore) -> MemoryStack:
    return MemoryStack([WorkingMemory(schema=SCHEMA, budget=(200, 1500))], store=store)


def run_turns(store: SQLiteStore, script: dict[str, Any], turns: range) -> None:
    """One ``stack.run`` per turn, as an agent server does it."""
    stack = make_stack(store)
    history: list[dict[str, Any]] = []
    for index in turns:
        turn = script["turns"][index]
        with stack.run(thread_id=THREAD) as run:
            memory = run.layer("working-memory")
            history.append({"role": "user", "content": turn["user"]})
            history, pruned = prune_sliding_window(history, keep_recent=1)
            prompt = run.prepare([{"role": "system", "content": script["system"]}, *history])

            print(RULE)
            print(f"Turn {index + 1}: what the model sees ({len(prompt)} messages)")
            if memory.render():
                print(f"  working memory v{memory.version}, loaded from {store.path}")
            elif not history[:-1]:
                print("  working memory is empty: a new conversation")
            for message in prompt[: len(prompt) - len(history)]:
                show(message["role"], message["content"])
            for message in history[-3:]:
                content = message.get("content") or json.dumps(message.get("tool_calls"))
                show(message["role"], content, max_lines=3)
            block = memory.render()
            print(
                f"  tokens: prompt ≈ {estimate_messages(prompt)} (native estimate); working-memory"
                f" block {estimate_tokens(block)} estimated / {count_tokens(block)} exact (o200k)"
                + (f"; {pruned} old tool result(s) pruned to placeholders" if pruned else "")
            )
            print(f"  tools offered: {[t['function']['name'] for t in run.tool_specs('openai')]}")

            assistant = turn["assistant"]
            history.append(assistant)
            print(f"  model: {assistant['content']}")
            for call in assistant.get("tool_calls", []):
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                if name == "working-memory_update":
                    result = run.call_tool(name, arguments)
                    print(f"  tool call {name}({arguments})\n    -> {json.dumps(result)}")
                elif name == "updateWorkingMemory":
                    print(f"  legacy {name}({arguments}) in the response, applied by observe()")
                else:
                    print(f"  tool call {name}({arguments}), answered by the agent's own tool")
            diagnostics = run.observe(assistant)
            for line in diagnostics:
                print(f"  observe dropped: {line}")
            for result in turn["tool_results"]:
                text = tool_result_text(result)
                history.append(
                    {"role": "tool", "tool_call_id": result["tool_call_id"], "content": text}
                )
                print(
                    f"  tool result {result['tool_call_id']}: {len(text):,} chars,"
                    f" {estimate_tokens(text):,} tokens (estimate), {count_tokens(text):,} exact"
                )
            print(f"  working memory is now v{memory.version}")


def shared_memory_workflow(store: SQLiteStore, script: dict[str, Any]) -> None:
    """Two workflow steps passing a result through SharedMemory (persisted in the same file)."""
    print(RULE)
    print("Workflow: a research step hands its result to a report step through shared memory")
    flow = script["workflow"]
    memory = SharedMemory(store=store, namespace=("shared-memory", "demo-workflow"))
    memory.clear()
    stack = MemoryStack([memory], store=store)
    memory.set(
        key=memory_keys.input(flow["input"]["key"]),
        kind="input",
        value=flow["input"]["value"],
        title=flow["input"]["key"],
    )
    with stack.run(thread_id="research") as run:
        print("  step 'research':")
        for call in flow["research"]["tool_calls"]:
            result = run.call_tool(call["name"], call["arguments"])
            print(f"    {call['name']}({call['arguments']})\n      -> {json.dumps(result)}")
        memory.set(
            key=memory_keys.task("research"),
            kind="task_result",
            value=flow["research"]["result"],
            source="research",
            title="Release risks",
        )
        print("    executor wrote task:research")
    with stack.run(thread_id="report") as run:
        run.layer(memory.name).require([memory_keys.task("research")])
        prompt = run.prepare([{"role": "user", "content": "Write the release risk report."}])
        print("  step 'report': what the model sees")
        show(prompt[0]["role"], prompt[0]["content"], max_lines=20)
        for call in flow["report"]["tool_calls"]:
            result = run.call_tool(call["name"], call["arguments"])
            print(f"    {call['name']}({call['arguments']})\n      -> {json.dumps(result)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memstrata demo", description=__doc__)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite file to use")
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    escape_what_output_cannot_encode()  # run as ``python -m memstrata.demo`` after a restart
    script = load_script()
    half = len(script["turns"]) // 2
    # The file-backed layers' files go in a directory of the demo's own beside the database
    # (agent.db: agent-files/), never into directories a project beside it may use.
    files = args.db.parent / f"{args.db.stem}-files"

    if args.resume:
        print(RULE)
        print(
            "Process restarted: a new interpreter opens the same SQLite file. The chat history"
            " is gone; the working memory is not."
        )
        with SQLiteStore(args.db) as store:
            run_turns(store, script, range(half, len(script["turns"])))
            with make_stack(store).run(thread_id=THREAD) as run:
                final = run.layer("working-memory")
                print(RULE)
                show(f"final working memory (v{final.version})", final.render(), max_lines=40)
            print(RULE)
            print("AgentMind: what one run records, the next run's header shows")
            mind_demo.run_demo(store, files / "mind")
            shared_memory_workflow(store, script)
            print(RULE)
            print(
                "Context engineering: a long tool loop through offloading, the gate and team state"
            )
            context_demo.run_demo(store, files / "context")
        return 0

    try:
        store = SQLiteStore(args.db)
    except (sqlite3.Error, MemstrataError) as exc:  # a directory, a file that is not SQLite
        print(f"memstrata: {exc}", file=sys.stderr)
        return 2
    with store:
        with make_stack(store).run(thread_id=THREAD) as run:
            run.layer("working-memory").clear()  # each demo starts a fresh conversation
        run_turns(store, script, range(half))
    # The second half runs in a new process: nothing but the SQLite file carries the memory over.
    return subprocess.call(
        [sys.executable, "-m", "memstrata.demo", "--db", str(args.db), "--resume"]
    )


if __name__ == "__main__":
    sys.exit(main())
