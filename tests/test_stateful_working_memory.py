"""A model-based test of working memory: long random sequences of runs, tool calls, closes,
store reopens and ``forget``, checked after every step against a plain-Python model.

The stack holds both flavours at once: noetic's (a JSON Schema, deep merge, ``working-memory/
update``, ``/replace`` and the legacy ``updateWorkingMemory``) and VoltAgent's (markdown from a
template, ``get_``/``update_``/``clear_notes_memory`` with append and replace), one scoped per
conversation and the other per user, then the other way round. The model is
``reference_merge.deep_merge`` plus the scope rules of docs/working-memory.md. After each step:

- every state the store holds is the model's, and nothing else is stored;
- every open run holds the state the model says it read or wrote last;
- a refused call changed nothing stored, and answered a documented error code;
- no user's prompt or tool result shows another user's text.

``STATEFUL_EXAMPLES=2000 pytest tests/test_stateful_working_memory.py`` runs long.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from reference_merge import deep_merge, json_equal, strip_unsafe_keys
from stateful_common import (
    MAX_OPEN,
    OUTCOMES,
    PICK,
    SERVER,
    SERVERS,
    SETTINGS,
    THREADS,
    USERS,
    has_runs,
    json_values,
    marker,
    note_outcome,
    short_text,
)
from store_checks import empty_postgres_tables

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.stores import PostgresStore

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "profile": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TEMPLATE = "# Notes\n- Name:\n"
BUDGET = (0, 1_500)
MAX_STATE_BYTES = 6_000
# A state whose block is at most this many UTF-8 bytes fits the budget however the text is
# tokenised (a token is at least one byte), so such a write must be accepted.
SURELY_FITS = BUDGET[1] - 100

ERROR_CODES = {"invalid_arguments", "schema_violation", "budget_exceeded", "limit_exceeded"}


def schema_problems(state: dict[str, Any]) -> bool:
    """Whether ``state`` fails SCHEMA, decided by hand from the schema above."""

    def is_int(v: Any) -> bool:
        return (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer()
        )

    if "name" in state and not isinstance(state["name"], str):
        return True
    if "age" in state and not (is_int(state["age"]) and state["age"] >= 0):
        return True
    if "tags" in state and not (
        isinstance(state["tags"], list) and all(isinstance(t, str) for t in state["tags"])
    ):
        return True
    if "profile" in state:
        profile = state["profile"]
        if not isinstance(profile, dict):
            return True
        if "city" in profile and not isinstance(profile["city"], str):
            return True
    return False


def json_size(state: Any) -> int:
    """The UTF-8 bytes of the state as the block shows it (before any escaping, which only
    lengthens it)."""
    if isinstance(state, str):
        return len(state.encode())
    return len(json.dumps(state, indent=2, ensure_ascii=False).encode()) if state else 0


@dataclass
class OpenRun:
    user: str
    thread: str
    run: Any
    # Per layer: the state the run holds, and the generation of the stored record it read.
    held: dict[str, tuple[Any, int]] = field(default_factory=dict)
    # Legacy calls each path applied and the other has not seen yet, by their arguments: a
    # call seen by both paths is applied once (docs/working-memory.md, legacy calls).
    legacy: dict[str, Counter[str]] = field(
        default_factory=lambda: {"observe": Counter(), "call_tool": Counter()}
    )

    def __repr__(self) -> str:  # hypothesis prints the steps with it
        return f"run({self.user}/{self.thread})"


field_values = st.one_of(
    st.builds(lambda s: {"name": s}, short_text),
    st.builds(lambda a: {"age": a}, st.sampled_from([0, 1, 7, 42, -1, 1.5, "x", True, None, [1]])),
    st.builds(lambda t: {"tags": t}, st.lists(short_text, max_size=3)),
    st.builds(lambda t: {"tags": t}, st.sampled_from(["not a list", [1, 2], [None]])),
    st.builds(lambda c: {"profile": {"city": c}}, st.one_of(short_text, st.sampled_from([3]))),
    st.builds(lambda p: {"profile": p}, st.sampled_from([None, "flat", {"__proto__": {"x": 1}}])),
    st.dictionaries(
        st.sampled_from(["a", "b", "__proto__", "constructor", "prototype"]),
        json_values,
        max_size=2,
    ),
)
patches = st.lists(field_values, max_size=3).map(
    lambda parts: {k: v for part in parts for k, v in part.items()}
)
huge_text = st.sampled_from([5_000, 20_000, 200_000]).map(lambda n: "word " * (n // 5))


@dataclass(frozen=True)
class Layout:
    """Which state each layer holds and how it is scoped. The layer named ``working-memory``
    has noetic's tools, the one named ``notes`` VoltAgent's; ``json`` names the one holding a
    JSON object (the other holds markdown from TEMPLATE)."""

    json: str
    scopes: tuple[tuple[str, str], ...]

    def scope(self, layer: str) -> str:
        return dict(self.scopes)[layer]

    @property
    def md(self) -> str:
        return "notes" if self.json == "working-memory" else "working-memory"


LAYOUTS = {
    "json-noetic-thread+md-voltagent-user": Layout(
        "working-memory", (("working-memory", "thread"), ("notes", "user"))
    ),
    "json-noetic-resource+md-voltagent-conversation": Layout(
        "working-memory", (("working-memory", "resource"), ("notes", "conversation"))
    ),
    "md-noetic-thread+json-voltagent-user": Layout(
        "notes", (("working-memory", "thread"), ("notes", "user"))
    ),
}


def build_machine(layout: Layout, postgres_url: str | None = None) -> type[RuleBasedStateMachine]:
    """The machine for this layout, on SQLite (a file per example) or on PostgreSQL."""
    json_layer, md_layer = layout.json, layout.md
    # VoltAgent's flavour unites arrays by default (docs/working-memory.md, options).
    arrays = "union" if json_layer == "notes" else "replace"

    class WorkingMemoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tmp = tempfile.TemporaryDirectory(prefix="stateful-wm-")
            self.path = pathlib.Path(self.tmp.name) / "wm.db"
            common = {"budget": BUDGET, "max_state_bytes": MAX_STATE_BYTES}
            self.layers = {
                name: WorkingMemory(
                    name=name,
                    scope=layout.scope(name),
                    tools="noetic" if name == "working-memory" else "voltagent",
                    **({"schema": SCHEMA} if name == json_layer else {"template": TEMPLATE}),
                    **common,
                )
                for name in ("working-memory", "notes")
            }
            self._open_store()
            if postgres_url is not None:
                empty_postgres_tables(postgres_url)  # each example starts from an empty store
            # The model: each namespace's stored state (absent: never written, or erased) and
            # a generation that moves on with every write of it.
            self.stored: dict[tuple[str, ...], Any] = {}
            self.generation: dict[tuple[str, ...], int] = {}
            self.open_runs: list[OpenRun] = []

        def _open_store(self) -> None:
            """Two servers on the one store, each with its own connection and stack."""
            self.stacks = [
                MemoryStack(
                    list(self.layers.values()),
                    store=SQLiteStore(self.path)
                    if postgres_url is None
                    else PostgresStore(postgres_url),
                    total_budget=10_000,
                )
                for _ in range(SERVERS)
            ]
            self.store = self.stacks[0].store

        def run_at(self, pick: int) -> OpenRun:
            return self.open_runs[pick % len(self.open_runs)]

        def teardown(self) -> None:
            for entry in self.open_runs:
                entry.run.close()
            for stack in self.stacks:
                stack.store.close()
            self.tmp.cleanup()

        # The model's scope rules ------------------------------------------------------------

        def namespace(self, layer: str, user: str, thread: str) -> tuple[str, ...]:
            if layout.scope(layer) in ("resource", "user"):
                return (layer, "resource", user)
            return (layer, "user-thread", user, thread)

        def initial(self, layer: str) -> Any:
            return {} if layer == json_layer else TEMPLATE

        def current(self, ns: tuple[str, ...], layer: str) -> Any:
            return self.stored.get(ns, self.initial(layer))

        def token(self, ns: tuple[str, ...]) -> int:
            """What a run that read ``ns`` now holds of it: the stored record's generation,
            or 0 when there is none (a conditional write expecting no record then succeeds)."""
            return self.generation[ns] if ns in self.stored else 0

        def wrote(self, entry: OpenRun, layer: str, state: Any) -> None:
            ns = self.namespace(layer, entry.user, entry.thread)
            self.stored[ns] = state
            self.generation[ns] = self.generation.get(ns, 0) + 1
            entry.held[layer] = (state, self.token(ns))

        def took_stored(self, entry: OpenRun, layer: str) -> None:
            ns = self.namespace(layer, entry.user, entry.thread)
            entry.held[layer] = (self.current(ns, layer), self.token(ns))

        def stale(self, entry: OpenRun, layer: str) -> bool:
            ns = self.namespace(layer, entry.user, entry.thread)
            return entry.held[layer][1] != self.token(ns)

        # Runs ---------------------------------------------------------------------------------

        @precondition(lambda self: len(self.open_runs) < MAX_OPEN)
        @rule(user=st.sampled_from(USERS), thread=st.sampled_from(THREADS), server=SERVER)
        def open_run(self, user: str, thread: str, server: int = 0) -> None:
            run = self.stacks[server].run(thread_id=thread, resource_id=user, agent="bot").open()
            entry = OpenRun(user, thread, run)
            for layer in self.layers:
                self.took_stored(entry, layer)
            self.open_runs.append(entry)

        @precondition(has_runs)
        @rule(pick=PICK)
        def close_run(self, pick: int) -> None:
            entry = self.run_at(pick)
            entry.run.close()
            self.open_runs.remove(entry)

        @rule()
        def reopen_store(self) -> None:
            """Every run ends, the store is closed, and a new store opens the same file."""
            for entry in self.open_runs:
                entry.run.close()
            self.open_runs.clear()
            for stack in self.stacks:
                stack.store.close()
            self._open_store()

        @rule(
            user=st.sampled_from(USERS),
            thread=st.one_of(st.none(), st.sampled_from(THREADS)),
            server=SERVER,
        )
        def forget(self, user: str, thread: str | None, server: int) -> None:
            erased = self.stacks[server].forget(resource_id=user, thread_id=thread)
            expected: dict[str, int] = {}
            for layer in self.layers:
                per_user = layout.scope(layer) in ("resource", "user")
                gone = [
                    ns
                    for ns in self.stored
                    if ns[0] == layer
                    and ns[2] == user
                    and (thread is None if per_user else thread in (None, ns[3]))
                ]
                expected[layer] = len(gone)
                for ns in gone:
                    del self.stored[ns]
            assert {k: erased.get(k) for k in expected} == expected, erased

        # Tool calls -----------------------------------------------------------------------------

        def call(self, entry: OpenRun, name: str, arguments: Any) -> dict[str, Any]:
            before = self._stored_records()
            result = entry.run.call_tool(name, arguments)
            assert isinstance(result, dict)
            note_outcome(name, result)
            if "error" in result:
                assert result["error"]["code"] in ERROR_CODES | {"conflict"}, result
                assert self._stored_records() == before, (name, result)
            self._no_other_user(entry, json.dumps(result, ensure_ascii=False))
            return result

        def outcome(
            self, entry: OpenRun, layer: str, name: str, arguments: Any, new: Any, *, whole: bool
        ) -> bool:
            """Makes the call and checks it against what the model predicts: ``new`` is the
            state the write leaves if accepted (None: the call is malformed)."""
            result = self.call(entry, name, arguments)
            code = result["error"]["code"] if "error" in result else None
            if new is None:
                assert code in ("invalid_arguments", "schema_violation"), result
                return False
            if layer == json_layer and schema_problems(new):
                assert code == "schema_violation", (result, new)
                return False
            size = json_size(new)
            if size > MAX_STATE_BYTES:
                assert code in ("limit_exceeded", "budget_exceeded"), (result, size)
                return False
            if size > SURELY_FITS:
                assert code in (None, "budget_exceeded", "conflict"), result
                if code == "budget_exceeded":
                    return False
            if whole and self.stale(entry, layer):
                # A replace or clear from a run that never saw the stored state is refused,
                # and the run takes the stored state (docs/working-memory.md, races).
                assert code == "conflict", result
                self.took_stored(entry, layer)
                return False
            assert code is None and result == {"ok": True, "version": result["version"]}, result
            self.wrote(entry, layer, new)
            return True

        @precondition(has_runs)
        @rule(
            pick=PICK,
            patch=patches,
            content=short_text,
            also_call=st.booleans(),
            tagged=st.booleans(),
        )
        def legacy_observe(
            self, pick: int, patch: dict[str, Any], content: str, also_call: bool, tagged: bool
        ) -> None:
            """A model response carrying noetic's legacy ``updateWorkingMemory`` call, passed
            to ``run.observe``, and maybe run through ``call_tool`` too: applied once
            (docs/working-memory.md, legacy calls)."""
            entry = self.run_at(pick)
            layer = "working-memory"
            ns = self.namespace(layer, entry.user, entry.thread)
            base = self.current(ns, layer)
            arguments: dict[str, Any]
            if layer == json_layer:
                arguments = {**patch, "name": marker(entry.user)} if tagged else patch
                new = deep_merge(base, arguments)
            else:
                arguments = {"content": f"{marker(entry.user)} {content}" if tagged else content}
                text = arguments["content"]
                new = text if not base.strip() else f"{base.rstrip()}\n\n{text}"
            call = {"name": "updateWorkingMemory", "arguments": json.dumps(arguments)}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
            }
            before = self._stored_records()
            diagnostics = entry.run.observe(message)
            key = json.dumps(arguments, sort_keys=True)
            if entry.legacy["call_tool"][key]:
                # The call the run already made through call_tool, seen again: not applied.
                entry.legacy["call_tool"][key] -= 1
                assert diagnostics == [], diagnostics
                assert self._stored_records() == before, "a call applied twice"
            else:
                refused = (layer == json_layer and schema_problems(new)) or (
                    json_size(new) > MAX_STATE_BYTES
                )
                if diagnostics:
                    assert refused or json_size(new) > SURELY_FITS, (diagnostics, new)
                    assert self._stored_records() == before
                    return
                assert not refused, (new, diagnostics)
                self.wrote(entry, layer, new)
                entry.legacy["observe"][key] += 1
            if also_call:
                self.legacy_call(entry, arguments, arguments)

        def legacy_call(self, entry: OpenRun, arguments: dict[str, Any], sent: Any) -> None:
            """``updateWorkingMemory`` through call_tool (``sent``: ``arguments`` as sent,
            maybe as JSON text): applied, unless observe applied the same call already."""
            layer = "working-memory"
            key = json.dumps(arguments, sort_keys=True)
            if entry.legacy["observe"][key]:
                entry.legacy["observe"][key] -= 1
                before = self._stored_records()
                result = self.call(entry, "updateWorkingMemory", sent)
                assert result == {"ok": True, "version": entry.run.layer(layer).version}, result
                assert self._stored_records() == before, "the call observe applied came again"
                return
            base = self.current(self.namespace(layer, entry.user, entry.thread), layer)
            if layer == json_layer:
                new = deep_merge(base, arguments)
            else:
                text = arguments["content"]
                new = text if not base.strip() else f"{base.rstrip()}\n\n{text}"
            if self.outcome(entry, layer, "updateWorkingMemory", sent, new, whole=False):
                entry.legacy["call_tool"][key] += 1

        def json_write(self, entry: OpenRun, given: Any, mode: str, how: int) -> tuple[str, Any]:
            """The call that writes ``given`` into the JSON state, in one of the ways its
            flavour takes (``how`` picks one)."""
            text = given if isinstance(given, (str, bytes)) else json.dumps(given)
            if json_layer == "working-memory":
                if mode == "replace":
                    return "working-memory_replace", given
                names = ["working-memory/update", "working-memory_update", "updateWorkingMemory"]
                return names[how % 3], text if how >= 3 else given
            return "update_notes_memory", {"content": text if how % 2 else given, "mode": mode}

        @precondition(has_runs)
        @rule(pick=PICK, patch=patches, tagged=st.booleans(), how=st.integers(0, 5))
        def json_update(self, pick: int, patch: dict[str, Any], tagged: bool, how: int) -> None:
            entry = self.run_at(pick)
            if tagged:
                patch = {**patch, "name": marker(entry.user) + "name"}
            ns = self.namespace(json_layer, entry.user, entry.thread)
            # An append always merges into the stored state: the run's own, or, after another
            # writer got there first, theirs (docs: "no update is lost").
            new = deep_merge(self.current(ns, json_layer), patch, arrays=arrays)
            name, arguments = self.json_write(entry, patch, "append", how)
            if name == "updateWorkingMemory":
                self.legacy_call(entry, patch, arguments)
            else:
                self.outcome(entry, json_layer, name, arguments, new, whole=False)

        @precondition(has_runs)
        @rule(pick=PICK, state=patches, tagged=st.booleans(), how=st.integers(0, 5))
        def json_replace(self, pick: int, state: dict[str, Any], tagged: bool, how: int) -> None:
            entry = self.run_at(pick)
            if tagged:
                state = {**state, "name": marker(entry.user)}
            name, arguments = self.json_write(entry, state, "replace", how)
            self.outcome(entry, json_layer, name, arguments, strip_unsafe_keys(state), whole=True)

        @precondition(has_runs)
        @rule(
            pick=PICK,
            given=st.sampled_from(["not json", "[1, 2]", "42", '{"a": NaN}', b"\xff", 7, ["x"]]),
            how=st.integers(0, 5),
        )
        def json_malformed(self, pick: int, given: Any, how: int) -> None:
            entry = self.run_at(pick)
            if isinstance(given, bytes) and json_layer == "notes":
                given = '{"a": 1'  # a content of the wrong type or unparseable JSON text
            name, arguments = self.json_write(entry, given, "append", how)
            self.outcome(entry, json_layer, name, arguments, None, whole=False)

        @precondition(has_runs)
        @rule(pick=PICK, text=huge_text, field_name=st.sampled_from(["name", "other"]))
        def json_huge(self, pick: int, text: str, field_name: str) -> None:
            entry = self.run_at(pick)
            ns = self.namespace(json_layer, entry.user, entry.thread)
            patch = {field_name: text}
            new = deep_merge(self.current(ns, json_layer), patch, arrays=arrays)
            name, arguments = self.json_write(entry, patch, "append", 0)
            self.outcome(entry, json_layer, name, arguments, new, whole=False)

        def md_call(self, content: Any, mode: str | None) -> tuple[str, dict[str, Any]]:
            arguments: dict[str, Any] = {"content": content}
            if mode is not None:
                arguments["mode"] = mode
            name = (
                "working-memory/update" if md_layer == "working-memory" else "update_notes_memory"
            )
            return name, arguments

        @precondition(has_runs)
        @rule(
            pick=PICK,
            content=st.one_of(short_text, huge_text),
            mode=st.sampled_from([None, "append", "replace"]),
            tagged=st.booleans(),
        )
        def md_update(self, pick: int, content: str, mode: str | None, tagged: bool) -> None:
            entry = self.run_at(pick)
            if tagged:
                content = f"{marker(entry.user)} {content}"
            ns = self.namespace(md_layer, entry.user, entry.thread)
            if mode == "replace":
                new = content
            else:
                base = self.current(ns, md_layer)
                new = content if not base.strip() else f"{base.rstrip()}\n\n{content}"
            name, arguments = self.md_call(content, mode)
            self.outcome(entry, md_layer, name, arguments, new, whole=mode == "replace")

        @precondition(has_runs)
        @rule(pick=PICK)
        def md_clear(self, pick: int) -> None:
            entry = self.run_at(pick)
            if md_layer == "notes":
                self.outcome(entry, md_layer, "clear_notes_memory", {}, "", whole=True)
            else:
                name, arguments = self.md_call("", "replace")
                self.outcome(entry, md_layer, name, arguments, "", whole=True)

        @precondition(has_runs)
        @rule(
            pick=PICK,
            arguments=st.sampled_from(
                [
                    {"content": 3},
                    {"content": "x", "mode": "bogus"},
                    {"mode": "append"},
                    {"content": "x", "extra": 1},
                    {"content": None},
                    "nope",
                    {"content": ["x"]},
                ]
            ),
        )
        def md_malformed(self, pick: int, arguments: Any) -> None:
            entry = self.run_at(pick)
            name, _ = self.md_call("", None)
            self.outcome(entry, md_layer, name, arguments, None, whole=False)

        @precondition(has_runs)
        @rule(pick=PICK)
        def get_notes(self, pick: int) -> None:
            entry = self.run_at(pick)
            result = self.call(entry, "get_notes_memory", {})
            fmt = "json" if json_layer == "notes" else "markdown"
            assert result.keys() == {"content", "format"}, result
            assert result["format"] == fmt, result
            assert json_equal(result["content"], entry.held["notes"][0]), result

        # Invariants -----------------------------------------------------------------------------

        def _stored_records(self) -> list[tuple[Any, ...]]:
            return [
                (i.namespace, i.key, i.version, json.dumps(i.value, sort_keys=True))
                for i in self.store.list(limit=10_000)
            ]

        def _no_other_user(self, entry: OpenRun, text: str) -> None:
            for other in USERS:
                if other != entry.user:
                    assert marker(other) not in text, (entry, text[:500])

        @invariant()
        def stored_is_the_model(self) -> None:
            items = self.store.list(limit=10_000)
            stored = {i.namespace: i.value for i in items}
            assert all(i.key == "state" for i in items), [(i.namespace, i.key) for i in items]
            assert stored.keys() == self.stored.keys(), (stored.keys(), self.stored.keys())
            for ns, state in self.stored.items():
                assert json_equal(stored[ns], state), (ns, stored[ns], state)

        @invariant()
        def runs_hold_the_model(self) -> None:
            for entry in self.open_runs:
                for layer in self.layers:
                    held = entry.run.layer(layer).snapshot
                    assert json_equal(held, entry.held[layer][0]), (entry, layer, held)

        @invariant()
        def prompts_show_only_the_users_memory(self) -> None:
            for entry in self.open_runs:
                blocks = entry.run.prepare([])
                self._no_other_user(entry, json.dumps(blocks, ensure_ascii=False))

    WorkingMemoryMachine.TestCase.settings = SETTINGS
    return WorkingMemoryMachine


TestJsonNoeticThreadMdVoltagentUser = build_machine(
    LAYOUTS["json-noetic-thread+md-voltagent-user"]
).TestCase
TestJsonNoeticResourceMdVoltagentConversation = build_machine(
    LAYOUTS["json-noetic-resource+md-voltagent-conversation"]
).TestCase
TestMdNoeticThreadJsonVoltagentUser = build_machine(
    LAYOUTS["md-noetic-thread+json-voltagent-user"]
).TestCase


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_machine_reaches_writes_and_refusals(layout: str) -> None:
    """Guards the machine: a fixed sequence through it stores both states, and refuses."""
    machine = build_machine(LAYOUTS[layout])()
    OUTCOMES.clear()
    try:
        machine.open_run("A", "t1")
        machine.json_update(0, {"name": "n"}, True, 0)
        machine.md_update(0, "x", None, True)
        machine.json_update(0, {"age": -1}, False, 1)
        machine.open_run("A", "t1")
        machine.md_update(1, "y", None, False)
        machine.md_clear(0)  # run 0 never read run 1's write
        machine.stored_is_the_model()
        machine.runs_hold_the_model()
        assert len(machine.stored) == 2
        codes = {code for (_name, code) in OUTCOMES}
        assert {"ok", "schema_violation", "conflict"} <= codes, OUTCOMES
    finally:
        machine.teardown()


def test_the_machine_on_postgres(postgres_url: str) -> None:
    """A machine on PostgreSQL (fewer examples: each step is several round trips)."""
    run_state_machine_as_test(
        build_machine(LAYOUTS["md-noetic-thread+json-voltagent-user"], postgres_url),
        settings=settings(SETTINGS, max_examples=max(5, SETTINGS.max_examples // 6)),
    )
