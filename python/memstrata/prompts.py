"""Every prompt text memstrata ships, in one place (Modulatio, Layer 5).

Each constant here is something a model reads on every turn it is offered: guidelines injected
with a layer's block, tool descriptions, notices. They are kept terse on purpose: every byte of
template is a byte the conversation does not get. ``tests/test_prompts.py`` pins the size of
each one, so a text that grows fails review instead of silently eating the budget; a new text
must be added to that test to pass.

Runtime content (the working-memory state, the team state, a repo map) is not template and does
not live here; but every block that shows it renders stored text through the functions at the
end of this module, so that text a model stored can never pass for the block's own structure.
"""

from __future__ import annotations

import re

# Working memory (layers/working_memory.py) ---------------------------------------------------

# ``{update}``, ``{replace}`` and ``{clear}`` are the names of the layer's tools as the model
# sees them (``working-memory_update``: wire-safe, see memstrata.tools.wire_name).
WORKING_MEMORY_GUIDELINES_NOETIC = (
    "This is your working memory: notes that persist across turns. Keep it current and "
    "compact. To change it, call `{update}` with only the fields that changed; they are "
    "merged into what is there. To shorten it, call `{replace}` with the whole new state."
)
WORKING_MEMORY_GUIDELINES_NOETIC_TEXT = (
    "This is your working memory: notes that persist across turns. Keep it current and "
    "compact. Call `{update}` with text to add, or with mode 'replace' to rewrite it whole."
)
WORKING_MEMORY_GUIDELINES_VOLTAGENT = (
    "This is your working memory: context that persists across turns. Call "
    "`{update}` when you learn something worth keeping (mode 'append' adds, "
    "'replace' rewrites everything), `{clear}` to start over."
)
WORKING_MEMORY_GUIDELINES_READ_ONLY = (
    "This is your working memory (read-only): context that persists across turns."
)
# Shown in place of the end of a block that is over the prompt budget it was given (the stack's
# budgets changed since it was written); ``{rewrite}`` names the tool that can shorten it.
WORKING_MEMORY_TRUNCATED = (
    "[... cut: this memory is {tokens} tokens, over its budget of {budget}. "
    "Shorten it with `{rewrite}`.]"
)
# ``{what}`` is WORKING_MEMORY_UPDATE_WHAT_STRUCTURED or WORKING_MEMORY_UPDATE_WHAT_TEXT.
WORKING_MEMORY_UPDATE_DESCRIPTION = "Update your working memory: pass {what}."
WORKING_MEMORY_UPDATE_WHAT_STRUCTURED = "only the fields that changed; they are deep-merged"
WORKING_MEMORY_UPDATE_WHAT_TEXT = "text to add"
# Appended for a schema with required fields: ``{fields}`` lists them.
WORKING_MEMORY_UPDATE_REQUIRED = "The memory must always hold {fields}: send them first."
WORKING_MEMORY_REPLACE_DESCRIPTION = (
    "Replace your whole working memory with the state you pass (to shorten it)."
)
WORKING_MEMORY_GET_DESCRIPTION = "Retrieve the current working memory content."
WORKING_MEMORY_SET_DESCRIPTION = (
    "Update the working memory. mode 'append' (default) merges or adds; "
    "'replace' overwrites everything."
)
WORKING_MEMORY_CLEAR_DESCRIPTION = "Clear the working memory content."

# Shared memory (layers/shared_memory.py) -----------------------------------------------------

MEMORY_TOOLS_SECTION = """## Memory Tools (progressive disclosure)
- Shared agent memory holds results from prior steps and tasks, original inputs, and facts
  published by other agents.
- Memory contents are NOT auto-included in your prompt. If you need upstream context, discover
  it on demand:
  1. Call `memory_list` to see what's available (returns metadata only — keys, titles, kinds,
     byte sizes).
  2. Call `memory_read` with the specific keys you actually need; it returns full values.
  3. Call `memory_write` to publish a value under `shared:<key>` so other agents can find it via
     `memory_list`.
- Pull only what you need — don't fetch every entry by reflex."""

