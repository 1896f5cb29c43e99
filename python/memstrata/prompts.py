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
import sys

from memstrata import _lookalikes

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
# Control characters, and the bidirectional controls that reorder what a reader sees: all of
# Unicode's Bidi_Control set (the Arabic letter mark, the left-to-right and right-to-left marks,
# embeddings, overrides and isolates), treated alike.
_UNSHOWABLE = re.compile(
    r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
LINE_BREAK_MARK = " ⏎ "


def one_line(text: str) -> str:
    """Stored text as one line of a line-structured block (the mind header, the team state,
    the upstream-memory hint): line breaks are folded into ``⏎`` marks and control characters
    and bidirectional controls (marks, embeddings, overrides, isolates) are dropped, so it
    cannot start a line of its own (a heading, a ``---`` rule, a ``- QC verified`` line) or
    reorder what a reader sees; copies of notice openings are quoted (:func:`quote_notices`)."""
    return quote_notices(_UNSHOWABLE.sub("", _LINE_BREAKS.sub(LINE_BREAK_MARK, text)))


def in_tagged_block(text: str, label: str, *, json_text: bool = False) -> str:
    """Stored text as the body of a ``<label>...</label>`` block: every opening or closing tag
    of ``label`` in it is escaped (``&lt;/label>``; in JSON text ``\\u003c/label>``, which is
    still the same JSON), so only the block's own tags delimit it, and every copy of a notice
    opening is quoted (:func:`quote_notices`), so only the library's notices read as notices.

    A tag is found as a reader would see it: in any case, with spaces inside, and also spelt
    with characters that look like the ones it is made of (see :func:`_readings`: fullwidth or
    styled forms, letters of other scripts such as a Cyrillic o (U+043E), angle quotation marks and
    arrowheads for ``<``, division and fraction slashes for ``/``, letters with accents) or with
    invisible characters (zero widths, joiners, variation selectors, combining marks) between
    its characters."""
    text = quote_notices(text, json_text=json_text)
    if "<" not in text and (text.isascii() or not any(c in text for c in _LESS_THANS)):
        return text
    if _plain(text):
        pattern = _tag_pattern(label)
        escape = "\\u003c" if json_text else "&lt;"
        return pattern.sub(lambda m: escape + m.group(0)[1:], text)
    # "/" then the label, or the label alone (reading starts at the label: place (1, 0)).
    words, starts = ("/", label.lower()), {(0, 0), (1, 0)}
    out, last = [], 0
    for i in _places(text, _LESS_THANS, _tag_candidates(label)):
        if any(after not in _WORD_CHARS for after in _after_words(text, i + 1, words, starts)):
            out.append(text[last:i])
            # In JSON text the bracket's \u escape: the same string value, no bracket shown.
            out.append(_json_escape(text[i]) if json_text else "&lt;")
            last = i + 1
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def tagged_block_floor(text: str) -> int:
    """The fewest UTF-8 bytes :func:`in_tagged_block` can make of ``text``, counted at C speed:
    escaping a tag only lengthens it, and quoting a notice changes its bracket to ``(`` (one
    byte, where a look-alike bracket took up to four). A size limit checked against it first
    refuses a huge text before the escaping reads it, which for a text full of look-alike
    candidates goes character by character in Python (seconds for a few megabytes)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if text.isascii():
        return size
    return size - sum(
        (len(bracket.encode("utf-8")) - 1) * text.count(bracket)
        for bracket in _LEFT_BRACKETS
        if not bracket.isascii()
    )


_TAG_PATTERNS: dict[str, re.Pattern[str]] = {}


def _tag_pattern(label: str) -> re.Pattern[str]:
    pattern = _TAG_PATTERNS.get(label)
    if pattern is None:
        pattern = _TAG_PATTERNS[label] = re.compile(
            r"<\s*/?\s*" + re.escape(label) + r"(?![A-Za-z0-9_-])", re.IGNORECASE
        )
    return pattern


_READINGS = _lookalikes.READINGS


def _read_as(marker: str) -> str:
    """``marker`` and every character that reads as it (or as something ending with it: ``≪``
    reads "<<")."""
    chars = (c for c, readings in _READINGS.items() if any(r.endswith(marker) for r in readings))
    return marker + "".join(chars)


# The characters that read as "<", "/" and "[" (a fullwidth "<", an angle quotation mark...),
# and classes of them. Whether a text holds any is asked character by character (``in``, at
# memchr speed): a regular expression scans slower for so few.
_LESS_THANS = _read_as("<")
_LEFT_BRACKETS = _read_as("[")
_LESS_THAN = re.compile(f"[{re.escape(_LESS_THANS)}]")
_SLASH = re.compile(f"[{re.escape(_read_as('/'))}]")
_LEFT_BRACKET = re.compile(f"[{re.escape(_LEFT_BRACKETS)}]")
# Characters that read as other characters or show nothing on their own: text without any
# reads as it is spelt (see _plain).
_LOOK_ALIKE = re.compile(f"[{_lookalikes.READ_AS_MARKER}{_lookalikes.SKIPPED}]")
_LOOK_ALIKE_ASTRAL = re.compile(
    f"[{_lookalikes.READ_AS_MARKER_ASTRAL}{_lookalikes.SKIPPED_ASTRAL}]"
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SKIPPED = re.compile(f"[{_lookalikes.SKIPPED}]|[{_lookalikes.SKIPPED_ASTRAL}]")
# Spaces and characters that show nothing, any number of them.
# (The range check first: a class outside the BMP is a scan of its ranges, not a lookup.)
_SKIP = (
    f"(?:[\\s{_lookalikes.SKIPPED}]|(?=[\\U00010000-\\U0010ffff])[{_lookalikes.SKIPPED_ASTRAL}])*"
)
_CANDIDATES: dict[str, re.Pattern[str]] = {}


def _may_start(firsts: str) -> str:
    """A regular-expression alternative matching the characters, not ASCII, that may begin
    what follows a marker's bracket: those with a reading that starts (past spaces) with one
    of ``firsts``, or that reads as nothing or as spaces only. After any other character
    :func:`_after_words` finds nothing, so a bracket followed by one (Cyrillic or CJK prose
    after a "<" or a "[") is not a candidate."""
    chars = "".join(
        c
        for c, readings in _READINGS.items()
        if not c.isascii() and any(not r.strip() or r.lstrip()[0] in firsts for r in readings)
    )
    bmp = "".join(c for c in chars if ord(c) <= 0xFFFF)
    astral = "".join(c for c in chars if ord(c) > 0xFFFF)
    # The range check first, as in _SKIP: a class outside the BMP is a scan of its ranges.
    return f"[{re.escape(bmp)}]" + (
        f"|(?=[\\U00010000-\\U0010ffff])[{re.escape(astral)}]" if astral else ""
    )


def _tag_candidates(label: str) -> re.Pattern[str]:
    """The places a tag of ``label`` may start, found at C speed: a "<" (or a character that
    reads as one) followed by spaces and invisible characters, maybe a "/" (or its look-alike),
    then the label's first letter or a character that is not ASCII but may read as it or as
    the "/" (see :func:`_may_start`); :func:`_after_words` decides. Only the "<" is matched, so
    a candidate never hides the next one."""
    pattern = _CANDIDATES.get(label)
    if pattern is None:
        skip = _SKIP
        first = re.escape(label[:1].lower()) + re.escape(label[:1].upper())
        others = _may_start("/" + label[:1].lower())
        pattern = _CANDIDATES[label] = re.compile(
            f"{_LESS_THAN.pattern}(?={skip}(?:{_SLASH.pattern}{skip})?(?:[{first}]|{others}))"
        )
    return pattern


def _places(text: str, leads: str, pattern: re.Pattern[str]) -> list[int]:
    """Where ``pattern``, which matches one of the characters ``leads`` and then only looks
    ahead, matches in ``text``, in order. Each lead is found with ``str.find`` (memchr speed):
    a regular expression scanning for a class of characters, not all of them ASCII, reads
    text that is not ASCII ten times slower."""
    places = []
    for lead in leads:
        i = text.find(lead)
        while i != -1:
            if pattern.match(text, i):
                places.append(i)
            i = text.find(lead, i + 1)
    places.sort()
    return places


# The characters a tag name is made of: a tag ends where the next one is none of these.
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def _plain(text: str) -> bool:
    """Whether ``text`` reads as it is spelt (no character that reads as another, nothing
    invisible), so that a case-insensitive pattern finds what a reader would; checked at C
    speed."""
    if text.isascii():
        return True
    # Two searches: a class of BMP characters alone is a bitmap lookup, a hundred times faster
    # than one that also holds characters outside it, which most text has none of.
    return not _LOOK_ALIKE.search(text) and not (
        _ASTRAL.search(text) and _LOOK_ALIKE_ASTRAL.search(text)
    )


def _json_escape(c: str) -> str:
    """``c`` as a JSON ``\\u`` escape (a surrogate pair outside the Basic Multilingual Plane)."""
    code = ord(c)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _readings(c: str) -> tuple[str, ...]:
    """What a reader may take ``c`` for, in the characters the library's markers are made of
    (empty for a character that shows nothing on its own, which a reader skips).

    ASCII reads as it is spelt (in any case). Any other character reads as its compatibility
    form (the fullwidth U+FF1C as "<"), as its letter without accents or other marks (``ö``
    as "o"), and as every character it is confusable with by Unicode's own table (Unicode TR39
    "confusables": the Cyrillic U+043E as "o", the angle quotation mark U+2039 as "<", the
    long s U+017F as "s" and as "f"). A tag character (U+E0020...U+E007E) reads as nothing and
    as the ASCII character it mirrors. The table is generated by ``tools/build_lookalikes.py``;
    a character it does not list reads as itself."""
    if c.isascii():
        return (c.lower(),)
    found = _READINGS.get(c)
    if found is not None:
        return found
    return () if _SKIPPED.match(c) else (c,)


def _after_words(
    text: str, start: int, words: tuple[str, ...], starts: set[tuple[int, int]] | None = None
) -> set[str]:
    """The characters that may come right after ``words`` when ``text`` is read from
    ``start``, with any spaces before each word and each character read as any of its
    readings (``""`` for the end of the text); empty when no reading of the text gives
    ``words``. ``starts`` are the places in ``words`` reading may begin at, (word, offset in
    it): the first word's start unless given."""
    states = starts or {(0, 0)}
    after: set[str] = set()
    done = (len(words), 0)
    for i in range(start, len(text)):
        c = text[i]
        readings = _readings(c)
        if not readings:
            continue
        if done in states and not c.isascii():
            # A character that reads as a letter may still be taken as itself: the end of a
            # tag name, when it comes right after one.
            after.add(c)
        states = {
            state
            for place in states
            for reading in readings
            if (state := _advance(words, place, reading, after)) is not None
        }
        if not states:
            return after
    if done in states:
        after.add("")
    return after


