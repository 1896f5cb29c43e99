"""The one place that knows message formats: OpenAI Chat Completions (``tool_calls``, the
legacy ``function_call`` and ``role: "function"``), OpenAI Responses items
(``{"type": "function_call"}``, ``{"type": "function_call_output"}``) and Anthropic messages
(``tool_use`` / ``tool_result`` content blocks).

Layers and the context gate read tool calls (:func:`tool_calls`) and tool results
(:func:`tool_results`) through here, rewrite result bodies with :func:`with_tool_results`, and
count any message through :func:`countable`, so each of them handles every format alike.
"""

from __future__ import annotations

import hashlib
import operator
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from typing import Any, NamedTuple

import orjson

Message = dict[str, Any]


class ToolCall(NamedTuple):
    """One call a model made: its tool's name and its arguments, as the API sent them (JSON
    text, or an already parsed object for Anthropic's ``input``)."""

    name: str
    arguments: Any


def tool_calls(message: Any) -> Iterator[ToolCall]:
    """Every tool call in ``message``, in order; nothing for anything else."""
    if not isinstance(message, Mapping):
        return
    if message.get("type") == "function_call":  # a Responses output item
        yield from _call(message.get("name"), message.get("arguments"))
        return
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            yield from _call(function.get("name"), function.get("arguments"))
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        yield from _call(legacy.get("name"), legacy.get("arguments"))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                yield from _call(block.get("name"), block.get("input"))


def call_names(messages: Sequence[Any]) -> dict[str, str]:
    """The tool name of every call in ``messages`` with an id, by that id (chat
    ``tool_calls[].id``, Responses ``call_id``, Anthropic ``tool_use`` ``id``)."""
    names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("type") in _CALL_ITEMS:
            _name_call(names, message.get("call_id"), message.get("name"))
            continue
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, Mapping):
                function = call.get("function")
                if isinstance(function, Mapping):
                    _name_call(names, call.get("id"), function.get("name"))
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    _name_call(names, block.get("id"), block.get("name"))
    return names


def _name_call(names: dict[str, str], call_id: Any, name: Any) -> None:
    if isinstance(call_id, str) and isinstance(name, str):
        names[call_id] = name


def _call(name: Any, arguments: Any) -> Iterator[ToolCall]:
    if isinstance(name, str):
        yield ToolCall(name, arguments)


# Tool results -----------------------------------------------------------------------------------

# Responses-API items that carry a tool's output, and the field holding it.
_OUTPUT_ITEMS = {"function_call_output": "output", "custom_tool_call_output": "output"}
# Responses-API items that carry a call, and the field holding its arguments.
_CALL_ITEMS = {"function_call": "arguments", "custom_tool_call": "input"}
# Content part types of the Responses API that hold plain text.
_TEXT_PARTS = frozenset({"input_text", "output_text"})
# Prefix of the id derived for a legacy ``role: "function"`` result, which carries none.
LEGACY_ID_PREFIX = "fn-"


class ToolResult(NamedTuple):
    """Where one tool result sits in a message list, whatever the format.

    Attributes:
        position: The message's position in the list.
        block: For an Anthropic ``tool_result`` block, its position in the message's content;
            None when the whole message is the result.
        call_id: The id the result answers (``tool_call_id``, ``call_id``, ``tool_use_id``);
            for a legacy ``role: "function"`` message, which has none, an id derived from its
            name and body (``fn-<hash>``), stable as long as the body is.
        body: The result as the message holds it (text, or structured content).
        field: The key of the body in the message (or in the block).
    """

    position: int
    block: int | None
    call_id: str
    body: Any
    field: str


def tool_results(messages: Sequence[Any]) -> list[ToolResult]:
    """Every tool result in ``messages``, oldest first: OpenAI chat ``role: "tool"`` messages,
    legacy ``role: "function"`` messages, Responses ``function_call_output`` items and the
    ``tool_result`` blocks of Anthropic messages. Results without a usable id are left out
    (nothing could point at them)."""
    found: list[ToolResult] = []
    for index, message in enumerate(messages):
        # dict first: the ABC check of Mapping costs several times more, on every message.
        if type(message) is not dict and not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "system" or role == "assistant":
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id:
                found.append(ToolResult(index, None, call_id, message.get("content"), "content"))
            continue
        if role == "function":
            body = message.get("content")
            found.append(ToolResult(index, None, legacy_call_id(message), body, "content"))
            continue
        kind = message.get("type")
        field = _OUTPUT_ITEMS.get(kind) if isinstance(kind, str) else None
        if field is not None:
            call_id = message.get("call_id")
            if isinstance(call_id, str) and call_id:
                found.append(ToolResult(index, None, call_id, message.get(field), field))
            continue
        content = message.get("content")
        if role == "user" and isinstance(content, list):
            for block_index, block in enumerate(content):
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    call_id = block.get("tool_use_id")
                    if isinstance(call_id, str) and call_id:
                        found.append(
                            ToolResult(index, block_index, call_id, block.get("content"), "content")
                        )
    return found


