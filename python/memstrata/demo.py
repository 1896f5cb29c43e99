"""``make demo``: a scripted agent conversation on the embedded SQLite default.

The model's side is recorded (assistant messages and tool calls as data, in
``demo_conversation.json``), exactly as a server would feed memstrata, so no LLM is needed. Each
turn prints what the model would see: the system prompt with the ``<working_memory>`` block, the
conversation (older tool results pruned to placeholders), and token counts. The conversation is
split across two processes: the second starts from what the first left in the SQLite file,
showing that the working memory survives a restart.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

from memstrata import (
    VectorSet,
    count_tokens,
    deep_merge,
    estimate_messages,
    estimate_tokens,
    hash_embed,
    prune_sliding_window,
)
from memstrata.stores import SQLiteStore

NAMESPACE = ("working-memory", "thread", "demo-release-thread")
DEFAULT_DB = Path("demo-data") / "memstrata-demo.db"
RULE = "─" * 78


def load_script() -> dict[str, Any]:
    text = resources.files("memstrata").joinpath("demo_conversation.json").read_text("utf-8")
    script: dict[str, Any] = json.loads(text)
    return script


def working_memory_block(state: dict[str, Any]) -> str:
    if not state:
        return ""
    body = json.dumps(state, indent=2, ensure_ascii=False)
    return f"<working_memory>\n{body}\n</working_memory>"


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
        print("  │ " + textwrap.shorten(line, width=width, placeholder=" …") if line else "  │")
    if len(lines) > max_lines:
        print(f"  │ … {len(lines) - max_lines} more lines")
    print("  └")


def run_turns(store: SQLiteStore, script: dict[str, Any], turns: range) -> None:
    history: list[dict[str, Any]] = []
    for index in turns:
        turn = script["turns"][index]
        item = store.get(NAMESPACE, "state")
        state = item.value if item else {}
        block = working_memory_block(state)
        system = script["system"] + ("\n\n" + block if block else "")
        history.append({"role": "user", "content": turn["user"]})
        history, pruned = prune_sliding_window(history, keep_recent=1)
        prompt = [{"role": "system", "content": system}, *history]

        print(RULE)
        print(f"Turn {index + 1}: what the model sees ({len(prompt)} messages)")
        if item:
            print(f"  working memory v{item.version}, stored in {store.path}")
        show("system", system)
        for message in history[-3:]:
            content = message.get("content") or json.dumps(message.get("tool_calls"))
            show(message["role"], content, max_lines=3)
        exact = count_tokens(block) if block else 0
        print(
            f"  tokens: prompt ≈ {estimate_messages(prompt)} (native estimate); working-memory"
            f" block {estimate_tokens(block)} estimated / {exact} exact (o200k)"
            + (f"; {pruned} old tool result(s) pruned to placeholders" if pruned else "")
        )

        assistant = turn["assistant"]
        history.append(assistant)
        print(f"  model: {assistant['content']}")
        for call in assistant.get("tool_calls", []):
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            if name != "updateWorkingMemory":
                print(f"  tool call {name}({arguments})")
                continue
            patch = json.loads(arguments)
            updated = store.update(NAMESPACE, "state", lambda cur, p=patch: deep_merge(cur or {}, p))
            stripped = sorted(set(patch) - set(updated.value))
            print(
                f"  tool call updateWorkingMemory: merged {len(patch)} top-level key(s) into"
                f" v{updated.version}" + (f"; stripped unsafe key(s) {stripped}" if stripped else "")
            )
        for result in turn["tool_results"]:
            text = tool_result_text(result)
            history.append({"role": "tool", "tool_call_id": result["tool_call_id"], "content": text})
            print(
                f"  tool result {result['tool_call_id']}: {len(text):,} chars,"
                f" {estimate_tokens(text):,} tokens (estimate), {count_tokens(text):,} exact"
            )


def dedup_beliefs(script: dict[str, Any]) -> None:
    print(RULE)
    print("Belief dedup with the offline hashing embedder (cosine ≥ 0.85 counts as a duplicate)")
    beliefs: list[str] = script["beliefs"]
    vectors = hash_embed(beliefs)
    kept = VectorSet(vectors.shape[1])
    for i, text in enumerate(beliefs):
        duplicate = kept.find_duplicate(vectors[i], 0.85)
        if duplicate is None:
            kept.add([f"belief-{i}"], vectors[i : i + 1])
            print(f"  new      {text}")
        else:
            print(f"  dup of {duplicate[0]} ({duplicate[1]:.2f}): {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memstrata demo", description=__doc__)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite file to use")
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    script = load_script()
    half = len(script["turns"]) // 2

    if args.resume:
        print(RULE)
        print("Process restarted: a new interpreter opens the same SQLite file")
        with SQLiteStore(args.db) as store:
            run_turns(store, script, range(half, len(script["turns"])))
            final = store.get(NAMESPACE, "state")
        print(RULE)
        assert final is not None
        show(f"final working memory (v{final.version})", json.dumps(final.value, indent=2))
        dedup_beliefs(script)
        return 0

    with SQLiteStore(args.db) as store:
        store.delete(NAMESPACE, "state")  # each demo starts a fresh conversation
        run_turns(store, script, range(half))
    # The second half runs in a new process: nothing but the SQLite file carries the memory over.
    return subprocess.call([sys.executable, "-m", "memstrata.demo", "--db", str(args.db), "--resume"])


if __name__ == "__main__":
    sys.exit(main())