def _advance(
    words: tuple[str, ...], place: tuple[int, int], reading: str, after: set[str]
) -> tuple[int, int] | None:
    """The place in ``words`` after ``reading``, or None where it does not fit; a reading
    that goes on past the last word adds its next character to ``after``."""
    w, k = place
    for c in reading:
        if w == len(words):
            after.add(c)
            return None
        if k == 0 and c.isspace():
            continue
        if c != words[w][k]:
            return None
        k += 1
        if k == len(words[w]):
            w, k = w + 1, 0
    return w, k


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


def quote_notices(text: str, *, json_text: bool = False) -> str:
    """Stored text with every copy of one of memstrata's notice openings (``[summarized:``,
    ``[tool result offloaded:``...) shown as ``(summarized:``... (in JSON text with the bracket
    as its ``\\u`` escape, the same JSON): a tool's output or a stored memory cannot pass for a
    placeholder or a pointer the library wrote. An opening is found as a reader would see it,
    as for :func:`in_tagged_block`: in any case, with any spaces, in compatibility forms (a
    fullwidth ``[``, fullwidth letters) and with invisible format characters inside."""
    if "[" not in text and (text.isascii() or not any(c in text for c in _LEFT_BRACKETS)):
        return text

    def quoted(bracket: str) -> str:
        return _json_escape(bracket) if json_text else "("

    if _plain(text):
        plain = quoted("[")
        return _NOTICE_PATTERN.sub(lambda _: plain, text)
    out, last = [], 0
    for i in _places(text, _LEFT_BRACKETS, _NOTICE_CANDIDATES):
        if any(_after_words(text, i + 1, words) for words in _NOTICE_WORDS):
            out.append(text[last:i])
            out.append(quoted(text[i]))
            last = i + 1
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _notice_words(opening: str) -> tuple[str, ...]:
    """An opening past its ``[`` as words: ``("summarized", ":")``."""
    return tuple(re.findall(r"[a-z]+|[^a-z\s]", opening[1:].casefold()))


