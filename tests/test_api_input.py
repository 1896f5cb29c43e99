"""Bad input to the stack's public API from the program that drives it: each gets an
InvalidInputError naming the option or value that was wrong, before anything is stored,
rather than a TypeError from deep inside a layer, a store error naming "namespace label 2",
or silent acceptance."""

from __future__ import annotations

import pathlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata import MemoryStack
from memstrata.exceptions import InvalidInputError, InvalidOptionError
from memstrata.layers import SharedMemory, ToolResults, WorkingMemory
from memstrata.stack import Budget
from memstrata.stores import SQLiteStore


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "memory.db") as opened:
        yield opened


@pytest.fixture
def stack(store: SQLiteStore) -> MemoryStack:
    return MemoryStack([WorkingMemory(), ToolResults(), SharedMemory()], store=store)


BAD_SCOPE_IDS = [
    (123, "must be a str or None, got int"),
    (["t"], "must be a str or None, got list"),
    ("", "is empty"),
    ("a\x00b", "NUL"),
    ("a\x1fb", "unit-separator"),
    ("a" * 5000, "5000 characters; the limit is 256"),
]


@pytest.mark.parametrize("option", ["thread_id", "resource_id", "agent"])
@pytest.mark.parametrize(("value", "message"), BAD_SCOPE_IDS)
def test_a_run_refuses_a_scope_id_no_store_can_key_by_naming_the_option(
    stack: MemoryStack, store: SQLiteStore, option: str, value: Any, message: str
) -> None:
    scope: dict[str, Any] = {"thread_id": "t1", option: value}
    with pytest.raises(InvalidInputError, match=message) as info, stack.run(**scope):
        pass
    assert option in str(info.value)
    assert store.list(()) == []


@pytest.mark.parametrize(("value", "message"), BAD_SCOPE_IDS)
def test_a_sub_run_refuses_the_same_scope_ids(stack: MemoryStack, value: Any, message: str) -> None:
    with stack.run(thread_id="t1") as run, pytest.raises(InvalidInputError, match=message):
        run.spawn(thread_id=value)


def test_a_scope_id_at_the_limit_is_kept_and_read_back(stack: MemoryStack) -> None:
    longest = "é" * 256
    with stack.run(thread_id=longest, resource_id="u1") as run:
        assert run.call_tool("working-memory/update", {"content": "likes tea"})["ok"]
    with stack.run(thread_id=longest, resource_id="u1") as run:
        assert "likes tea" in str(run.layer("working-memory").snapshot)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([1, 2], "message 0 must be a dict, got int"),
        ([{"role": "user", "content": "hi"}, None], "message 1 must be a dict, got NoneType"),
        ([{"role": "user", "content": "hi"}, "hi"], "message 1 must be a dict, got str"),
        ({"role": "user", "content": "hi"}, "messages must be a list of dicts, got dict"),
        ("hi", "messages must be a list of dicts, got str"),
    ],
)
def test_prepare_refuses_what_is_not_a_list_of_messages(
    stack: MemoryStack, messages: Any, message: str
) -> None:
    with stack.run(thread_id="t1") as run:
        with pytest.raises(InvalidInputError, match=message):
            run.prepare(messages)
        with pytest.raises(InvalidInputError, match=message):
            run.prepare_anthropic(messages)


def test_an_sdk_message_object_is_refused_saying_how_to_pass_it(stack: MemoryStack) -> None:
    """The OpenAI SDK's ``response.choices[0].message`` is a pydantic model, not the dict it
    stands for: the refusal says how to pass it."""
    from openai.types.chat import ChatCompletionMessage

    reply = ChatCompletionMessage(role="assistant", content="Noted.")
    hint = r"got ChatCompletionMessage: pass message\.model_dump\(exclude_none=True\)"
    with stack.run(thread_id="t1") as run:
        with pytest.raises(InvalidInputError, match=hint):
            run.observe(reply)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=hint):
            run.prepare([{"role": "user", "content": "hi"}, reply])  # type: ignore[list-item]
        run.observe(reply.model_dump(exclude_none=True))