def legacy_call_id(message: Mapping[str, Any]) -> str:
    """The id memstrata gives a legacy ``role: "function"`` result: ``fn-`` and 24 hex digits
    of the SHA-256 of its name and body (the format carries no call id)."""
    name = message.get("name")
    body = message.get("content")
    text = body if isinstance(body, str) else repr(body)
    seed = f"{name if isinstance(name, str) else ''}\x00{text}"
    return LEGACY_ID_PREFIX + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def with_tool_results(
    messages: Sequence[Message], bodies: Mapping[tuple[int, int | None], Any]
) -> list[Message]:
    """A new list with the tool results at ``(index, block)`` given new bodies.

    Messages (and blocks) that change are copied; every other message is the same object in
    the new list. The input is not mutated.
    """
    out = list(messages)
    by_index: dict[int, dict[int | None, Any]] = {}
    for (index, block), body in bodies.items():
        by_index.setdefault(index, {})[block] = body
    for index, changes in by_index.items():
        message = dict(out[index])
        for block, body in changes.items():
            if block is None:
                message[_body_field(message)] = body
            else:
                content = list(message["content"])
                content[block] = {**content[block], "content": body}
                message["content"] = content
        out[index] = message
    return out


def _body_field(message: Mapping[str, Any]) -> str:
    kind = message.get("type")
    if "role" not in message and isinstance(kind, str) and kind in _OUTPUT_ITEMS:
        return _OUTPUT_ITEMS[kind]
    return "content"


