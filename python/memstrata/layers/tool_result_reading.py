"""Reading an offloaded tool result back: the ``read_tool_result`` tool a model calls, and the
page of verbatim text it answers.

Pages are cut by characters: ``offset`` is a character offset into the text, and each page
holds at most ``max_tokens`` tokens, ending at a line break when one is near its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers.tool_result_digest import _fit_prefix
from memstrata.layers.tool_result_storage import _Backend
from memstrata.prompts import READ_TOOL_RESULT_DESCRIPTION
from memstrata.safe_files import check_file_id
from memstrata.tokens import TokenCounter, exact_count
from memstrata.tools import Tool

DEFAULT_PAGE_TOKENS = 4000
MAX_PAGE_TOKENS = 32_000


def read_page(
    backend: Callable[[], _Backend],
    tokens: TokenCounter,
    call_id: str,
    offset: int,
    max_tokens: int,
) -> dict[str, Any]:
    """One page of the result stored under ``call_id``, read from ``backend()`` once the
    arguments are checked (see :meth:`ToolResults.read_tool_result
    <memstrata.layers.tool_results.ToolResults.read_tool_result>`)."""
    check_file_id(call_id)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_PAGE_TOKENS
    ):
        raise InvalidInputError(
            f"max_tokens must be an int from 1 to {MAX_PAGE_TOKENS}, got {max_tokens!r}"
        )
    # A page holds at most max_tokens * 16 characters (see _fit_prefix), and one more
    # tells whether anything follows.
    found = backend().read(call_id, offset, max(max_tokens, 1) * 16 + 1)
    if found is None:
        raise ToolError(f"no tool result is stored under call_id {call_id!r}", code="not_found")
    rest, total, earlier = found
    if offset > total:
        raise InvalidInputError(f"offset {offset} is past the end ({total} chars)")
    end = _fit_prefix(rest, max_tokens, tokens)
    if end == 0 and rest:
        # An empty page would point back at the same offset: a model paging on would loop.
        need = exact_count(tokens, rest[0], keep=False)
        raise InvalidInputError(
            f"max_tokens {max_tokens} is too small for the text at offset {offset}: its "
            f"next character alone is {need} tokens"
        )
    if end < len(rest):
        # Prefer to end the page at a line break in its last fifth.
        cut = rest.rfind("\n", end - end // 5, end)
        if cut > 0:
            end = cut + 1
    page_end = offset + end
    page: dict[str, Any] = {
        "call_id": call_id,
        "content": rest[:end],
        "offset": offset,
        "next_offset": page_end if page_end < total else None,
        "total_chars": total,
    }
    if earlier:
        page["earlier"] = list(earlier)
    return page


def read_tool(read: Callable[[str, int, int], dict[str, Any]]) -> Tool:
    """The ``read_tool_result`` tool, answering with ``read(call_id, offset, max_tokens)``;
    bad arguments come back as an ``invalid_arguments`` tool error."""

    def handler(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return read(
                args["call_id"],
                args.get("offset", 0),
                args.get("max_tokens", DEFAULT_PAGE_TOKENS),
            )
        except InvalidInputError as exc:
            raise ToolError(str(exc), code="invalid_arguments") from None

    return Tool(
        name="read_tool_result",
        description=READ_TOOL_RESULT_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "minLength": 1, "maxLength": 128},
                "offset": {"type": "integer", "minimum": 0},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_TOKENS},
            },
            "required": ["call_id"],
            "additionalProperties": False,
        },
        handler=handler,
    )