def test_prepare_refuses_a_call_id_or_system_prompt_that_is_not_text(stack: MemoryStack) -> None:
    with stack.run(thread_id="t1") as run:
        with pytest.raises(InvalidInputError, match="call_id must be a str or None, got int"):
            run.prepare([], call_id=5)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="system must be a str, got int"):
            run.prepare_anthropic([], system=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("response", ["hello", None, [{"role": "assistant"}], 7])
def test_observe_refuses_what_is_not_one_model_response(stack: MemoryStack, response: Any) -> None:
    with (
        stack.run(thread_id="t1") as run,
        pytest.raises(InvalidInputError, match="message must be a dict"),
    ):
        run.observe(response)


def test_a_layer_is_looked_up_by_its_name_only(stack: MemoryStack) -> None:
    with stack.run(thread_id="t1") as run:
        for name in (["working-memory"], 3, None):
            with pytest.raises(InvalidInputError, match="no layer named"):
                run.layer(name)  # type: ignore[arg-type]


def test_tool_specs_refuses_an_unknown_format_or_a_strict_that_is_not_a_bool(
    stack: MemoryStack,
) -> None:
    with stack.run(thread_id="t1") as run:
        with pytest.raises(InvalidOptionError, match="unknown tool format 'gemini'"):
            run.tool_specs("gemini")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="strict must be a bool, got str"):
            run.tool_specs(strict="no")  # type: ignore[arg-type]
        # A refused strict leaves the run's tool calls as they were: null padding is kept.
        assert run._strip_null_padding is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prompt_role": "user"}, "prompt_role must be 'system' or 'developer', got 'user'"),
        ({"prompt_role": 3}, "prompt_role must be 'system' or 'developer', got 3"),
        ({"tokens": "o200k"}, "tokens must be a token counter"),
        ({"store": 5}, "store must be a Store, a store URL or None, got int"),
        ({"total_budget": True}, "total_budget must be a non-negative int"),
    ],
)
def test_a_stack_refuses_options_it_cannot_use(
    store: SQLiteStore, options: dict[str, Any], message: str
) -> None:
    kwargs: dict[str, Any] = {"store": store, **options}
    with pytest.raises(InvalidInputError, match=message):
        MemoryStack([WorkingMemory()], **kwargs)


def test_memory_injected_as_a_user_turn_is_refused_so_stored_text_never_speaks_as_the_user(
    store: SQLiteStore,
) -> None:
    # A prompt_role of "user" would put the model's own notes (and anything a tool result
    # wrote into them) into the conversation as the user's words.
    with pytest.raises(InvalidInputError, match="prompt_role"):
        MemoryStack([WorkingMemory()], store=store, prompt_role="user")
    with MemoryStack([WorkingMemory()], store=store, prompt_role="developer").run(
        thread_id="t1"
    ) as run:
        assert [m["role"] for m in run.prepare([{"role": "user", "content": "hi"}])] == [
            "developer",
            "user",
        ]


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (WorkingMemory(), "layers must be a list of layer objects, got WorkingMemory"),
        ("working-memory", "layers must be a list of layer objects, got str"),
        (None, "layers must be a list of layer objects, got NoneType"),
        ({"wm": WorkingMemory()}, "layers must be a list of layer objects, got dict"),
        ([WorkingMemory(), "x"], "'x' does not implement the Layer protocol"),
        ([WorkingMemory], r"WorkingMemory is a class, not a layer: .* e\.g\. WorkingMemory\(\)"),
    ],
)
def test_a_stack_refuses_layers_that_are_not_a_list_of_layers(
    store: SQLiteStore, layers: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        MemoryStack(layers, store=store)


def test_a_stack_refuses_a_layer_whose_name_slot_or_budget_it_cannot_order_or_share(
    store: SQLiteStore,
) -> None:
    unnamed = SharedMemory(name="")
    with pytest.raises(InvalidInputError, match="a layer's name is a non-empty str"):
        MemoryStack([unnamed], store=store)
    misplaced = SharedMemory()
    misplaced.slot = "x"  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match="has slot 'x'; a slot is an int"):
        MemoryStack([misplaced, WorkingMemory()], store=store)
    unbudgeted = SharedMemory()
    unbudgeted.budget = (1, 2)  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match=r"has budget \(1, 2\)"):
        MemoryStack([unbudgeted], store=store)


@pytest.mark.parametrize("bounds", [(True, 5), (0, True), (False, False)])
def test_a_budget_refuses_booleans_for_token_counts(bounds: tuple[Any, Any]) -> None:
    with pytest.raises(InvalidInputError, match="budget bounds must be ints"):
        Budget(*bounds)


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        ("", "namespace must be a tuple of str, got str"),
        # A string was split into one label per character: ("a", "b", "c").
        ("abc", "namespace must be a tuple of str, got str"),
        ([1], "namespace label 0 must be str, got int"),
        ((), "at least one label"),
        (("team", ""), "namespace label 1 is empty"),
    ],
)
def test_shared_memory_refuses_a_namespace_no_store_can_key_by(
    namespace: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        SharedMemory(namespace=namespace)


def test_prepare_takes_messages_of_dict_subclasses(stack: MemoryStack) -> None:
    with stack.run(thread_id="t1") as run:
        prepared = run.prepare([OrderedDict(role="user", content="hi")])
    assert prepared[-1] == {"role": "user", "content": "hi"}
