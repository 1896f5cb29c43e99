"""JSON Schema checks of a structured state: in full, or only where a merge changed it.

A working memory checks its whole state against its schema on every update. For a large state
and a small patch almost all of that work re-checks subtrees the patch never reached, which
``deep_merge`` hands back as the very same objects. :class:`StateSchema` checks only the changed
parts when the schema allows it, with the same verdict and the same violation messages as a
full check.

Why that is exact. Take a state ``old`` known to satisfy the schema, and ``new`` the result of
merging ``patch`` into it. At an object node whose schema is *local* (its keywords only
constrain each member on its own, plus ``required``/``minProperties``/``maxProperties`` on the
member set), ``new`` satisfies the node's schema exactly when its member set passes those three
and every member passes the subschemas for its key. A member the patch did not name is the same
object it was in ``old`` under the same key, so it still passes; only the members the patch
names need checking, by recursing where the member's schema is local too, or by checking the
member whole. Anything else (``$ref`` anywhere in the schema, combinators, ``enum``/``const`` on
an object, dependencies, ``unevaluatedProperties``, a pydantic model) is checked in full.

The caller guarantees ``old`` was checked: a working memory only merges into a state it loaded
and checked, or one of its own checked updates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memstrata.exceptions import InvalidInputError

Violations = list[str]

# Keywords that leave an object node "local": each member is judged on its own key and value,
# and the member set only by the three counted keywords.
_MEMBER_KEYWORDS = frozenset(
    ("properties", "patternProperties", "additionalProperties", "propertyNames")
)
_SET_KEYWORDS = frozenset(("required", "minProperties", "maxProperties"))
_NEUTRAL_KEYWORDS = frozenset(
    (
        "type",
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
    )
)
_LOCAL_KEYWORDS = _MEMBER_KEYWORDS | _SET_KEYWORDS | _NEUTRAL_KEYWORDS
_MISSING = object()


def json_path(parts: Any) -> str:
    """``$.a[0].b`` for the path parts ``("a", 0, "b")``."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _mentions_ref(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return any(
            key in ("$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor")
            or _mentions_ref(value)
            for key, value in schema.items()
        )
    if isinstance(schema, list):
        return any(_mentions_ref(value) for value in schema)
    return False