_NOTICE_WORDS = tuple(_notice_words(opening) for opening in _NOTICE_OPENINGS)
# The places a notice opening may start, found at C speed (as _tag_candidates does for tags):
# a "[" (or a character that reads as one), spaces and invisible characters, then the first
# character of an opening or one that may read as it (see _may_start); _after_words decides.
_FIRST = "".join(sorted({words[0][0] for words in _NOTICE_WORDS}))
_NOTICE_FIRST = f"[{re.escape(_FIRST + _FIRST.upper())}]|{_may_start(_FIRST)}"
_NOTICE_CANDIDATES = re.compile(f"{_LEFT_BRACKET.pattern}(?={_SKIP}(?:{_NOTICE_FIRST}))")
# The same match on text that reads as it is spelt (see _plain): the bracket, when any spaces
# and the words follow it in any case. Possessive repeats: indented JSON has a "[" and a run of
# spaces on every other line, which plain repeats would try again for each word.
# Python before 3.11 has no possessive repeats: a plain one finds the same matches (no word
# starts with a space), after more backtracking.
_SPACES = r"\s*+" if sys.version_info >= (3, 11) else r"\s*"
_NOTICE_PATTERN = re.compile(
    rf"\[(?={_SPACES}(?:"
    + "|".join(_SPACES.join(re.escape(word) for word in words) for words in _NOTICE_WORDS)
    + "))",
    re.IGNORECASE,
)
