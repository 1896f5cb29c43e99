"""The notice that stands in for an offloaded tool result: writing one (its header line naming
the call_id, then a summary within its token budget), and telling one of
:class:`~memstrata.layers.tool_results.ToolResults`' own notices from a tool's output that only
looks like one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from memstrata.layers.tool_result_digest import _fit_prefix, digest
from memstrata.prompts import TOOL_RESULT_OFFLOADED, quote_notices
from memstrata.redaction import redacted_for_log
from memstrata.tokens import TokenCounter, fits_exactly

logger = logging.getLogger("memstrata.tool_results")

Summarizer = Callable[[str], str]

# The first line of a notice, whole; a summary of at most summary_tokens follows it (plus a few
# tokens quote_notices may add).
_NOTICE_HEADER = re.compile(
    re.escape(TOOL_RESULT_OFFLOADED)
    .replace(re.escape("{call_id}"), r"(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]*)", 1)
    .replace(re.escape("{call_id}"), "(?P=id)", 1)
    .replace(re.escape("{chars}"), "[0-9]+")
    .replace(re.escape("{tokens}"), "[0-9]+")
    + r"(?:\n|\Z)"
)
_SUMMARY_SLACK = 16


def notice(call_id: str, text: str, tokens: int, summary: str) -> str:
    """The notice replacing ``text`` (``tokens`` long), stored under ``call_id``."""
    header = TOOL_RESULT_OFFLOADED.format(call_id=call_id, chars=len(text), tokens=tokens)
    # The summary quotes the tool's own text: it may not pass for a notice of ours.
    return f"{header}\n{quote_notices(summary)}"


def notice_call_id(text: str, summary_tokens: int, tokens: TokenCounter) -> str | None:
    """The call_id ``text`` points to if it is a notice (its first line whole, then no more
    than a summary of ``summary_tokens``), else None: a tool's output that only opens like a
    notice (a copy of one, then anything) is a result of its own, offloaded and kept as any
    other, never taken for the result the copy names."""
    header = _NOTICE_HEADER.match(text)
    if header is None:
        return None
    rest = text[header.end() :]
    if tokens.count(rest) > summary_tokens + _SUMMARY_SLACK:
        return None
    return header.group("id")


def summary(
    text: str, summarizer: Summarizer | None, summary_tokens: int, tokens: TokenCounter
) -> str:
    """The summary that stands in for ``text``: the summarizer's, cut to ``summary_tokens``,
    else (no summarizer, or one that fails or returns something other than text) the
    digest."""
    if summarizer is not None:
        try:
            summarized = summarizer(text)
            if not isinstance(summarized, str):
                raise TypeError(f"summarizer returned {type(summarized).__name__}, not str")
            return _trim(summarized.strip(), summary_tokens, tokens)
        except Exception as exc:
            logger.warning(
                "summarizer failed (%s: %s); using the digest",
                type(exc).__name__,
                # Its error often quotes its request: a URL with a key in its query.
                redacted_for_log(str(exc)),
            )
    return digest(text, max_tokens=summary_tokens, tokens=tokens)


def _trim(text: str, summary_tokens: int, tokens: TokenCounter) -> str:
    if fits_exactly(tokens, text, summary_tokens):
        return text
    end = _fit_prefix(text, summary_tokens - 2, tokens)
    while True:
        trimmed = text[:end].rstrip() + " …"
        if fits_exactly(tokens, trimmed, summary_tokens):
            return trimmed
        if end == 0:
            return ""
        end = end * 9 // 10