UPSTREAM_HEADER = "# Required upstream memory (call `memory_read` with these keys):"
MEMORY_LIST_DESCRIPTION = (
    "List shared memory entries (metadata only: keys, titles, kinds, byte sizes). "
    "Newest 200 at most."
)
MEMORY_READ_DESCRIPTION = "Read full values of specific shared memory keys."
MEMORY_WRITE_DESCRIPTION = (
    "Publish a value under shared:<key> so other agents and steps can find it."
)

# Agent mind (layers/mind/) ---------------------------------------------------------------

# The seven tools' descriptions (their parameters are toolpack Agent Mind's).
MIND_RECALL_DESCRIPTION = (
    "Search your persistent memory (goals, beliefs, reflections). Reads what earlier runs "
    "committed; writes made in this run are not visible until the next run. Without a query, "
    "pinned=true lists all your standing rules."
)
MIND_BELIEVE_DESCRIPTION = (
    "Record a belief (a fact you learned), or update an existing similar one."
)
MIND_REFLECT_DESCRIPTION = (
    "Log an observation about your own performance; pin=true makes it a standing rule shown at "
    "the start of every run."
)
MIND_UNPIN_DESCRIPTION = (
    "Remove the pin from a standing-rule reflection (it stays as a regular reflection)."
)
MIND_SET_GOAL_DESCRIPTION = (
    "Create an active goal to track across sessions. Check mind_recall(type='goal') first to "
    "avoid duplicates."
)
MIND_UPDATE_GOAL_DESCRIPTION = (
    "Update an active goal: revise its description or priority, or append a progress note. Does "
    "not complete it."
)
MIND_COMPLETE_GOAL_DESCRIPTION = "Mark an active goal as completed (committed immediately)."
# The header's frame: its rule lines and section headings.
MIND_HEADER_OPEN = "--- AGENT MIND ---"
MIND_HEADER_CLOSE = "---"
MIND_HEADER_GOALS = "## Goals"
MIND_HEADER_RULES = "## Standing Rules (Pinned)"
MIND_HEADER_BELIEFS = "## Beliefs"
MIND_HEADER_REFLECTIONS = "## Recent Reflections"

# Tool results (layers/tool_results.py) --------------------------------------------------------

READ_TOOL_RESULT_DESCRIPTION = (
    "Read the verbatim text of an earlier tool result that was replaced by a summary. "
    "Pass its call_id; for a long result, page with offset (the next_offset returned)."
)
# What replaces an offloaded tool result in the conversation; the digest or summary follows.
TOOL_RESULT_OFFLOADED = (
    "[tool result offloaded: call_id={call_id}, {chars} chars, ~{tokens} tokens. "
    'Full text: read_tool_result(call_id="{call_id}").]'
)
TOOL_RESULT_PRUNED = "[summarized: call_id={call_id}]"
# What replaces a pruned tool result that cannot be read back (nothing stored it): it names no
# call_id, so the model is never pointed at a result that is not there.
TOOL_RESULT_GONE = (
    "[tool result removed to fit the context window; it was not stored, so its text is gone]"
)

# Team state (layers/team_state.py) ------------------------------------------------------------

TEAM_STATE_HEADER = "## Team State"


# Stored text inside the library's blocks ----------------------------------------------------

