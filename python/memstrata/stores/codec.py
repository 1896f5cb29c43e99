"""JSON encoding of stored values: the one place that turns values into bytes and back.

Values are validated before encoding, because orjson would silently write NaN as ``null`` and
a value that changes on its way into storage is data lost. Validation reuses the Rust walker
(``strip_unsafe_keys`` with no keys), which names the offending path.
"""

from __future__ import annotations

from typing import Any

import orjson

from memstrata._core import strip_unsafe_keys
from memstrata.exceptions import (
    InvalidInputError,
    InvalidJSONError,
    LimitExceededError,
    NestingTooDeepError,
)

# orjson refuses to serialise past this depth; deeper values get a clear error rather than
# orjson's bare "Recursion limit reached".
MAX_STORED_DEPTH = 254
# The ceiling on one stored value, whatever the backend: far above what any layer writes
# (their own limits are lower and configurable), low enough that one runaway write cannot
# bloat the database or a PostgreSQL row. Read at every write, so a deployment can change it.
MAX_VALUE_BYTES = 16 << 20


def dumps(value: Any, *, validated: bool = False, encoded: bytes | None = None) -> bytes:
    """Validates ``value`` as JSON data and encodes it; raises a memstrata error naming the path.

    ``validated=True`` skips the walk for a value a kernel has just produced (the result of
    ``strip_unsafe_keys`` or ``deep_merge`` is JSON data, every number finite); the encoding
    limits still apply. ``encoded`` is the value's JSON text as the caller already holds it (any
    whitespace, e.g. the indented text a working memory shows the model): it is stored as it
    is, after the size check, and the caller vouches that it encodes ``value``.
    """
    if encoded is not None:
        if type(encoded) is not bytes:
            raise InvalidInputError(f"encoded must be bytes, got {type(encoded).__name__}")
        return _within_limit(encoded)
    if not validated:
        strip_unsafe_keys(value, keys=())
    try:
        data = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        if "Recursion" in str(exc):
            raise NestingTooDeepError(
                f"value nests deeper than {MAX_STORED_DEPTH} levels, the storage limit",
                path="$",
                limit=MAX_STORED_DEPTH,
            ) from None
        where = _lone_surrogate_at(value) if "surrogates" in str(exc) else None
        if where is not None:
            raise InvalidInputError(
                f"value cannot be stored as JSON: {where} holds a lone surrogate, which UTF-8 "
                "cannot encode"
            ) from None
        raise InvalidInputError(f"value cannot be stored as JSON: {exc}") from None
    return _within_limit(data)


def _lone_surrogate_at(value: Any) -> str | None:
    """Where in ``value`` a text holds a lone surrogate (``$.profile.name``, ``the key
    $.notes['\\ud800']``), for the error naming it: orjson only says that one does."""
    pending: list[tuple[str, Any]] = [("$", value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return path
        elif isinstance(item, dict):
            for key, sub in item.items():
                # repr shows a lone surrogate as its escape, so the message naming it encodes.
                child = (
                    path
                    if not isinstance(key, str)
                    else f"{path}.{key}"
                    if key.isidentifier()
                    else f"{path}[{key!r}]"
                )
                if isinstance(key, str) and not _encodes(key):
                    return f"the key {child}"
                pending.append((child, sub))
        elif isinstance(item, (list, tuple)):
            pending.extend((f"{path}[{index}]", sub) for index, sub in enumerate(item))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _within_limit(data: bytes) -> bytes:
    if len(data) > MAX_VALUE_BYTES:
        raise LimitExceededError(
            f"value is {len(data):,} bytes of JSON; the limit for one stored value is "
            f"{MAX_VALUE_BYTES:,} (memstrata.stores.codec.MAX_VALUE_BYTES)",
            setting="MAX_VALUE_BYTES",
            size=len(data),
            limit=MAX_VALUE_BYTES,
        )
    return data


def loads(data: bytes | str, namespace: str | None = None, key: str | None = None) -> Any:
    """Decodes a stored value. One that is not JSON (another program wrote the row: a file's
    column takes any bytes) raises InvalidJSONError naming its record, the namespace given as
    stored (encoded), rather than the parser's bare complaint."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        from memstrata.stores.base import decode_namespace

        where = "" if key is None else f" of key {key!r}"
        if namespace is not None:
            where += f" in namespace {decode_namespace(namespace)!r}"
        raise InvalidJSONError(
            f"the stored value{where} is not valid JSON ({exc}); memstrata never writes such a"
            " value: another program changed it"
        ) from None
