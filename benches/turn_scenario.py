"""One realistic agent turn with every layer on, and the same turn written the plain way.

Shared by ``benches/test_turn.py`` (timings, percentiles, the peer ratio) and
``tools/profile_turn.py`` (the profile the README quotes). The state a long-lived agent server
has when a turn arrives:

* WorkingMemory: a structured state under a JSON Schema at the layer's default budget (about
  1,500 tokens of block; the kernel benchmark ``test_merge.py`` keeps the 10k-node state);
* AgentMind: 10,000 entries (7,000 beliefs, 3,000 reflections) with stored vectors;
* a 200-message conversation whose large tool results were offloaded by ToolResults, passed
  through the ContextGate at every ``prepare``;
* SharedMemory: 1,000 entries, written through to the store;
* TeamState: a short team-state document;

all on one SQLite file (or the store passed in: ``benches/test_turn_postgres.py``). The turn:
``stack.run(...)``, ``prepare``, three tool calls as a model sends them (JSON text: a
working-memory update, a ``mind_recall``, a ``memory_write``), ``observe`` of the model's
response, close. Embedding is excluded: the mind's embedder returns
precomputed HashingEmbedder vectors and refuses any text it was not given, so nothing is
embedded inside a timed turn.

The peer (:class:`PlainTurn`) does the same work with LangGraph's ``InMemoryStore`` and plain
Python: the same merge and the same jsonschema-rs validation of the whole state, numpy cosine
and the same composite score over the same 10k vectors, langchain-core's ``trim_messages`` over
the same messages, the same shared-memory reads and writes.
"""

from __future__ import annotations

import itertools
import json
import math
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import jsonschema_rs
import numpy as np
import numpy.typing as npt
from langchain_core.messages import convert_to_messages, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.store.memory import InMemoryStore as LangGraphStore
from mind_data import DIM, NS, corpus, fill_store
from state_data import SCHEMA, count_nodes, make_state, python_merge

from memstrata import (
    AgentMind,
    ContextGate,
    HashingEmbedder,
    MemoryStack,
    SharedMemory,
    SQLiteStore,
    TeamState,
    ToolResults,
    WorkingMemory,
    hash_embed,
)
from memstrata.layers.mind.entries import decode_vector
from memstrata.stores import Store

THREAD, USER, AGENT = "thread-1", "user-42", "bench"
SHARED_NS = ("shared-memory", "workflow")
WINDOW_TOKENS = 400_000
CONVERSATION = 200
WM_PROJECTS = 19  # about 1,400 tokens of block: the default budget is 1,500


def wm_patch(turn: int) -> str:
    """The turn's working-memory update: one project's status and owner, so every state is new
    and of the same size."""
    key = f"p{turn * 7 % WM_PROJECTS:03d}"
    status = "done" if turn % 2 else "doing"
    return json.dumps({"projects": {key: {"status": status, "owner": {"name": f"d{turn:07d}"}}}})


DAY_MS = 86_400_000


class PrecomputedEmbedder:
    """Returns HashingEmbedder vectors computed before the benchmark; any other text is an
    error, so a timed turn provably embeds nothing."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.vectors = dict(zip(texts, hash_embed(list(texts), DIM)))

    @property
    def model(self) -> str:
        return HashingEmbedder(dim=DIM).model  # the stored vectors' space: reused, not redone

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([self.vectors[t] for t in texts])

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed(texts)


def recall_queries(texts: list[str]) -> list[str]:
    """What a model asks its mind about: half resemble stored entries, half are unrelated."""
    rng = np.random.default_rng(5)
    related = [texts[int(i)].split(" note ")[0] for i in rng.integers(0, len(texts), 16)]
    return related + corpus(16, seed=77)


def conversation(tool_results: ToolResults, n: int = CONVERSATION) -> list[dict[str, Any]]:
    """A tool loop's conversation: user asks, assistant calls a tool, a large result comes back
    and is offloaded (stored on disk, replaced by a notice and a digest)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent."}]
    i = 0
    while len(messages) < n:
        call_id = f"call_{i}"
        result = "\n".join(
            f"row {i}.{k}: region eu-{k % 5} latency {k * 7 % 300} ms status ok" for k in range(400)
        )
        messages += [
            {"role": "user", "content": f"Check the latency report {i} and summarise it."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "latency_report", "arguments": f'{{"id": {i}}}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": tool_results.offload(call_id, result),
            },
        ]
        i += 1
    return messages[:n]