def countable(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` in the chat shape a token counter reads, counting what the model sees.

    Responses items without a role become their chat equivalent (a ``function_call`` an
    assistant message with one tool call, a ``function_call_output`` a tool message, any other
    item an assistant message holding its JSON); ``input_text`` / ``output_text`` parts become
    ``text`` parts. Chat and Anthropic messages come back as they are.
    """
    if "role" not in message:
        kind = message.get("type")
        if kind in _CALL_ITEMS:
            arguments = message.get(_CALL_ITEMS[kind])
            return {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": str(message.get("call_id", "")),
                        "type": "function",
                        "function": {
                            "name": str(message.get("name", "")),
                            "arguments": arguments
                            if isinstance(arguments, str)
                            else _json(arguments),
                        },
                    }
                ],
            }
        if kind in _OUTPUT_ITEMS:
            body = message.get(_OUTPUT_ITEMS[kind])
            return {
                "role": "tool",
                "tool_call_id": str(message.get("call_id", "")),
                "content": body if isinstance(body, (str, list)) else _json(body),
            }
        return {"role": "assistant", "content": _json(message)}
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS for part in content
    ):
        parts = [
            {**part, "type": "text"}
            if isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS
            else part
            for part in content
        ]
        return {**message, "content": parts}
    return message


def is_message(value: Any) -> bool:
    """Whether ``value`` is a message memstrata accepts: a dict with a ``role``, or a Responses
    item (a dict with a ``type``)."""
    return isinstance(value, dict) and ("role" in value or isinstance(value.get("type"), str))


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


# Snapshots --------------------------------------------------------------------------------------

_FLAT = frozenset({str, type(None)})


class Snapshot(NamedTuple):
    """What a message list held, position by position (see :func:`changes`).

    Attributes:
        tops: A shallow copy of every message. For a message whose values are all text or None
            (immutable), it is the whole content.
        deep: The positions, ascending, whose content the shallow copy does not hold (a list,
            a dict, a number at the top level).
        texts: The JSON text of the message at each of ``deep`` (None: not JSON data).
    """

    tops: list[Message]
    deep: list[int]
    texts: list[bytes | None]


EMPTY_SNAPSHOT = Snapshot([], [], [])


def changes(
    previous: Snapshot, messages: list[Message], *, shallow: Callable[[Message], bool] | None = None
) -> tuple[Snapshot, list[int]]:
    """The snapshot of ``messages`` and the positions, ascending, whose content differs from
    what ``previous`` holds at the same position (every position past its end included).

    The comparison is by content, never by the identity of objects: a message whose values are
    all text or None is compared with ``==`` against a shallow copy taken when it was seen (a
    list or dict edited in place cannot hide there, since such a message holds none); any
    other by its JSON text, which an edit in place at any depth changes. Both comparisons run
    in C over the whole list, so an unchanged prefix costs well under a microsecond a message;
    the JSON texts are compared through one encoding of all those messages, and one at a time
    only when that differs.

    ``shallow(copy)`` may declare a message's nested values irrelevant to the caller (the
    offload pass never reads below an assistant message's top level): such a message is
    compared by its top level only.
    """
    return _changes(previous, messages, shallow, None)


def _changes(
    previous: Snapshot,
    messages: list[Message],
    shallow: Callable[[Message], bool] | None,
    equal: range | None,
) -> tuple[Snapshot, list[int]]:
    """:func:`changes`; ``equal``: positions whose shallow copy is known to equal the message
    (:func:`realigned` compared them), so only the others are compared again."""
    n = len(messages)
    tops = previous.tops
    m = min(n, len(tops))
    # The previous copy on the left: its values are exact str or None, whose == compares text.
    if equal is not None:
        rest = [*range(min(equal.start, m)), *range(equal.stop, m)]
        changed: list[int] = [p for p in rest if tops[p] != messages[p]]
    elif tops == (messages if n == m else messages[:m]):
        changed = []  # the common case, in one call
    else:
        same = map(operator.eq, tops, messages)
        changed = list(compress(range(m), map(operator.not_, same)))
    k = bisect_left(previous.deep, m)
    deep = previous.deep[:k]
    now: list[bytes | None] = []
    if deep:
        before = previous.texts[:k]
        try:
            if _same_texts(before, [messages[i] for i in deep]):
                now, moved = before, []
            else:
                now = list(map(orjson.dumps, map(messages.__getitem__, deep)))
                moved = list(compress(deep, map(operator.ne, now, before)))
        except (TypeError, orjson.JSONEncodeError):
            now = [_json_or_none(messages[i]) for i in deep]
            moved = [i for i, a, b in zip(deep, now, before) if a is None or a != b]
        if moved:
            changed = sorted({*changed, *moved})
    if not changed and n == len(tops):
        return previous, changed
    new_tops = tops[:m]
    new_tops += map(dict, messages[m:])
    order, texts = list(deep), list(now)
    # A changed position takes its place in (or leaves) the deep ones: few move each call.
    for i in changed:
        new_tops[i] = dict(messages[i])
        j = bisect_left(order, i)
        held = j < len(order) and order[j] == i
        if _is_deep(new_tops[i], shallow):
            text = _json_or_none(messages[i])
            if held:
                texts[j] = text
            else:
                order.insert(j, i)
                texts.insert(j, text)
        elif held:
            del order[j], texts[j]
    # Which new messages hold more than text or None, in C; the predicate only for those.
    flat = map(_FLAT.issuperset, map(map, repeat(type), map(dict.values, new_tops[m:])))
    added = list(compress(range(m, n), map(operator.not_, flat)))
    if shallow is not None:
        added = [i for i in added if not shallow(new_tops[i])]
    order += added
    texts += map(_json_or_none, map(messages.__getitem__, added))
    return Snapshot(new_tops, order, texts), [*changed, *range(m, n)]


# How far a window may have slid between two calls for realigned() to find it.
MAX_SLIDE = 64


class _NeverEqual(dict):  # type: ignore[type-arg]
    """Stands at a position with no origin: unequal to every message, ``{}`` included."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True


_NEVER_EQUAL: Message = _NeverEqual()


def realigned(previous: Snapshot, messages: list[Message]) -> tuple[Snapshot, list[int] | None]:
    """``previous`` laid out to line up with ``messages`` when a window slid between the two
    lists (a conversation trimmed at its start, blocks injected before it), and where each of
    its positions came from in ``previous`` (-1: nowhere); ``(previous, None)`` when the lists
    line up as they are. Only a guess at which old message sits where: :func:`changes` then
    compares every position by content, so a wrong guess costs time, never a wrong answer."""
    aligned, origin, _ = _realigned(previous, messages)
    return aligned, origin


def compare(
    previous: Snapshot, messages: list[Message], *, shallow: Callable[[Message], bool] | None = None
) -> tuple[Snapshot, list[int], list[int] | None]:
    """:func:`realigned`, then :func:`changes` of ``messages`` against what it laid out:
    ``(snapshot, changed, origin)``. The same answers as the two calls, but the positions
    whose shallow copy the realignment already found equal are not compared again."""
    aligned, origin, equal = _realigned(previous, messages)
    snapshot, changed = _changes(aligned, messages, shallow, equal)
    return snapshot, changed, origin


def _realigned(
    previous: Snapshot, messages: list[Message]
) -> tuple[Snapshot, list[int] | None, range | None]:
    """:func:`realigned`, and the positions it found equal to their old message (a run)."""
    tops = previous.tops
    last = len(tops) - 1
    n = len(messages)
    if last < 0 or not n or (last < n and tops[last] == messages[last]):
        return previous, None, None
    anchor = tops[last]
    # Where the previous list's last message is now, the nearest first: the window's slide.
    found = None
    for distance in range(1, MAX_SLIDE + 1):
        for j in (last - distance, last + distance):
            if 0 <= j < n and messages[j] == anchor:
                found = j
                break
        if found is not None:
            break
    if found is None:
        return previous, None, None
    offset = last - found  # old position = new position + offset, past the slide point
    lo, hi = max(0, -offset), min(n, last + 1 - offset)
    # The positions up to the anchor that hold their old message slid (the conversation) are
    # one run, found in C: the whole range in one comparison when nothing else changed, else
    # each position compared slid and the run's start read off the end. Only the positions
    # around the run (blocks injected before it, new messages after it, a message edited
    # inside it) are looked at one by one, both slid and in place.
    slid: list[bool] = []
    if tops[lo + offset : hi + offset] == messages[lo:hi]:
        start = lo
    else:
        slid = list(map(operator.eq, tops[lo + offset : hi + offset], messages[lo:hi]))
        slid.reverse()
        start = hi - slid.index(False)  # the anchor itself is equal: the run is not empty
        slid.reverse()

    def origin_of(p: int) -> int:
        if lo <= p < start and slid[p - lo]:
            return p + offset
        return p if p <= last and tops[p] == messages[p] else -1

    before = [origin_of(p) for p in range(start)]
    after = [origin_of(p) for p in range(hi, n)]
    old_deep, old_texts = previous.deep, previous.texts
    texts = dict(zip(old_deep, old_texts)) if before or after else {}
    first, end = bisect_left(old_deep, start + offset), bisect_left(old_deep, hi + offset)
    deep = [p for p, q in enumerate(before) if q in texts]
    deep += map((-offset).__add__, old_deep[first:end])
    deep += [p for p, q in enumerate(after, hi) if q in texts]
    deep_texts = [texts[q] for q in before if q in texts]
    deep_texts += old_texts[first:end]
    deep_texts += [texts[q] for q in after if q in texts]
    origin = [*before, *range(start + offset, hi + offset), *after]
    aligned = [tops[q] if q >= 0 else _NEVER_EQUAL for q in before]
    aligned += tops[start + offset : hi + offset]
    aligned += [tops[q] if q >= 0 else _NEVER_EQUAL for q in after]
    return Snapshot(aligned, deep, deep_texts), origin, range(start, hi)


def _is_deep(top: Message, shallow: Callable[[Message], bool] | None) -> bool:
    """Whether the shallow copy ``top`` misses part of its message's content."""
    return not _FLAT.issuperset(map(type, top.values())) and (shallow is None or not shallow(top))


def _same_texts(texts: list[bytes | None], messages: list[Message]) -> bool:
    """Whether every message's JSON text is the text at its place in ``texts``, told by one
    encoding of the whole list: JSON values delimit themselves, so the list's text is the texts
    joined exactly when each text is."""
    if None in texts:
        return False
    return orjson.dumps(messages) == b"[" + b",".join(texts) + b"]"  # type: ignore[arg-type]


def _json_or_none(message: Message) -> bytes | None:
    try:
        return orjson.dumps(message)
    except (TypeError, orjson.JSONEncodeError):
        return None
