"""A user's schema for structured state: a pydantic model class or a JSON Schema dict, checked
whole (the merged state, never a patch) and shown to the model as JSON Schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memstrata.exceptions import InvalidInputError


def state_checker(schema: Any) -> Any:
    """The whole-state check of a pydantic model or a JSON Schema dict: a function from a
    state to its violations, ``"$.path: message"`` each."""
    if schema is None:
        return lambda state: []
    if isinstance(schema, Mapping):
        import jsonschema_rs

        _refuse_remote_refs(schema)

        try:
            validator = jsonschema_rs.validator_for(dict(schema))
        except (jsonschema_rs.ValidationError, ValueError, TypeError) as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidInputError(f"schema is not a valid JSON Schema: {first_line}") from None

        def check_json_schema(state: Any) -> list[str]:
            try:
                # A state that passes (nearly every one) is answered by is_valid, in about half
                # the time iter_errors takes to find no violation.
                if validator.is_valid(state):
                    return []
                return [
                    f"{json_path(err.instance_path)}: {err.message}"
                    for err in validator.iter_errors(state)
                ]
            except (TypeError, ValueError, RecursionError) as exc:  # nesting past its limit
                return [f"$: cannot be checked: {exc}"]

        return check_json_schema
    validate = getattr(schema, "model_validate", None)
    if validate is not None and not isinstance(schema, type):
        raise InvalidInputError(
            f"schema must be a pydantic model class, not an instance of it: "
            f"pass {type(schema).__name__}, not {type(schema).__name__}(...)"
        )
    if validate is None:
        raise InvalidInputError(
            f"schema must be a pydantic model class or a JSON Schema dict, got {schema!r}"
        )

    def check_pydantic(state: Any) -> list[str]:
        try:
            validate(state)
        except Exception as exc:  # pydantic.ValidationError, without importing pydantic
            errors = getattr(exc, "errors", None)
            if errors is None:
                return [str(exc)]
            return [f"{json_path(e['loc'])}: {e['msg']}" for e in errors()]
        return []

    return check_pydantic


def json_path(parts: Any) -> str:
    """``$.a[0].b`` for the path parts ``("a", 0, "b")``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def json_schema_of(schema: Any) -> dict[str, Any]:
    """``schema`` as a JSON Schema object (a copy; a pydantic model's title left out)."""
    full = dict(schema) if isinstance(schema, Mapping) else schema.model_json_schema()
    full.pop("title", None)
    full["type"] = "object"
    return full


def required_fields(schema: Any) -> list[str]:
    """The top-level fields every state must hold (a patch may leave them out once stored)."""
    required = json_schema_of(schema).get("required", [])
    return [str(name) for name in required] if isinstance(required, list) else []


def _refuse_remote_refs(schema: Any) -> None:
    """Refuses a ``$ref`` to anything but the schema itself (``#...``): resolving one would
    fetch it over the network when the layer is built."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                raise InvalidInputError(
                    f"schema has a $ref to {ref!r}: only local references (#/...) are "
                    "resolved; inline the referenced schema"
                )
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