def shared_entries(memory: SharedMemory, n: int = 1000) -> None:
    for i in range(n):
        memory.set(
            key=f"step:{i:04d}",
            kind="step_result",
            value={"summary": f"step {i} done", "rows": i % 50, "ok": True},
            source=f"agent{i % 7}",
            title=f"Step {i}",
        )


def model_response(i: int, calls: list[tuple[str, str]]) -> dict[str, Any]:
    """The assistant message that made this turn's tool calls (what ``observe`` sees)."""
    return {
        "role": "assistant",
        "content": f"Working on turn {i}.",
        "tool_calls": [
            {
                "id": f"turn{i}_{k}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for k, (name, arguments) in enumerate(calls)
        ],
    }


class Scenario:
    """The stores, layers and data of one benchmark, built once (not timed)."""

    def __init__(self, workdir: pathlib.Path, *, store: Store | None = None) -> None:
        self.workdir = workdir
        self.store = store if store is not None else SQLiteStore(workdir / "turn.db")
        _, self.mind_texts = fill_store(7_000, 3_000, seed=2, store=self.store)
        self.queries = recall_queries(self.mind_texts)
        self.embedder = PrecomputedEmbedder(self.queries)
        self.state = make_state(WM_PROJECTS)
        assert count_nodes(self.state) == 195
        self.tool_results = ToolResults(tool_calls_dir=workdir / "tool_calls")
        self.messages = conversation(self.tool_results)
        self.team = TeamState(state_dir=workdir / "team")
        self.team.record(
            "inventory", shipped="hosts table", claim="12 hosts", verified="12", verdict="pass"
        )
        self.shared = SharedMemory(store=self.store, namespace=SHARED_NS)
        shared_entries(self.shared)
        self.gate = ContextGate(max_input_tokens=WINDOW_TOKENS, checkpoints_dir=workdir / "ckpt")
        self.working_memory = WorkingMemory(schema=SCHEMA)
        self.mind = AgentMind(embedder=self.embedder, namespace=NS)
        self.stack = MemoryStack(
            [
                self.working_memory,
                self.mind,
                self.tool_results,
                self.shared,
                self.team,
            ],
            store=self.store,
            gate=self.gate,
            total_budget=160_000,
        )
        with self.stack.run(thread_id=THREAD, resource_id=USER, agent=AGENT) as run:
            run.layer("working-memory").update(self.state, mode="replace")
        self.turns = itertools.count()

    def turn(self) -> dict[str, Any]:
        """One agent turn; returns what the three tools answered."""
        i, calls = self.next_turn()
        with self.stack.run(thread_id=THREAD, resource_id=USER, agent=AGENT) as run:
            prepared = run.prepare(self.messages)
            results = [run.call_tool(name, arguments) for name, arguments in calls]
            run.observe(model_response(i, calls))
        return {"prepared": prepared, "results": results}

    async def aturn(self) -> dict[str, Any]:
        """The same turn through the async forms, as an asyncio agent server runs it."""
        i, calls = self.next_turn()
        async with self.stack.arun(thread_id=THREAD, resource_id=USER, agent=AGENT) as run:
            prepared = await run.aprepare(self.messages)
            results = [await run.acall_tool(name, arguments) for name, arguments in calls]
            await run.aobserve(model_response(i, calls))
        return {"prepared": prepared, "results": results}

    def next_turn(self) -> tuple[int, list[tuple[str, str]]]:
        """The next turn's number and tool calls; the conversation grows by its question."""
        i = next(self.turns)
        calls = [
            ("working-memory/update", wm_patch(i)),
            ("mind_recall", json.dumps({"query": self.queries[i % len(self.queries)]})),
            (
                "memory_write",
                json.dumps({"key": f"note-{i % 50}", "value": {"turn": i}, "title": "note"}),
            ),
        ]
        self.messages = [
            *self.messages[-(CONVERSATION - 1) :],
            {"role": "user", "content": f"Turn {i}: what next?"},
        ]
        return i, calls

    def close(self) -> None:
        self.stack.close()
        self.store.close()


class PlainTurn:
    """The same turn as a developer writes it with LangGraph's InMemoryStore and plain Python.

    Per turn: read the working-memory state from the store, merge the patch, validate the whole
    state with the same jsonschema-rs validator, render it and put it back; read the team-state
    document; build the mind header from the entries in memory; score the query against the
    same 10k unit vectors with numpy (the same composite score, threshold and top 5); trim the
    conversation with langchain-core's ``trim_messages``; write one shared-memory entry. The
    numpy matrix and the entries are kept between turns (nothing else writes this process's
    store), as memstrata keeps its index.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.store = LangGraphStore()
        self.validator = jsonschema_rs.validator_for(SCHEMA)
        self.store.put(("wm", THREAD), "state", scenario.state)
        mind_items = scenario.store.list(NS, limit=100_000)
        for item in mind_items:
            self.store.put(("mind", AGENT), item.key, item.value)
        for entry in scenario.shared.snapshot():
            self.store.put(("shared",), entry.key, {"kind": entry.kind, "value": entry.value})
        self.team_md = scenario.team.md_path
        self.now = int(time.time() * 1000)
        entries = [item.value for item in mind_items if item.value["type"] != "goal"]
        self.entries = entries
        self.ids = [e["id"] for e in entries]
        matrix = np.stack([decode_vector(e["embedding"]) for e in entries]).astype(np.float32)
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        confidence = {"low": 0.3, "medium": 0.6, "high": 1.0}
        self.bonus = np.array(
            [
                0.2 * math.exp(-max(0.0, (self.now - e["updatedAt"]) / DAY_MS) / 30)
                + 0.2 * confidence["low" if e.get("error") else e.get("confidence", "medium")]
                for e in entries
            ]
        )
        self.live = np.array(
            [e.get("expiresAt") is None or e["expiresAt"] > self.now for e in entries]
        )
        self.embedder = scenario.embedder
        self.queries = scenario.queries
        self.messages = convert_to_messages(scenario.messages)
        self.turns = itertools.count()

    def header(self) -> str:
        rank = {"high": 0, "medium": 1}
        beliefs = sorted(
            (
                e
                for e in self.entries
                if e["type"] == "belief"
                and e["confidence"] in rank
                and not e.get("error")
                and (e.get("expiresAt") is None or e["expiresAt"] > self.now)
            ),
            key=lambda e: (rank[e["confidence"]], -e["updatedAt"]),
        )
        lines, left = ["--- AGENT MIND ---", "## Beliefs"], 300
        for e in beliefs:
            line = f"- {e['content']} ({e['confidence']} confidence)"
            cost = len(line) // 4
            if cost > left:
                break
            lines.append(line)
            left -= cost
        return "\n".join([*lines, "---"])

    def recall(self, query: str) -> list[str]:
        vector = self.embedder.embed([query])[0]
        scores = 0.6 * (self.matrix @ (vector / np.linalg.norm(vector))) + self.bonus
        candidates = np.flatnonzero(self.live & (scores >= 0.35))
        top = candidates[np.argsort(-scores[candidates], kind="stable")[:5]]
        return [self.ids[i] for i in top]

    def turn(self) -> dict[str, Any]:
        i = next(self.turns)
        # working-memory/update: read, merge, validate the whole state, write back.
        patch = json.loads(wm_patch(i))
        item = self.store.get(("wm", THREAD), "state")
        assert item is not None
        state = python_merge(item.value, patch)
        errors = [e.message for e in self.validator.iter_errors(state)]
        if not errors:
            self.store.put(("wm", THREAD), "state", state)
        # prepare: the blocks, then the conversation trimmed to the window.
        blocks = "\n\n".join(
            [
                self.header(),
                f"<working_memory>\n{json.dumps(state, indent=2)}\n</working_memory>",
                self.team_md.read_text(),
            ]
        )
        self.messages = [
            *self.messages[-(CONVERSATION - 1) :],
            *convert_to_messages([{"role": "user", "content": f"Turn {i}: what next?"}]),
        ]
        prompt = trim_messages(
            [*convert_to_messages([{"role": "system", "content": blocks}]), *self.messages],
            max_tokens=WINDOW_TOKENS,
            token_counter=count_tokens_approximately,
            strategy="last",
            include_system=True,
        )
        # mind_recall and memory_write, arguments as JSON text like a model sends them.
        query = json.loads(json.dumps({"query": self.queries[i % len(self.queries)]}))["query"]
        hits = self.recall(query)
        note = json.loads(json.dumps({"key": f"note-{i % 50}", "value": {"turn": i}}))
        self.store.put(
            ("shared",), f"shared:{note['key']}", {"kind": "shared", "value": note["value"]}
        )
        return {"prompt": prompt, "hits": hits, "errors": errors}
