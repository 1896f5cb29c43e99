"""Argument checks: the tools' arguments (a :class:`~memstrata.exceptions.ToolError` the model
can read) and the layer's options (an :class:`~memstrata.exceptions.InvalidInputError`)."""

from __future__ import annotations

import math
from typing import Any

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers.mind.tools import MAX_CONTENT_CHARS, MAX_TAG_CHARS, MAX_TAGS
from memstrata.stores import Namespace


def check_content(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{what} must be a string", code="invalid_arguments")
    require_unicode(value, what)
    text = value.strip()
    if not text:
        raise ToolError(f"{what} is empty", code="invalid_arguments")
    if len(text) > MAX_CONTENT_CHARS:
        raise ToolError(
            f"{what} is {len(text):,} characters; the limit is {MAX_CONTENT_CHARS:,}",
            code="invalid_arguments",
        )
    return text


def check_tags(tags: Any) -> list[str]:
    if not isinstance(tags, (list, tuple, set, frozenset)):
        raise ToolError("tags must be a list of strings", code="invalid_arguments")
    out = list(tags)
    if len(out) > MAX_TAGS:
        raise ToolError(f"{len(out)} tags; the limit is {MAX_TAGS}", code="invalid_arguments")
    for tag in out:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > MAX_TAG_CHARS:
            raise ToolError(
                f"each tag must be a non-empty string of at most {MAX_TAG_CHARS} characters, "
                f"got {tag!r}",
                code="invalid_arguments",
            )
        require_unicode(tag, "a tag")
    return list(dict.fromkeys(out))


def require_unicode(text: str, what: str) -> None:
    """Refuses a lone surrogate now: a draft holding one could not be stored, and the flush
    at the end of the run would then fail as a whole."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(
            f"{what} is not valid Unicode (it holds a lone surrogate)", code="invalid_arguments"
        ) from None


def check_int(value: Any, what: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an int >= {minimum}, got {value!r}")


def check_number(value: Any, what: str, *, low: float, high: float | None = None) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidInputError(f"{what} must be a number {bounds}, got {value!r}")


def parse_namespace(namespace: Namespace | str) -> Namespace:
    from memstrata.stores.base import validate_namespace

    if isinstance(namespace, str):
        namespace = tuple(namespace.split("/"))
    try:
        return validate_namespace(namespace)
    except InvalidInputError as exc:
        raise InvalidInputError(f"namespace: {exc}") from None