class StateSchema:
    """A JSON Schema (a dict) compiled for checking working-memory states.

    Args:
        schema: The JSON Schema.

    Raises:
        InvalidInputError: The schema is not a valid JSON Schema.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema_rs

        self._jsonschema_rs = jsonschema_rs
        self.schema = dict(schema)
        self._root = self._compile(self.schema)
        # References resolve against the whole document, so a subschema cannot be checked on
        # its own: such schemas are always checked in full.
        self.partial = not _mentions_ref(self.schema)
        # id(subschema) -> (subschema, its validator); the subschema is kept so its id stays
        # its own.
        self._validators: dict[int, tuple[Any, Any]] = {id(self.schema): (self.schema, self._root)}
        self._derived_schemas: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}

    def _compile(self, schema: Any) -> Any:
        try:
            return self._jsonschema_rs.validator_for(schema)
        except (self._jsonschema_rs.ValidationError, ValueError, TypeError) as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidInputError(f"schema is not a valid JSON Schema: {first_line}") from None

    def _validator(self, schema: Any) -> Any:
        kept = self._validators.get(id(schema))
        if kept is None or kept[0] is not schema:
            kept = (schema, self._compile(schema))
            self._validators[id(schema)] = kept
        return kept[1]

    def violations(self, state: Any) -> Violations:
        """Every violation of the whole state, as ``"$.path: message"``."""
        return self._whole(self.schema, state, ())

    def violations_after_merge(self, old: Any, new: Any, patch: Any) -> Violations:
        """The violations of ``new``, the merge of ``patch`` into ``old`` (which satisfies the
        schema), checking only what the patch reached where the schema allows it."""
        if not self.partial:
            return self.violations(new)
        return self._changed(self.schema, old, new, patch, ())

    def _whole(self, schema: Any, value: Any, path: tuple[Any, ...]) -> Violations:
        return [
            f"{json_path((*path, *err.instance_path))}: {err.message}"
            for err in self._validator(schema).iter_errors(value)
        ]

    def _changed(
        self, schema: Any, old: Any, new: Any, patch: Any, path: tuple[Any, ...]
    ) -> Violations:
        if not (
            isinstance(schema, dict)
            and type(new) is dict
            and type(old) is dict
            and type(patch) is dict
            and schema.keys() <= _LOCAL_KEYWORDS
        ):
            return self._whole(schema, new, path)
        out = self._member_set(schema, new, path)
        properties = schema.get("properties") or {}
        patterned = bool(schema.get("patternProperties"))
        for key in patch:
            child = new.get(key, _MISSING)
            if child is _MISSING:
                continue  # removed (nulls="delete") or stripped: the member set was checked
            before = old.get(key, _MISSING)
            if child is before:
                continue  # untouched (nulls="ignore", or the same scalar object)
            sub = self._only_subschema(schema, properties, patterned, key)
            # A new member's name may need checking (propertyNames), and it has no old value
            # to compare with: it is checked whole.
            if sub is not None and before is not _MISSING and type(child) is dict:
                out += self._changed(sub, before, child, patch[key], (*path, key))
            else:
                # The member whole, as the node's own keywords judge it (its name included).
                out += self._whole(self._members_only(schema), {key: child}, path)
        return out

    @staticmethod
    def _only_subschema(
        schema: dict[str, Any], properties: Any, patterned: bool, key: str
    ) -> Any | None:
        """The one subschema a member under ``key`` answers to, or None when several may apply
        (``patternProperties``) and the member is checked whole instead."""
        if patterned or not isinstance(properties, Mapping):
            return None
        if key in properties:
            return properties[key]
        extra = schema.get("additionalProperties", True)
        return extra if isinstance(extra, dict) else None

    def _members_only(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The node's schema without its member-set keywords."""
        return self._derived(schema, "members", lambda k: k not in _SET_KEYWORDS)

    def _set_only(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The node's member-set keywords alone."""
        return self._derived(schema, "set", lambda k: k in _SET_KEYWORDS)

    def _derived(
        self, schema: dict[str, Any], what: str, keep: Callable[[str], bool]
    ) -> dict[str, Any]:
        # Kept per node (by identity, the node held so its id stays its own): each derived
        # schema is built and compiled once.
        kept = self._derived_schemas.get((what, id(schema)))
        if kept is None or kept[0] is not schema:
            kept = (schema, {k: v for k, v in schema.items() if keep(k)})
            self._derived_schemas[(what, id(schema))] = kept
        derived: dict[str, Any] = kept[1]
        return derived

    def _member_set(self, schema: dict[str, Any], node: dict[str, Any], path: Any) -> Violations:
        """``required``, ``minProperties``, ``maxProperties`` on the node; the messages come from
        the validator itself, and only when one fails (its message may serialise the node)."""
        required = schema.get("required") or ()
        low = schema.get("minProperties", 0)
        high = schema.get("maxProperties")
        if (
            all(name in node for name in required)
            and len(node) >= low
            and (high is None or len(node) <= high)
        ):
            return []
        return self._whole(self._set_only(schema), node, path)


def state_checker(schema: Any) -> tuple[Callable[[Any], Violations], StateSchema | None]:
    """A whole-state checker for a pydantic model or a JSON Schema dict, and the compiled
    :class:`StateSchema` when there is one (for checks after a merge)."""
    if schema is None:
        return (lambda state: []), None
    if isinstance(schema, Mapping):
        compiled = StateSchema(schema)
        return compiled.violations, compiled
    validate = getattr(schema, "model_validate", None)
    if validate is None:
        raise InvalidInputError(
            f"schema must be a pydantic model class or a JSON Schema dict, got {schema!r}"
        )

    def check_pydantic(state: Any) -> Violations:
        try:
            validate(state)
        except Exception as exc:  # pydantic.ValidationError, without importing pydantic
            errors = getattr(exc, "errors", None)
            if errors is None:
                return [str(exc)]
            return [f"{json_path(e['loc'])}: {e['msg']}" for e in errors()]
        return []

    return check_pydantic, None
