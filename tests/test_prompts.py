"""Layer 5: every prompt text memstrata ships lives in memstrata.prompts, and its size is pinned.

A text that grows fails here: shrinking it is welcome, growing it is a decision to make in review
(update the pin in the same change, saying why).
"""

from __future__ import annotations

import pytest

from memstrata import MemoryStack, SharedMemory, ToolResults, WorkingMemory, prompts
from memstrata.stores import InMemoryStore

# UTF-8 bytes of each text.
PINNED_SIZES = {
    # Sizes before the tool names are filled in; the names replace {update} and its kin.
    # NOETIC grew by its sentence naming the replace tool: the update tool cannot remove keys.
    "WORKING_MEMORY_GUIDELINES_NOETIC": 249,
    "WORKING_MEMORY_GUIDELINES_NOETIC_TEXT": 168,
    "WORKING_MEMORY_GUIDELINES_VOLTAGENT": 197,
    "WORKING_MEMORY_GUIDELINES_READ_ONLY": 76,
    "WORKING_MEMORY_TRUNCATED": 100,
    "WORKING_MEMORY_UPDATE_DESCRIPTION": 40,
    "WORKING_MEMORY_UPDATE_WHAT_STRUCTURED": 50,
    "WORKING_MEMORY_UPDATE_WHAT_TEXT": 11,
    "WORKING_MEMORY_UPDATE_REQUIRED": 54,
    "WORKING_MEMORY_REPLACE_DESCRIPTION": 74,
    "WORKING_MEMORY_GET_DESCRIPTION": 44,
    "WORKING_MEMORY_SET_DESCRIPTION": 99,
    "WORKING_MEMORY_CLEAR_DESCRIPTION": 33,
    "MEMORY_TOOLS_SECTION": 657,
    "UPSTREAM_HEADER": 64,
    "MEMORY_LIST_DESCRIPTION": 96,
    "MEMORY_READ_DESCRIPTION": 48,
    "MEMORY_WRITE_DESCRIPTION": 73,
    "READ_TOOL_RESULT_DESCRIPTION": 162,
    "TOOL_RESULT_OFFLOADED": 126,
    "TOOL_RESULT_PRUNED": 31,
    "TOOL_RESULT_GONE": 87,
    "TEAM_STATE_HEADER": 13,
    # The agent mind's seven tool descriptions and its header's frame.
    "MIND_RECALL_DESCRIPTION": 215,
    "MIND_BELIEVE_DESCRIPTION": 72,
    "MIND_REFLECT_DESCRIPTION": 113,
    "MIND_UNPIN_DESCRIPTION": 82,
    "MIND_SET_GOAL_DESCRIPTION": 105,
    "MIND_UPDATE_GOAL_DESCRIPTION": 107,
    "MIND_COMPLETE_GOAL_DESCRIPTION": 57,
    "MIND_HEADER_OPEN": 18,
    "MIND_HEADER_CLOSE": 3,
    "MIND_HEADER_GOALS": 8,
    "MIND_HEADER_RULES": 26,
    "MIND_HEADER_BELIEFS": 10,
    "MIND_HEADER_REFLECTIONS": 21,
    # What a line break in stored text becomes inside a line-structured block.
    "LINE_BREAK_MARK": 5,
}


def shipped_texts() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(prompts).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }


def test_every_text_is_pinned() -> None:
    assert sorted(shipped_texts()) == sorted(PINNED_SIZES), (
        "a prompt text was added or removed: pin its size in PINNED_SIZES"
    )


@pytest.mark.parametrize("name", sorted(PINNED_SIZES))
def test_size_is_pinned(name: str) -> None:
    size = len(shipped_texts()[name].encode())
    assert size <= PINNED_SIZES[name], f"{name} grew from {PINNED_SIZES[name]} to {size} bytes"
    assert size == PINNED_SIZES[name], f"{name} shrank to {size} bytes: lower its pin"


