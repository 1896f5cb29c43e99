"""Bad input from the calling program to the layers' own handles (``run.layer(name)``) and to the
layers' constructors: each gets an InvalidInputError (the mind's handle: a ToolError, as every
other bad argument of it) naming the argument, and nothing stored changes, rather than a
TypeError or AttributeError from deep inside, or a value silently taken for something else (a
string split into characters, "no" taken as true).

The stack's own entry points are in test_api_input.py, the model's tool calls in
test_fuzz_tools.py."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from memstrata import MemoryStack
from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers import (
    AgentMind,
    ContextGate,
    SharedMemory,
    TeamState,
    ToolResults,
    WorkingMemory,
)
from memstrata.stores import SQLiteStore


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "m.db") as opened:
        yield opened


def _rows(store: SQLiteStore) -> list[tuple[Any, ...]]:
    """Everything stored, to compare before and after a refused call."""
    return sorted((i.namespace, i.key, repr(i.value), i.version) for i in store.list(()))


# Layer constructors ---------------------------------------------------------------------------


def _layers(tmp_path: pathlib.Path) -> dict[str, Any]:
    return {
        "WorkingMemory": WorkingMemory,
        "SharedMemory": SharedMemory,
        "AgentMind": AgentMind,
        "TeamState": lambda **kw: TeamState(state_dir=tmp_path / "team", **kw),
    }


@pytest.mark.parametrize("layer", ["WorkingMemory", "SharedMemory", "AgentMind", "TeamState"])
@pytest.mark.parametrize("budget", [None, 5, (1,), (1, 2, 3), "5"])
def test_a_layer_refuses_a_budget_that_is_not_a_min_max_pair(
    tmp_path: pathlib.Path, layer: str, budget: Any
) -> None:
    # Was a TypeError from Budget(*budget) (a str "ab" happened to pass as two bounds).
    with pytest.raises(InvalidInputError, match=r"budget must be a Budget or a \(min, max\) pair"):
        _layers(tmp_path)[layer](budget=budget)


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (WorkingMemory, "read_only"),
        (ToolResults, "enabled"),
        (ContextGate, "enabled"),
        (ContextGate, "cache"),
        (ContextGate, "checkpoint_redact_secrets"),
        ("TeamState", "enabled"),
    ],
)
@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
def test_a_switch_refuses_what_is_not_a_bool(
    tmp_path: pathlib.Path, make: Any, option: str, value: Any
) -> None:
    # Was taken as Python's truth: read_only="false" made a working memory read-only,
    # enabled="no" left a layer on.
    if make == "TeamState":
        make = _layers(tmp_path)["TeamState"]
    with pytest.raises(InvalidInputError, match=f"{option} must be True or False"):
        make(**{option: value})


@pytest.mark.parametrize("bad", ["sqlite:///x.db", 5, object()])
def test_shared_memory_refuses_a_store_that_is_not_a_store(bad: Any) -> None:
    # Was an AttributeError ('str' object has no attribute 'changes') from the first read.
    with pytest.raises(InvalidInputError, match="store must be a Store, got"):
        SharedMemory(store=bad)


def test_a_thread_scoped_shared_memory_without_a_store_says_to_share_the_stacks() -> None:
    with pytest.raises(InvalidInputError, match=r"give store=\.\.\., the stack's own .*open_store"):
        SharedMemory(scope="thread")


def test_shared_memory_given_a_store_url_says_how_to_open_it() -> None:
    with pytest.raises(InvalidInputError) as refused:
        SharedMemory(store="postgresql://agent:S3CRET@db/memory", scope="thread")
    message = str(refused.value)
    assert "got the str 'postgresql://agent:***@db/memory'" in message
    assert "open_store(url)" in message and "S3CRET" not in message


def test_tool_results_refuses_a_store_that_is_not_a_store_or_url() -> None:
    # Was taken, to fail with an AttributeError at the first offload.
    with pytest.raises(InvalidInputError, match="store must be a Store, a store URL or None"):
        ToolResults(store=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl_defaults": 5}, "ttl_defaults must be a MindTtlDefaults"),
        ({"ttl_defaults": "30d"}, "ttl_defaults must be a MindTtlDefaults"),
        ({"score_weights": 5}, "score_weights must be a ScoreWeights or None"),
        ({"score_weights": {"similarity": 1.0}}, "score_weights must be a ScoreWeights or None"),
        ({"embedder": 5}, "embedder must be an Embedder, a factory making one, or None"),
        ({"on_progress": "log"}, "on_progress must be callable or None"),
    ],
)
def test_agent_mind_refuses_options_of_the_wrong_kind(
    options: dict[str, Any], message: str
) -> None:
    # ttl_defaults/score_weights: AttributeError/TypeError; embedder/on_progress: taken, to
    # fail at the first belief or re-embedding.
    with pytest.raises(InvalidInputError, match=message):
        AgentMind(**options)


def test_agent_mind_open_refuses_a_store_agent_or_counter_it_cannot_use(
    store: SQLiteStore,
) -> None:
    mind = AgentMind()
    with pytest.raises(InvalidInputError, match="store must be a Store, got int"):
        mind.open(5, agent="a")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="agent must be a str or None, got list"):
        mind.open(store, agent=["a"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="tokens must be a token counter"):
        mind.open(store, agent="a", tokens=5)
    assert _rows(store) == []


def test_team_state_refuses_an_empty_state_dir_or_a_counter_that_cannot_count(
    tmp_path: pathlib.Path,
) -> None:
    # "" was the current directory: the state landed wherever the program ran.
    with pytest.raises(InvalidInputError, match="state_dir is empty"):
        TeamState(state_dir="")
    # Was taken, to fail with an AttributeError at the first prepend after a record.
    with pytest.raises(InvalidInputError, match="tokens must be a token counter"):
        TeamState(state_dir=tmp_path, tokens=5)  # type: ignore[arg-type]


# Working memory -------------------------------------------------------------------------------


@pytest.fixture
def stack(store: SQLiteStore, tmp_path: pathlib.Path) -> MemoryStack:
    return MemoryStack(
        [
            WorkingMemory(),
            ToolResults(threshold_tokens=20),
            SharedMemory(store=store, namespace=("team", "t1")),
            AgentMind(),
        ],
        store=store,
    )


def test_working_memory_apply_legacy_refuses_an_unknown_source(stack: MemoryStack) -> None:
    with stack.run(thread_id="t1", agent="a") as run:
        memory = run.layer("working-memory")
        memory.update("likes tea")
        before = (memory.snapshot, memory.version)
        # Was a KeyError: 'model'.
        with pytest.raises(InvalidInputError, match="source must be 'observe' or 'call_tool'"):
            memory.apply_legacy({"content": "x"}, source="model")  # type: ignore[arg-type]
        assert (memory.snapshot, memory.version) == before


@pytest.mark.parametrize("budget", ["500", True, 12.5, None])
def test_working_memory_prompt_items_refuses_a_budget_that_is_not_an_int(
    stack: MemoryStack, budget: Any
) -> None:
    # "500" was a TypeError from inside; True was taken as one token.
    wanted = "budget must be an int"
    with (
        stack.run(thread_id="t1", agent="a") as run,
        pytest.raises(InvalidInputError, match=wanted),
    ):
        run.layer("working-memory").prompt_items(budget)


# Shared memory --------------------------------------------------------------------------------


@pytest.fixture
def shared(store: SQLiteStore) -> SharedMemory:
    memory = SharedMemory(store=store, namespace=("team", "t1"))
    memory.set(key="plan", kind="shared", value={"steps": 3}, source="planner")
    return memory


def test_shared_memory_refuses_a_key_that_is_not_valid_unicode(
    shared: SharedMemory, store: SQLiteStore
) -> None:
    before = _rows(store)
    # Was a UnicodeEncodeError from the store.
    with pytest.raises(InvalidInputError, match="key is not valid Unicode"):
        shared.set(key="a\ud800", kind="shared", value=1)
    assert _rows(store) == before


@pytest.mark.parametrize("key", [["plan"], 5, None, ("plan",)])
@pytest.mark.parametrize("method", ["get", "get_value", "has"])
def test_shared_memory_reads_refuse_a_key_that_is_not_a_str(
    shared: SharedMemory, method: str, key: Any
) -> None:
    # A list was a TypeError (unhashable); an int or None read as missing.
    with pytest.raises(InvalidInputError, match="key must be a str, got"):
        getattr(shared, method)(key)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"kind": 5}, "kind must be a kind, a list of kinds or None, got int"),
        # A string was taken one key (or source) per character, and matched nothing.
        ({"keys": "plan"}, "keys must be a list of str, got str"),
        ({"keys": 5}, "keys must be a list of str, got int"),
        ({"keys": [["plan"]]}, r"keys must be a list of str, got an item \['plan'\]"),
        ({"sources": "planner"}, "sources must be a list of str, got str"),
        ({"sources": 5}, "sources must be a list of str, got int"),
        ({"key_prefix": 5}, "key_prefix must be a str, got int"),
        ({"key_prefix": ["p"]}, "key_prefix must be a str, got list"),
    ],
)
def test_shared_memory_list_refuses_filters_of_the_wrong_kind(
    shared: SharedMemory, filters: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        shared.list(**filters)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"kind": 5}, "kind must be a kind, a list of kinds or None, got int"),
        ({"key_prefix": 5}, "key_prefix must be a str, got int"),
    ],
)
def test_shared_memory_clear_refuses_filters_of_the_wrong_kind_and_deletes_nothing(
    shared: SharedMemory, store: SQLiteStore, filters: dict[str, Any], message: str
) -> None:
    before = _rows(store)
    with pytest.raises(InvalidInputError, match=message):
        shared.clear(**filters)
    assert _rows(store) == before
    assert shared.has("plan")


def test_shared_memory_filters_still_take_lists_tuples_and_sets(shared: SharedMemory) -> None:
    assert [e.key for e in shared.list(keys=("plan",), sources={"planner"})] == ["plan"]
    assert [e.key for e in shared.list(kind=["shared"], key_prefix="pl")] == ["plan"]


@pytest.mark.parametrize(
    ("method", "args", "message"),
    [
        ("tool_read", 5, "memory_read's arguments must be a dict, got int"),
        ("tool_read", None, "memory_read's arguments must be a dict, got NoneType"),
        ("tool_read", {}, "memory_read's arguments lack keys"),
        # A string was read one key per character.
        ("tool_read", {"keys": "plan"}, "memory_read's keys must be a list of str"),
        ("tool_read", {"keys": 5}, "memory_read's keys must be a list of str"),
        ("tool_read", {"keys": [5]}, "memory_read's keys must be a list of str"),
        ("tool_write", "x", "memory_write's arguments must be a dict, got str"),
        ("tool_write", {"key": "k"}, "memory_write's arguments lack value"),
        ("tool_write", {"key": 5, "value": 1}, "memory_write's key must be a str, got int"),
        ("tool_list", None, "memory_list's arguments must be a dict, got NoneType"),
        ("tool_list", {"kind": 5}, "kind must be a kind, a list of kinds or None"),
        ("tool_list", {"key_prefix": 5}, "key_prefix must be a str, got int"),
    ],
)
def test_shared_memory_tool_methods_called_directly_refuse_malformed_arguments(
    shared: SharedMemory, store: SQLiteStore, method: str, args: Any, message: str
) -> None:
    # Were TypeErrors, AttributeErrors and KeyErrors from inside (the model's calls are checked
    # against the tools' schemas first; a program calling the methods is not).
    before = _rows(store)
    with pytest.raises(InvalidInputError, match=message):
        getattr(shared, method)(args)
    assert _rows(store) == before


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("plan", "keys must be a list of str, got str"),
        (5, "keys must be a list of str, got int"),
        (None, "keys must be a list of str, got NoneType"),
        ([5], "keys must be a list of str, got an item 5"),
        ([["plan"]], r"keys must be a list of str, got an item \['plan'\]"),
    ],
)
def test_shared_memory_handle_require_refuses_what_is_not_a_list_of_keys(
    stack: MemoryStack, keys: Any, message: str
) -> None:
    with stack.run(thread_id="t1", agent="a") as run:
        handle = run.layer("shared-memory")
        handle.require(["plan"])
        # "plan" was declared as four keys, p, l, a and n; 5 and None were TypeErrors.
        with pytest.raises(InvalidInputError, match=message):
            handle.require(keys)
        assert handle.upstream == ["plan"]


@pytest.mark.parametrize("budget", ["100", True, 1.5])
def test_shared_memory_upstream_hint_refuses_a_budget_that_is_not_an_int(
    stack: MemoryStack, budget: Any
) -> None:
    with stack.run(thread_id="t1", agent="a") as run:
        handle = run.layer("shared-memory")
        handle.require(["plan"])
        with pytest.raises(InvalidInputError, match="budget must be an int or None"):
            handle.upstream_hint(budget)


# Tool results ---------------------------------------------------------------------------------

BIG = "word " * 200


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ((5,), "thread_id must be a str or None, got int"),
        ((["t1"],), "thread_id must be a str or None, got list"),
        (("",), "thread_id is empty"),
        (("t1", 5), "resource_id must be a str or None, got int"),
        ((None, b"u1"), "resource_id must be a str or None, got bytes"),
    ],
)
def test_tool_results_for_thread_refuses_scope_ids_a_run_would_refuse(
    ids: tuple[Any, ...], message: str
) -> None:
    # Were an AttributeError ('int' object has no attribute 'encode') or a TypeError
    # (unhashable list); "" was a scope of its own, apart from None's.
    with pytest.raises(InvalidInputError, match=message):
        ToolResults().for_thread(*ids)


@pytest.mark.parametrize("text", [5, None, b"bytes", {"a": 1}])
def test_tool_results_store_refuses_text_that_is_not_a_str_and_stores_nothing(
    stack: MemoryStack, store: SQLiteStore, text: Any
) -> None:
    with stack.run(thread_id="t1", agent="a") as run:
        results = run.layer("tool-results")
        before = _rows(store)
        # Was an AttributeError ('int' object has no attribute 'encode').
        with pytest.raises(InvalidInputError, match="text must be a str, got"):
            results.store("call_1", text)
        assert _rows(store) == before
        with pytest.raises(ToolError, match="no tool result is stored under call_id 'call_1'"):
            results.read_tool_result("call_1")


@pytest.mark.parametrize("text", [5, None, b"bytes"])
def test_tool_results_summarize_refuses_text_that_is_not_a_str(text: Any) -> None:
    # Was an AttributeError ('int' object has no attribute 'splitlines') from the digest.
    with pytest.raises(InvalidInputError, match="text must be a str, got"):
        ToolResults().summarize(text)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (5, "messages must be a list of dicts, got int"),
        (None, "messages must be a list of dicts, got NoneType"),
        # A string was taken as one message per character, a dict as one per key.
        ("hello", "messages must be a list of dicts, got str"),
        ({"role": "tool", "tool_call_id": "c1", "content": BIG}, "got dict"),
    ],
)
def test_tool_results_offload_messages_refuses_what_is_not_a_list_of_messages(
    messages: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        ToolResults(threshold_tokens=20).offload_messages(messages)


def test_tool_results_offload_messages_still_takes_a_tuple() -> None:
    results = ToolResults(threshold_tokens=20)
    given = ({"role": "tool", "tool_call_id": "c1", "content": BIG},)
    assert results.offload_messages(given)[0]["content"].startswith("[tool result offloaded")


# Agent mind -----------------------------------------------------------------------------------


@pytest.mark.parametrize("error", ["no", "false", 0, None])
def test_a_mind_flush_refuses_an_error_flag_that_is_not_a_bool_and_keeps_the_draft(
    store: SQLiteStore, error: Any
) -> None:
    mind = AgentMind()
    handle = mind.open(store, agent="a")
    handle.set_goal("ship the release")
    handle.believe("the release is due on Friday")
    # "no" was taken as true: an error flush, which dropped the goal and stored the belief
    # flagged with error: "no".
    with pytest.raises(InvalidInputError, match="error must be True or False"):
        handle.flush(error=error)
    assert _rows(store) == []
    assert handle.flush(error=False) == 2
    again = mind.open(store, agent="a")
    assert [g.description for g in again.goals.values()] == ["ship the release"]
    assert [b.error for b in again.beliefs.values()] == [False]


@pytest.mark.parametrize("allow", ["no", 1, None])
def test_a_belief_refuses_an_allow_downgrade_that_is_not_a_bool(
    store: SQLiteStore, allow: Any
) -> None:
    handle = AgentMind().open(store, agent="a")
    handle.believe("the release is due on Friday", confidence="high")
    # "no" let a low-confidence restatement lower the belief.
    with pytest.raises(ToolError, match="allow_downgrade must be true or false"):
        handle.believe("the release is due on Friday", confidence="low", allow_downgrade=allow)
    vector = handle.embed_one("the release is due on Friday")
    with pytest.raises(ToolError, match="allow_downgrade must be true or false"):
        handle.believe_vector("the release is due on Friday", vector, "low", [], None, allow)
    handle.flush()
    stored = AgentMind().open(store, agent="a").beliefs
    assert [b.confidence for b in stored.values()] == ["high"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # Were taken as Python's truth: "yes" filtered to pinned reflections, "no" took in
        # expired entries.
        ({"pinned": "yes"}, "pinned must be true, false or null"),
        ({"pinned": 1}, "pinned must be true, false or null"),
        ({"include_expired": "no"}, "include_expired must be true or false"),
        ({"include_expired": None}, "include_expired must be true or false"),
    ],
)
def test_a_mind_recall_refuses_flags_that_are_not_bools(
    store: SQLiteStore, options: dict[str, Any], message: str
) -> None:
    handle = AgentMind().open(store, agent="a")
    with pytest.raises(ToolError, match=message):
        handle.recall("release", **options)


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        (5, r"vector has shape \(\)"),
        (None, r"vector has shape \(\)"),
        ("release", "vector must be an array of numbers, got str"),
        # Of another dimension, it silently found nothing.
        ([1.0, 2.0], r"vector has shape \(2,\); the mind's embedder gives vectors of 384"),
        (np.ones((2, 384), dtype=np.float32), r"vector has shape \(2, 384\)"),
    ],
)
def test_a_mind_search_refuses_a_vector_it_cannot_search_by(
    store: SQLiteStore, vector: Any, message: str
) -> None:
    # 5, None and "release" were numpy ValueErrors from inside.
    handle = AgentMind().open(store, agent="a")
    with pytest.raises(ToolError, match=message):
        handle.search(vector)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # "belief" was taken one character per kind, and matched nothing.
        ({"kinds": "belief"}, "kinds must be a tuple of 'belief' and/or 'reflection'"),
        ({"kinds": 5}, "kinds must be a tuple of 'belief' and/or 'reflection'"),
        ({"kinds": ("goal",)}, "kinds must be a tuple of 'belief' and/or 'reflection'"),
        ({"limit": "5"}, "limit must be a positive integer"),
        ({"limit": True}, "limit must be a positive integer"),
        ({"limit": -1}, "limit must be a positive integer"),
        ({"tags": "ab"}, "tags must be a list of strings"),
        ({"tags": 5}, "tags must be a list of strings"),
        ({"pinned": "yes"}, "pinned must be true, false or null"),
    ],
)
def test_a_mind_search_refuses_options_of_the_wrong_kind(
    store: SQLiteStore, options: dict[str, Any], message: str
) -> None:
    handle = AgentMind().open(store, agent="a")
    with pytest.raises(ToolError, match=message):
        handle.search(handle.embed_one("release"), **options)


def test_a_mind_search_still_takes_tags_as_a_list(store: SQLiteStore) -> None:
    # Was an AttributeError ('list' object has no attribute 'issubset'): only a set passed.
    mind = AgentMind()
    with mind.session(store, agent="a") as handle:
        handle.believe("the release is due on Friday", tags=["release"])
    handle = mind.open(store, agent="a")
    hits = handle.search(handle.embed_one("release due Friday"), tags=["release"], threshold=0)
    assert [h.content for h in hits] == ["the release is due on Friday"]


@pytest.mark.parametrize("budget", ["300", True, 1.5])
def test_a_mind_header_refuses_a_budget_that_is_not_an_int(store: SQLiteStore, budget: Any) -> None:
    # "300" was a TypeError from inside; True was taken as one token.
    with pytest.raises(InvalidInputError, match="budget must be an int or None"):
        AgentMind().open(store, agent="a").header(budget)


# Team state -----------------------------------------------------------------------------------


def test_team_state_refuses_divergences_past_the_limit_at_once_and_writes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    team = TeamState(state_dir=tmp_path / "team")
    team.record("first step", shipped="a")
    started = time.perf_counter()
    # 3,000 flags took seconds, 100,000 hours: cutting the entry to the soft cap tried one
    # count of flags after another, each rendered whole.
    with pytest.raises(InvalidInputError, match="divergences holds more than 200 flags"):
        team.record("second step", divergences=(f"flag {i}" for i in range(100_000)))
    assert time.perf_counter() - started < 1
    assert [e.objective for e in team.entries()] == ["first step"]
    assert not team.audit_path.exists()
    assert len(team.record("third step", divergences=["d"] * 200).divergences) == 200


# Context gate ---------------------------------------------------------------------------------

SMALL = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("call_id", [5, None, ["c1"]])
def test_the_gate_refuses_a_call_id_that_is_not_text_even_when_it_writes_no_checkpoint(
    call_id: Any,
) -> None:
    # Was taken while the prompt fit, and refused only when a checkpoint was written.
    with pytest.raises(InvalidInputError, match="call_id must be a string"):
        ContextGate(max_input_tokens=1000).check_and_compress(SMALL, call_id)


@pytest.mark.parametrize("run_id", [5, ["r1"]])
def test_the_gate_refuses_a_run_id_that_is_not_text(run_id: Any) -> None:
    # A list was a TypeError (unhashable) once the prompt passed the warning line.
    near = [{"role": "user", "content": "word " * 40}]
    with pytest.raises(InvalidInputError, match="run_id must be a str or None"):
        ContextGate(max_input_tokens=60).check_and_compress(near, "c1", run_id=run_id)


@pytest.mark.parametrize("keep", [5, "keep"])
def test_the_gate_refuses_a_keeper_that_is_not_callable(keep: Any) -> None:
    calls = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in range(4)
            ],
        },
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "word " * 60} for i in range(4)),
    ]
    gate = ContextGate(max_input_tokens=400, keep_recent=1)
    # Was a TypeError ('int' object is not callable) once results were pruned.
    with pytest.raises(InvalidInputError, match="keep must be callable or None"):
        gate.check_and_compress(calls, "c1", keep=keep)
    with pytest.raises(InvalidInputError, match="keep must be callable or None"):
        gate.prune(calls, keep=keep)