# Line breaks of every kind (str.splitlines' set): each one could start a forged line.
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
# Control characters and the bidirectional overrides that reorder what a reader sees.
_UNSHOWABLE = re.compile(
    r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
LINE_BREAK_MARK = " ⏎ "


def one_line(text: str) -> str:
    """Stored text as one line of a line-structured block (the mind header, the team state,
    the upstream-memory hint): line breaks are folded into ``⏎`` marks and control or
    direction-override characters are dropped, so it cannot start a line of its own (a
    heading, a ``---`` rule, a ``- QC verified`` line)."""
    return _UNSHOWABLE.sub("", _LINE_BREAKS.sub(LINE_BREAK_MARK, text))


def in_tagged_block(text: str, label: str, *, json_text: bool = False) -> str:
    """Stored text as the body of a ``<label>...</label>`` block: every opening or closing tag
    of ``label`` in it is escaped (``&lt;/label>``; in JSON text ``\\u003c/label>``, which is
    still the same JSON), so only the block's own tags delimit it. A tag counts however a
    reader would still see it: invisible format characters (zero-width spaces and joiners,
    soft hyphens) anywhere in it, fullwidth or small forms of its characters. The notice a
    cut block ends with is quoted as :func:`quote_notices` does (in JSON text its bracket is
    written ``\\u005b``), so only the layer's own reads as one."""
    if _WM_NOTICE in text:
        text = text.replace(_WM_NOTICE, ("\\u005b" if json_text else "(") + _WM_NOTICE[1:])
    wide = "\uff1c" in text or "\ufe64" in text
    if not wide and "<" not in text:
        return text

    def escape(match: re.Match[str]) -> str:
        tag = match.group(0)
        opening = f"\\u{ord(tag[0]):04x}" if json_text else "&lt;"
        return opening + tag[1:]

    return _tag_pattern(label, wide).sub(escape, text)


_TAG_PATTERNS: dict[tuple[str, bool], re.Pattern[str]] = {}
# What a reader sees as "<" (``wide``: its fullwidth and small forms too; a pattern opening
# with the plain character is searched several times faster), and what they do not see at
# all between a tag's characters.
_LESS_THAN = {False: "<", True: "[<\uff1c\ufe64]"}
_INVISIBLE = "[\\s\u00ad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]*"
# The four letters outside ASCII a case-insensitive match takes for ASCII ones: the Kelvin
# sign, the long s, the dotted capital and the dotless small i.
_FOLDS_TO = {"k": "\u212a", "s": "\u017f", "i": "\u0130\u0131"}


def _tag_pattern(label: str, wide: bool) -> re.Pattern[str]:
    pattern = _TAG_PATTERNS.get((label, wide))
    if pattern is None:
        # Each of the label's characters in either case, or their fullwidth forms (labels
        # are ASCII), or a letter outside ASCII that case-folds to it.
        name = _INVISIBLE.join(
            "["
            + "".join(re.escape(f) + chr(ord(f) + 0xFEE0) for f in {c.lower(): 0, c.upper(): 0})
            + _FOLDS_TO.get(c.lower(), "")
            + "]"
            for c in label
        )
        pattern = _TAG_PATTERNS[(label, wide)] = re.compile(
            f"{_LESS_THAN[wide]}{_INVISIBLE}[/\uff0f]?{_INVISIBLE}{name}(?![A-Za-z0-9_-])"
        )
    return pattern


# The openings of the notices memstrata writes into a conversation: stored text quoting one is
# shown with its bracket changed (see quote_notices), so only memstrata's own notices read as
# notices.
_NOTICE_OPENINGS = tuple(
    text[: text.index("{")] if "{" in text else text[: text.index(";")]
    for text in (
        TOOL_RESULT_OFFLOADED,
        TOOL_RESULT_PRUNED,
        TOOL_RESULT_GONE,
        WORKING_MEMORY_TRUNCATED,
    )
)


# The opening of the notice ending a cut working-memory block (see in_tagged_block).
_WM_NOTICE = _NOTICE_OPENINGS[-1]


def quote_notices(text: str) -> str:
    """Stored text with every copy of one of memstrata's notice openings (``[summarized:``,
    ``[tool result offloaded:``...) shown as ``(summarized:``...: a tool's output cannot pass
    for a placeholder or a pointer the library wrote."""
    if "[" not in text:
        return text
    for opening in _NOTICE_OPENINGS:
        if opening in text:
            text = text.replace(opening, "(" + opening[1:])
    return text