def test_layers_use_the_shared_texts(tmp_path) -> None:
    stack = MemoryStack(
        [WorkingMemory(), ToolResults(tool_calls_dir=tmp_path)], store=InMemoryStore()
    )
    with stack.run(thread_id="t") as run:
        run.call_tool("working-memory/update", {"content": "likes tea"})
        block = run.prepare([])[0]["content"]
        guidelines = prompts.WORKING_MEMORY_GUIDELINES_NOETIC_TEXT
        assert block.endswith(guidelines.format(update="working-memory_update"))
        specs = {s["name"]: s["description"] for s in run.tool_specs("mcp")}
    assert specs["read_tool_result"] == prompts.READ_TOOL_RESULT_DESCRIPTION
    assert specs["working-memory_update"] == prompts.WORKING_MEMORY_UPDATE_DESCRIPTION.format(
        what=prompts.WORKING_MEMORY_UPDATE_WHAT_TEXT
    )
    stack = MemoryStack([WorkingMemory(tools="voltagent")], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        specs = {s["name"]: s["description"] for s in run.tool_specs("mcp")}
    assert specs == {
        "get_working_memory": prompts.WORKING_MEMORY_GET_DESCRIPTION,
        "update_working_memory": prompts.WORKING_MEMORY_SET_DESCRIPTION,
        "clear_working_memory": prompts.WORKING_MEMORY_CLEAR_DESCRIPTION,
    }


def test_shared_memory_uses_the_shared_texts() -> None:
    stack = MemoryStack([SharedMemory()], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        block = run.prepare([])[0]["content"]
        specs = {s["name"]: s["description"] for s in run.tool_specs("mcp")}
    assert block.startswith(prompts.MEMORY_TOOLS_SECTION)
    assert specs == {
        "memory_list": prompts.MEMORY_LIST_DESCRIPTION,
        "memory_read": prompts.MEMORY_READ_DESCRIPTION,
        "memory_write": prompts.MEMORY_WRITE_DESCRIPTION,
    }


def test_the_agent_mind_uses_the_shared_texts() -> None:
    from memstrata import AgentMind

    stack = MemoryStack([AgentMind()], store=InMemoryStore())
    with stack.run(agent="a") as run:
        specs = {s["name"]: s["description"] for s in run.tool_specs("mcp")}
        run.call_tool("mind_believe", {"content": "Tea is the user's drink", "confidence": "high"})
    assert specs["mind_recall"] == prompts.MIND_RECALL_DESCRIPTION
    assert specs["mind_complete_goal"] == prompts.MIND_COMPLETE_GOAL_DESCRIPTION
    with stack.run(agent="a") as run:
        header = run.prepare([])[0]["content"].splitlines()
    assert header[0] == prompts.MIND_HEADER_OPEN and header[-1] == prompts.MIND_HEADER_CLOSE
    assert prompts.MIND_HEADER_BELIEFS in header


@pytest.mark.parametrize(
    ("label", "tag"),
    [
        ("working_memory", "</wor\u212aing_memory>"),  # Kelvin sign for k
        ("working_memory", "</work\u0131ng_memory>"),  # dotless i
        ("working_memory", "<WORK\u0130NG_MEMORY>"),  # capital I with a dot
        ("scratch", "</\u017fcratch>"),  # long s
    ],
)
def test_a_tag_with_a_letter_that_case_folds_to_ascii_is_escaped(label: str, tag: str) -> None:
    """The four letters outside ASCII that a case-insensitive match takes for ASCII ones (the
    Kelvin sign, the dotless i, the dotted capital I, the long s) spell the block's tag for a
    reader as plainly as the ASCII letters do: it is escaped, in text and in JSON text."""
    assert prompts.in_tagged_block(f"a {tag} b", label) == f"a &lt;{tag[1:]} b"
    json_text = f'{{"k": "{tag}"}}'
    assert prompts.in_tagged_block(json_text, label, json_text=True) == (
        f'{{"k": "\\u003c{tag[1:]}"}}'
    )


def test_markers_are_made_of_the_characters_the_look_alike_table_covers() -> None:
    # The table (tools/build_lookalikes.py) only says how characters read as these: a notice
    # opening with another character would be matched by its spelling alone.
    from memstrata import _lookalikes

    for words in prompts._NOTICE_WORDS:
        assert set("".join(words)) <= set(_lookalikes.MARKER_CHARS), words
    assert set("</abcdefghijklmnopqrstuvwxyz0123456789_-[") <= set(_lookalikes.MARKER_CHARS)


@pytest.mark.parametrize(
    ("char", "reads_as"),
    [
        ("\u043e", "o"),  # Cyrillic o
        ("\u03bf", "o"),  # Greek omicron
        ("\u0430", "a"),
        ("\u0131", "i"),  # dotless i
        ("\u017f", "f"),  # long s: Unicode says it looks like an f
        ("\u017f", "s"),  # and it is an s
        ("\u212a", "k"),  # Kelvin sign
        ("\u04c0", "i"),  # palochka: looks like a capital I
        ("\u2039", "<"),
        ("\u02c2", "<"),
        ("\uff1c", "<"),
        ("\u2215", "/"),
        ("\u2044", "/"),
        ("\uff3b", "["),
        ("\u00f6", "o"),  # a letter with an accent
        ("\u2026", "..."),
    ],
)
def test_look_alike_characters_read_as_the_marker_characters(char: str, reads_as: str) -> None:
    assert reads_as in prompts._readings(char)


@pytest.mark.parametrize("char", ["\u200b", "\u0338", "\ufe0f", "\u3164", "\U000e007f"])
def test_characters_that_show_nothing_are_skipped(char: str) -> None:
    assert prompts._readings(char) == ()


def test_a_tag_character_reads_as_nothing_and_as_the_ascii_it_mirrors() -> None:
    assert set(prompts._readings("\U000e0041")) == {"", "a"}
    assert set(prompts._readings("\U000e003c")) == {"", "<"}


@pytest.mark.parametrize("char", ["\u65e5", "\u0436", "\u3008", "\u2045", "\u3010", "a", "<"])
def test_other_characters_read_as_themselves(char: str) -> None:
    assert prompts._readings(char) == (char.lower(),)


def test_the_look_alike_table_reads_only_as_marker_characters() -> None:
    from memstrata import _lookalikes

    allowed = set(_lookalikes.MARKER_CHARS)
    for char, readings in _lookalikes.READINGS.items():
        assert not char.isascii() and readings, char
        assert all(set(reading) <= allowed for reading in readings), (char, readings)
