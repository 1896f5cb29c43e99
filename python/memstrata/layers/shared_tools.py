"""The model's tools over a shared memory: ``memory_list``, ``memory_read`` and ``memory_write``,
their argument schemas, and what each answers."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers.shared_entries import KINDS, MAX_TEXT_CHARS, _Conflict, memory_keys
from memstrata.prompts import (
    MEMORY_LIST_DESCRIPTION,
    MEMORY_READ_DESCRIPTION,
    MEMORY_WRITE_DESCRIPTION,
)
from memstrata.stores.base import check_encodable
from memstrata.tools import Tool, frozen

if TYPE_CHECKING:
    from memstrata.layers.shared_memory import SharedMemory

LIST_CAP = 200
MAX_SHARED_KEY_LENGTH = 256
MEMORY_WRITE_SOURCE = "memory_write"
# What a key may not hold: C0 controls, DEL and C1 controls (one search, not a call per
# character).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

_KIND_FILTER = {
    "anyOf": [
        {"type": "string", "enum": list(KINDS)},
        {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
    ]
}
# The tools' schemas, built once and read-only: every run shares them.
_LIST_SCHEMA = frozen(
    {
        "type": "object",
        "properties": {
            "kind": {**_KIND_FILTER, "type": ["string", "array"]},
            "key_prefix": {"type": "string"},
            "sources": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": False,
    }
)
_READ_SCHEMA = frozen(
    {
        "type": "object",
        "properties": {"keys": {"type": "array", "items": {"type": "string"}, "maxItems": 200}},
        "required": ["keys"],
        "additionalProperties": False,
    }
)
_WRITE_SCHEMA = frozen(
    {
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "Suffix; stored as shared:<key>."},
            "value": {},
            "title": {"type": "string", "maxLength": MAX_TEXT_CHARS["title"]},
            "description": {"type": "string", "maxLength": MAX_TEXT_CHARS["description"]},
            "expected_version": {
                "type": "integer",
                "minimum": 0,
                "description": "The version (from memory_read) this write replaces; 0: the key "
                "must not exist yet. Refused as a conflict if the entry is at another one.",
            },
            "overwrite": {
                "type": "boolean",
                "description": "true: replace whatever the key holds, unread (not with "
                "expected_version).",
            },
        },
        "required": ["key", "value"],
        "additionalProperties": False,
    }
)


def tool_list(memory: SharedMemory, args: dict[str, Any]) -> dict[str, Any]:
    """:meth:`SharedMemory.tool_list <memstrata.layers.shared_memory.SharedMemory.tool_list>`."""
    _check_args(args, "memory_list")
    matches = memory._matching(
        kind=args.get("kind"), key_prefix=args.get("key_prefix"), sources=args.get("sources")
    )
    newest = matches[-LIST_CAP:]
    return {
        "total": len(matches),
        "returned": len(newest),
        "truncated": len(matches) > LIST_CAP,
        "entries": [dict(record.listed) for record in newest],
    }


def tool_read(
    memory: SharedMemory, args: dict[str, Any], seen: dict[str, int] | None = None
) -> dict[str, Any]:
    """:meth:`SharedMemory.tool_read <memstrata.layers.shared_memory.SharedMemory.tool_read>`."""
    _check_args(args, "memory_read", required=("keys",))
    keys = args["keys"]
    if not isinstance(keys, (list, tuple)) or not all(isinstance(key, str) for key in keys):
        # A string would be read one key per character.
        raise InvalidInputError(f"memory_read's keys must be a list of str, got {keys!r:.80}")
    for index, key in enumerate(keys):
        # No stored key holds a lone surrogate, and echoed back in "missing" it would make the
        # answer unencodable as JSON for the host sending it to the model.
        check_encodable(key, f"keys[{index}]")
    found: dict[str, Any] = {}
    missing: list[str] = []
    with memory._lock:
        memory._refresh()
        records = {key: memory._entries.get(key) for key in dict.fromkeys(args["keys"])}
    for key, record in records.items():
        if record is None:
            missing.append(key)
        else:
            found[key] = record.read_view()
        if seen is None:
            continue
        if record is None or record.version:
            seen[key] = 0 if record is None else record.version
        else:  # read at a version not known (beside an unreadable row): written over unread
            seen.pop(key, None)
    return {"entries": found, "missing": missing}


def tool_write(
    memory: SharedMemory, args: dict[str, Any], seen: dict[str, int] | None = None
) -> dict[str, Any]:
    """:meth:`SharedMemory.tool_write <memstrata.layers.shared_memory.SharedMemory.tool_write>`."""
    _check_args(args, "memory_write", required=("key", "value"))
    suffix = args["key"]
    if not isinstance(suffix, str):
        raise InvalidInputError(f"memory_write's key must be a str, got {type(suffix).__name__}")
    if suffix.startswith("shared:"):
        suffix = suffix[len("shared:") :]
    if not suffix:
        raise ToolError("key is empty; pass the part after 'shared:'", code="invalid_arguments")
    if len(suffix) > MAX_SHARED_KEY_LENGTH:
        raise ToolError(
            f"key is {len(suffix)} characters; the limit is {MAX_SHARED_KEY_LENGTH}",
            code="invalid_arguments",
        )
    if _CONTROL.search(suffix):
        raise ToolError("key contains control characters", code="invalid_arguments")
    key = memory_keys.shared(suffix)
    expected, overwrite = args.get("expected_version"), args.get("overwrite", False)
    if expected is not None and (type(expected) is not int or expected < 0):
        raise ToolError(
            f"expected_version must be a version from memory_read (an integer >= 0), "
            f"got {expected!r}",
            code="invalid_arguments",
        )
    if type(overwrite) is not bool:
        raise ToolError(
            f"overwrite must be true or false, got {overwrite!r}", code="invalid_arguments"
        )
    if overwrite and expected is not None:
        # One asks to replace the entry whatever it is, the other only at one version: a write
        # honouring either would break the other's promise.
        raise ToolError(
            "overwrite: true and expected_version cannot be given together; pass "
            "expected_version to replace only that version, or overwrite: true to replace "
            "the entry whatever version it is at",
            code="invalid_arguments",
        )
    if expected is None and not overwrite and seen is not None:
        expected = seen.get(key)  # never read: written over unread, its trace in the result
    try:
        record, replaced = memory._put(
            key,
            "shared",
            args["value"],
            MEMORY_WRITE_SOURCE,
            args.get("title"),
            args.get("description"),
            expected,
        )
    except _Conflict as exc:
        raise ToolError(str(exc), code="conflict") from None
    if seen is not None and record.version:
        seen[key] = record.version
    result = {
        "ok": True,
        "key": record.meta.key,
        "kind": "shared",
        "createdAt": record.listed["createdAt"],  # iso_ms(created_at), made with the record
    }
    if record.version:
        result["version"] = record.version
    if replaced is not None:
        result["replaced"] = replaced.to_json()
    return result


def _check_args(args: Any, tool: str, required: tuple[str, ...] = ()) -> None:
    """The arguments a program passes to a tool's method directly (the model's are checked
    against the tool's schema first): an object holding the required fields."""
    if not isinstance(args, Mapping):
        raise InvalidInputError(f"{tool}'s arguments must be a dict, got {type(args).__name__}")
    missing = [name for name in required if name not in args]
    if missing:
        raise InvalidInputError(f"{tool}'s arguments lack {', '.join(missing)}")


def tools_for(
    memory: SharedMemory,
    seen: dict[str, int],
    wrap: Callable[[Callable[[dict[str, Any]], Any]], Callable[[dict[str, Any]], Any]] = (
        lambda write: write
    ),
) -> list[Tool]:
    """``memory_list``, ``memory_read`` and ``memory_write`` (``wrap`` around its handler) for
    one caller, whose versions read go to ``seen``."""

    def read(args: dict[str, Any]) -> Any:
        return memory.tool_read(args, seen)

    def write(args: dict[str, Any]) -> Any:
        return memory.tool_write(args, seen)

    return [
        Tool("memory_list", MEMORY_LIST_DESCRIPTION, _LIST_SCHEMA, memory.tool_list),
        Tool("memory_read", MEMORY_READ_DESCRIPTION, _READ_SCHEMA, read),
        Tool("memory_write", MEMORY_WRITE_DESCRIPTION, _WRITE_SCHEMA, wrap(write)),
    ]
