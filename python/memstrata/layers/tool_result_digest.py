"""The deterministic extractive digest that stands in for an offloaded tool result when no
summarizer is given, and the longest prefix of a text within a token budget (which also cuts a
summarizer's output and a ``read_tool_result`` page).
"""

from __future__ import annotations

from typing import Any

import orjson

from memstrata._core import estimate_prefix
from memstrata.prompts import one_line
from memstrata.tokens import EstimatingCounter, TokenCounter, exact_count, fits_exactly

DEFAULT_SUMMARY_TOKENS = 300
_LINE_CHARS = 160  # longest line the digest shows before cutting it


def digest(
    text: str, *, max_tokens: int = DEFAULT_SUMMARY_TOKENS, tokens: TokenCounter | None = None
) -> str:
    """A deterministic extractive summary of ``text`` within ``max_tokens``.

    Size and line count; for JSON, its top-level shape (keys and the type of each value, or the
    length of an array and the keys of its first item); then as many head and tail lines as fit
    (long lines cut), the head first.
    """
    counter = tokens if tokens is not None else EstimatingCounter()
    lines = text.splitlines()
    header = [f"size: {len(text):,} chars, {len(lines):,} lines"]
    shape = _json_shape(text)
    if shape:
        header.append(f"json: {shape}")
    out = "\n".join(header)
    used = exact_count(counter, out, keep=False)
    if used >= max_tokens:
        return out[: _fit_prefix(out, max_tokens, counter)]
    head: list[str] = []
    tail: list[str] = []
    lo, hi = 0, len(lines) - 1
    take_head = True
    # Alternate two head lines for one tail line: the start usually says what the result is.
    turn = 0
    while lo <= hi:
        shown = _shown_line(lines[lo] if take_head else lines[hi])
        cost = exact_count(counter, shown, keep=False) + 1
        if used + cost + 4 > max_tokens:
            break
        used += cost
        if take_head:
            head.append(shown)
            lo += 1
        else:
            tail.append(shown)
            hi -= 1
        turn += 1
        take_head = turn % 3 != 2
    # Lines were counted one by one; the digest as a whole is counted exactly, and loses the
    # line taken last until it fits.
    while True:
        parts = [out]
        if head:
            parts.append("head:\n" + "\n".join(head))
        if len(head) + len(tail) < len(lines):
            parts.append(f"… {len(lines) - len(head) - len(tail):,} lines not shown …")
        if tail:
            parts.append("tail:\n" + "\n".join(reversed(tail)))
        shown_text = "\n".join(parts)
        if fits_exactly(counter, shown_text, max_tokens):
            return shown_text
        if not (head or tail):
            return out
        turn -= 1
        (head if turn % 3 != 2 else tail).pop()


def _shown_line(line: str) -> str:
    """``line`` as the digest shows it: one line (:func:`~memstrata.prompts.one_line`), cut to
    ``_LINE_CHARS`` characters. Only as much of a long line is read as that takes: quoting the
    notice openings of a line of megabytes, each read character by character, took seconds.
    ``one_line`` maps a start of a line to a start of its result, so an opening shown whole
    lies whole in the part read and is quoted as in the whole line; only one the cut leaves
    unfinished may keep its bracket, and shows no notice."""
    size = _LINE_CHARS * 4
    while True:
        shown = one_line(line[:size])
        if len(shown) > _LINE_CHARS:
            return shown[:_LINE_CHARS] + " …"
        if size >= len(line):
            return shown
        size *= 4  # the part read was mostly characters one_line drops


def _json_shape(text: str) -> str:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return ""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ""
    if isinstance(value, dict):
        fields = [f"{k}: {_describe(v)}" for k, v in list(value.items())[:20]]
        more = f", … {len(value) - 20} more keys" if len(value) > 20 else ""
        return f"object with {len(value)} keys {{{', '.join(fields)}{more}}}"
    if isinstance(value, list):
        first = f"; first item: {_describe(value[0], keys=True)}" if value else ""
        return f"array of {len(value)} items{first}"
    return ""


def _describe(value: Any, *, keys: bool = False) -> str:
    if isinstance(value, dict):
        if keys:
            return "object {" + ", ".join(list(value)[:15]) + ("…" if len(value) > 15 else "") + "}"
        return f"object({len(value)} keys)"
    if isinstance(value, list):
        return f"array({len(value)})"
    if isinstance(value, str):
        return f"string({len(value)})"
    if isinstance(value, bool):
        return "bool"
    if value is None:
        return "null"
    return "number"


def _fit_prefix(text: str, max_tokens: int, counter: TokenCounter) -> int:
    """The length of a prefix of ``text`` within ``max_tokens`` counted exactly, and of at most
    ``max_tokens * 16`` characters: the whole text if it fits, else the longest prefix by the
    counter's estimate (a bisection of its prefixes' counts), shortened until its exact count
    fits. With the library's own estimator the bisection is
    :func:`~memstrata._core.estimate_prefix`, the same search in one pass over the text
    (estimating each probed prefix on its own takes ~15 estimates of ~13 KB for a page of a
    27 KB result), and the whole text is counted only as far as the budget reaches."""
    if max_tokens < 0:
        return 0
    if fits_exactly(counter, text, max_tokens):
        return len(text)
    cap = max(max_tokens, 1) * 16
    if type(counter) is EstimatingCounter:  # a subclass may count otherwise
        lo = estimate_prefix(text[:cap], max_tokens, model=counter.encoding)
    else:
        lo, hi = 0, min(len(text), cap)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if counter.count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
    while lo > 0:
        tokens = exact_count(counter, text[:lo], keep=False)
        if tokens <= max_tokens:
            return lo
        lo = min(lo - 1, lo * max_tokens // tokens)
    return 0
