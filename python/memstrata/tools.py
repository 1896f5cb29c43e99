"""Tools the layers offer the model: one definition, rendered for every SDK.

A :class:`Tool` holds the name its system gives it (``working-memory/update``), a description, a
JSON Schema for its arguments and the handler. ``tool_spec`` renders it as OpenAI chat tools,
OpenAI Responses tools, Anthropic tools or MCP tools. OpenAI and Anthropic accept only
``[A-Za-z0-9_-]{1,64}`` as a tool name, so ``wire_name`` maps those names to a safe form
(``working-memory_update``); the stack accepts either form in ``call_tool``.

``parse_arguments`` and ``validate_arguments`` turn whatever the model sent into a dict or a
:class:`~memstrata.exceptions.ToolError` that says exactly what was wrong.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sqlite3
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from memstrata._core import MAX_DEPTH
from memstrata.exceptions import (
    InvalidOptionError,
    LockTimeoutError,
    MemstrataError,
    StorageRaceError,
    ToolError,
)

ToolFormat = Literal["openai", "responses", "anthropic", "mcp"]

# A model can send anything; these bound what one call may cost before any layer sees it.
MAX_ARGUMENT_BYTES = 1 << 20
MAX_WIRE_NAME = 64
# An error payload goes back into the model's context: a value it echoes is cut to ECHO_LIMIT
# characters, each line of it to _LINE_LIMIT, and it lists at most _DETAILS_KEPT problems.
ECHO_LIMIT = 200
_MESSAGE_LIMIT = 1000
_LINE_LIMIT = 400
_DETAILS_KEPT = 20
# What JSON storage holds: a signed or an unsigned 64-bit integer.
_INT_LOW, _INT_HIGH = -(2**63), 2**64
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, init=False)
class Tool:
    """One tool a layer offers the model.

    Attributes:
        name: The name its system gives it, the contract with the model (``mind_recall``).
        description: What the model reads to decide when to call it.
        parameters: JSON Schema of the arguments (an ``object`` schema).
        handler: Called with the validated arguments; returns JSON data or raises ToolError.
        validate: Whether ``parameters`` is enforced before the handler runs. A layer that
            validates the effect instead (a working-memory patch is checked after merging) turns
            it off.
        listed: Whether tool specs offer it. An unlisted tool is one a model may call by a name
            it learned elsewhere (noetic's legacy ``updateWorkingMemory``): ``call_tool``
            accepts it, but it is never advertised.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: Callable[[dict[str, Any]], Any] = field(compare=False)
    validate: bool = True
    listed: bool = True

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        handler: Callable[[dict[str, Any]], Any],
        validate: bool = True,
        listed: bool = True,
    ) -> None:
        # The fields in one update of the instance's dict: the __init__ a frozen dataclass
        # makes sets each through object.__setattr__, several times the cost, and layers make
        # their tools afresh for every run.
        self.__dict__.update(
            name=name,
            description=description,
            parameters=parameters,
            handler=handler,
            validate=validate,
            listed=listed,
        )

    @property
    def wire_name(self) -> str:
        """The name as tool specs list it, in the characters OpenAI and Anthropic accept
        (``working-memory/update`` is ``working-memory_update``)."""
        return wire_name(self.name)

    @property
    def check(self) -> Check:
        """The parameter schema compiled (see :func:`compile_schema`), once per schema content:
        layers make their tools afresh for every run, so equal schemas share one check."""
        return compiled(self.parameters)


@functools.lru_cache(maxsize=4096)
def wire_name(name: str) -> str:
    """The name as OpenAI and Anthropic accept it: ``[A-Za-z0-9_-]{1,64}``.

    Unsafe characters become ``_``; a name that is still too long keeps a prefix and a short hash
    of the full name, so distinct long names stay distinct.
    """
    safe = _UNSAFE_NAME_CHARS.sub("_", name) or "_"
    if len(safe) <= MAX_WIRE_NAME:
        return safe
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{safe[: MAX_WIRE_NAME - 9]}_{digest}"


class ReadOnlyDict(dict[str, Any]):
    """A dict no one can change: what :func:`frozen` makes of a schema's objects.

    Layers build their tools' schemas once and share them between runs, so nothing handed out
    may change them; :func:`tool_spec` gives each caller a plain, deep copy to change.
    """

    __slots__ = ("_key",)

    def content_key(self) -> bytes:
        """The schema's JSON text, keys sorted: what :func:`compiled` looks it up by. Made once,
        as nothing can change it."""
        try:
            return self._key
        except AttributeError:
            self._key: bytes = orjson.dumps(self, option=orjson.OPT_SORT_KEYS)
            return self._key

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a tool's schema is read-only; tool_spec() gives a copy to change")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> ReadOnlyDict:
        return self

    def __deepcopy__(self, _memo: Any) -> ReadOnlyDict:
        return self  # immutable all the way down

    def __reduce__(self) -> tuple[Any, ...]:
        return ReadOnlyDict, (dict(self),)


def frozen(value: Any) -> Any:
    """A JSON value that cannot be changed: objects become :class:`ReadOnlyDict`, arrays
    tuples, at every depth (orjson writes both as JSON)."""
    if isinstance(value, Mapping):
        return ReadOnlyDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    return value


def _thawed(value: Any) -> Any:
    """A deep, plain copy of a JSON-like value: mappings become dicts, arrays lists."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thawed(item) for item in value]
    return value


def _own_copy(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's own copy of a schema, however deep: a layer may share its tools' schemas
    between runs (see :func:`frozen`), or hold its user's own schema objects."""
    try:
        copied = orjson.loads(orjson.dumps(schema))
    except (TypeError, orjson.JSONEncodeError):  # not JSON text (an int key, a huge int)
        copied = _thawed(schema)
    return copied if isinstance(copied, dict) else dict(schema)


def tool_spec(tool: Tool, fmt: ToolFormat = "openai", *, strict: bool = False) -> dict[str, Any]:
    """Renders one tool for an SDK.

    ``openai`` is the Chat Completions shape (``{"type": "function", "function": {...}}``),
    ``responses`` the Responses API's flat one (``{"type": "function", "name": ...}``).

    ``strict=True`` (OpenAI only) renders the form OpenAI's structured outputs accept: every
    property required, the optional ones nullable, no additional properties. The model then pads
    every optional field with null, which :func:`strip_null_padding` removes again. A tool whose
    schema has open-ended parts (a free-form value, an object with arbitrary keys) cannot be
    expressed strictly and is rendered in the normal form, with ``strict`` false.

    The spec is the caller's own: changing it, at any depth, changes no tool.
    """
    parameters = _own_copy(tool.parameters)
    if fmt in ("openai", "responses"):
        function: dict[str, Any] = {
            "name": tool.wire_name,
            "description": tool.description,
            "parameters": parameters,
        }
        if strict:
            strict_parameters = strict_schema(parameters)
            function["strict"] = strict_parameters is not None
            if strict_parameters is not None:
                function["parameters"] = strict_parameters
        if fmt == "responses":
            return {"type": "function", **function}
        return {"type": "function", "function": function}
    if fmt == "anthropic":
        return {"name": tool.wire_name, "description": tool.description, "input_schema": parameters}
    if fmt == "mcp":
        return {"name": tool.wire_name, "description": tool.description, "inputSchema": parameters}
    raise InvalidOptionError(
        f"unknown tool format {fmt!r}; expected 'openai', 'responses', 'anthropic' or 'mcp'"
    )


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """OpenAI's strict form of an object schema, or None when it has open-ended parts."""
    if schema.get("type") == "object" or "properties" in schema:
        extra = schema.get("additionalProperties", True)
        properties = schema.get("properties", {})
        # A map of arbitrary keys cannot be strict; declared properties can be closed over.
        if isinstance(extra, Mapping) or (not properties and extra is not False):
            return None
        required = set(schema.get("required", ()))
        out_properties: dict[str, Any] = {}
        for name, sub in properties.items():
            converted = strict_schema(sub)
            if converted is None:
                return None
            if name not in required:
                converted = _nullable(converted)
            out_properties[name] = converted
        out = {k: v for k, v in schema.items() if k not in ("properties", "required")}
        out.update(
            type="object",
            properties=out_properties,
            required=list(properties),
            additionalProperties=False,
        )
        return out
    if schema.get("type") == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return None
        converted_items = strict_schema(items)
        return None if converted_items is None else {**schema, "items": converted_items}
    if "type" not in schema and "enum" not in schema:
        return None  # any value
    return dict(schema)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        schema = {**schema, "type": [kind, "null"]}
    elif isinstance(kind, list) and "null" not in kind:
        schema = {**schema, "type": [*kind, "null"]}
    if "enum" in schema and None not in schema["enum"]:
        schema = {**schema, "enum": [*schema["enum"], None]}
    return schema


def strip_null_padding(schema: Mapping[str, Any], value: Any) -> Any:
    """Removes the nulls a strict-mode model pads optional fields with, at every depth the
    schema declares; required fields and undeclared keys are left as sent."""
    if not isinstance(value, dict):
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            return [strip_null_padding(schema["items"], item) for item in value]
        return value
    properties: Mapping[str, Any] = schema.get("properties", {})
    if not properties:
        return value
    required = set(schema.get("required", ()))
    out = {}
    for name, item in value.items():
        sub = properties.get(name)
        if sub is None:
            out[name] = item
        elif item is None and name not in required:
            continue
        else:
            out[name] = strip_null_padding(sub, item)
    return out


def clip_text(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text``, or its first ``limit`` characters followed by ``…`` and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def shown_value(value: Any) -> str:
    """A value as an error message shows it: a string quoted and cut to :data:`ECHO_LIMIT`
    characters, an integer past that many digits by its length, an array or object by its size
    (never walked: it may be huge, deep or contain itself)."""
    if isinstance(value, str):
        if len(value) <= ECHO_LIMIT:
            return repr(value)
        return f"{value[:ECHO_LIMIT]!r}… ({len(value):,} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return _shown_int(value)
    if isinstance(value, (list, tuple)):
        return f"an array of {len(value):,} items"
    if isinstance(value, dict):
        return f"an object of {len(value):,} fields"
    return f"a {clip_text(type(value).__name__, 64)}"


def _shown_int(value: int) -> str:
    if value.bit_length() <= 600:  # at most 181 digits
        return str(value)
    try:
        digits = f"{len(str(abs(value))):,}"
    except ValueError:  # past Python's int-to-text limit: counted from the bits instead
        digits = f"about {int(value.bit_length() * math.log10(2)) + 1:,}"
    return f"an integer of {digits} digits"


def _path_key(key: Any) -> str:
    """An object key as a path shows it, cut like any echoed value."""
    return clip_text(key) if isinstance(key, str) else shown_value(key)


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Accepts a dict, or the JSON text a model sent (``None`` or ``""`` mean no arguments).

    A dict (from an SDK or a Python caller) has its numbers checked as JSON text's are: an
    integer past the 64-bit range or a NaN/Infinity anywhere in it is refused with its path.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        _refuse_unstorable_numbers(arguments)
        return arguments
    if isinstance(arguments, (str, bytes, bytearray)):
        size = len(
            arguments.encode("utf-8", "surrogatepass") if isinstance(arguments, str) else arguments
        )
        if size > MAX_ARGUMENT_BYTES:
            raise ToolError(
                f"arguments are {size:,} bytes; the limit is {MAX_ARGUMENT_BYTES:,}",
                code="invalid_arguments",
            )
        if not arguments.strip():
            return {}
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            raise ToolError(
                f"arguments are not valid JSON: {exc}", code="invalid_arguments"
            ) from None
        refuse_long_integers(arguments)
        arguments = parsed
    if not isinstance(arguments, dict):
        raise ToolError(
            f"arguments must be a JSON object, got {_json_type(arguments)}",
            code="invalid_arguments",
        )
    return arguments


# 2**63 has 19 digits: a run of 19 or more may be an integer orjson reads as a rounded float.
_LONG_DIGITS = re.compile(r"[0-9]{19,}")
_LONG_DIGITS_BYTES = re.compile(rb"[0-9]{19,}")


def refuse_long_integers(text: str | bytes | bytearray) -> None:
    """Refuses an integer past the 64-bit range, which orjson would read as a rounded float
    (and no store can hold): the text is parsed again, exactly, only when it has such a run of
    digits (in a string or not)."""
    pattern = _LONG_DIGITS if isinstance(text, str) else _LONG_DIGITS_BYTES
    if pattern.search(text) is None:  # type: ignore[arg-type]
        return
    try:
        exact = json.loads(text)
    except (ValueError, RecursionError):
        return  # orjson accepted it; json's own limits are not the caller's problem
    pending: list[tuple[str, Any]] = [("$", exact)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            pending.extend((f"{path}.{key}", item) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        elif type(value) is int and not _INT_LOW <= value < _INT_HIGH:
            raise _integer_out_of_range(path, value)


def _integer_out_of_range(path: str, value: int) -> ToolError:
    shown = _shown_int(value)
    noun = shown if shown.startswith("an integer") else f"the integer {shown}"
    return ToolError(
        f"{path}: {noun} is past the 64-bit range JSON storage holds", code="invalid_arguments"
    )


_CONTAINERS = (dict, list, tuple)


def _refuse_unstorable_numbers(arguments: dict[str, Any]) -> None:
    """Refuses an integer past the 64-bit range, or a NaN or an infinity, anywhere in a dict of
    arguments, naming its path. Each container is walked once (a dict may hold itself) and no
    deeper than the kernels' nesting limit (a deeper value is refused when it is stored)."""
    pending: list[tuple[str, Any, int]] = [("$", arguments, 0)]
    seen = {id(arguments)}
    while pending:
        path, container, depth = pending.pop()
        is_dict = isinstance(container, dict)
        for key, item in container.items() if is_dict else enumerate(container):
            if isinstance(item, _CONTAINERS):
                if depth < MAX_DEPTH and id(item) not in seen:
                    seen.add(id(item))
                    child = f"{path}.{_path_key(key)}" if is_dict else f"{path}[{key}]"
                    pending.append((child, item, depth + 1))
            elif isinstance(item, float):
                if not math.isfinite(item):
                    child = f"{path}.{_path_key(key)}" if is_dict else f"{path}[{key}]"
                    shown = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
                    raise ToolError(
                        f"{child}: {shown} is not a finite number and JSON cannot hold it",
                        code="invalid_arguments",
                    )
            elif (
                isinstance(item, int)
                and not isinstance(item, bool)
                and not _INT_LOW <= item < _INT_HIGH
            ):
                child = f"{path}.{_path_key(key)}" if is_dict else f"{path}[{key}]"
                raise _integer_out_of_range(child, item)


def validate_arguments(schema: Mapping[str, Any], arguments: dict[str, Any]) -> None:
    """Checks arguments against a tool's parameter schema; raises ToolError listing every problem.

    Supports the JSON Schema keywords tool definitions use: ``type`` (or a list of types),
    ``properties``, ``required``, ``additionalProperties`` (bool or schema), ``enum``, ``items``,
    ``minLength``/``maxLength``, ``minimum``/``maximum``, ``minItems``/``maxItems``.
    A :class:`Tool` compiles its schema once (:func:`compile_schema`); this compiles per call.
    """
    raise_problems(compile_schema(schema), arguments)


class _Problems(list[str]):
    """The problems a check finds: the first ``kept`` lines, and how many there were."""

    def __init__(self, kept: int) -> None:
        super().__init__()
        self.kept, self.found = kept, 0

    def append(self, problem: str) -> None:
        self.found += 1
        if self.found <= self.kept:
            super().append(problem)


def raise_problems(check: Check, arguments: dict[str, Any]) -> None:
    problems = _Problems(_DETAILS_KEPT)
    check(arguments, "$", problems)
    if problems:
        details = list(problems)
        if problems.found > len(details):
            details.append(_more(problems.found - len(details)))
        raise ToolError(
            "arguments do not match the tool's schema: " + "; ".join(problems[:5]),
            code="invalid_arguments",
            details=details,
        )


def _more(count: int) -> str:
    return f"… and {count:,} more problem{'s' if count != 1 else ''}"


Check = Callable[[Any, str, list[str]], None]

_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v))
    ),
}
_is_number = _TYPE_CHECKS["number"]


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


_COMPILED: dict[bytes, Check] = {}
_COMPILED_KEPT = 1024


def compiled(schema: Mapping[str, Any]) -> Check:
    """:func:`compile_schema`, remembered by the schema's content."""
    try:
        if isinstance(schema, ReadOnlyDict):
            key = schema.content_key()
        else:
            key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return compile_schema(schema)  # not JSON: compiled every time, never shared
    check = _COMPILED.get(key)
    if check is None:
        if len(_COMPILED) >= _COMPILED_KEPT:
            _COMPILED.clear()
        # Compiled from the content it is found by: a check keeps some of its schema's values
        # (an enum's), and every tool with equal content shares it, so it must hold none of
        # the objects of a caller's schema, which the caller may change.
        own = schema if isinstance(schema, ReadOnlyDict) else orjson.loads(key)
        check = _COMPILED[key] = compile_schema(own)
    return check


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """Turns a parameter schema into one function that appends each problem to a list.

    Tool calls arrive on every turn; interpreting the schema dict each time cost more than most
    handlers. Only the keywords a schema uses become checks, built once.
    """
    checks: list[Check] = []
    if "enum" in schema:
        allowed_values = list(schema["enum"])
        allowed_json = [_json_identity(v) for v in allowed_values]
        allowed = ", ".join(repr(v) for v in allowed_values)

        def check_enum(value: Any, path: str, problems: list[str]) -> None:
            # A str equals only a str; anything else is compared as JSON (see _json_identity).
            if value.__class__ is str:
                if value in allowed_values:
                    return
            elif _json_identity(value) in allowed_json:
                return
            problems.append(f"{path}: {shown_value(value)} is not one of {allowed}")

        checks.append(check_enum)
    checks.extend(_length_checks(schema))
    if isinstance(schema.get("items"), Mapping):
        check_item = compile_schema(schema["items"])

        def check_items(value: Any, path: str, problems: list[str]) -> None:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    check_item(item, f"{path}[{i}]", problems)

        checks.append(check_items)
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        checks.append(_object_check(schema))

    expected = schema.get("type")
    if expected is None:
        type_ok: Callable[[Any], bool] | None = None
        label = ""
    else:
        types = [expected] if isinstance(expected, str) else list(expected)
        tests = [_TYPE_CHECKS.get(t, lambda _v: True) for t in types]
        type_ok = tests[0] if len(tests) == 1 else (lambda v: any(t(v) for t in tests))
        label = " or ".join(types)

    def check(value: Any, path: str, problems: list[str]) -> None:
        if type_ok is not None and not type_ok(value):
            problems.append(f"{path}: expected {label}, got {_json_type(value)}")
            return
        for c in checks:
            c(value, path, problems)

    return check


def _json_identity(value: Any, depth: int = 64) -> Any:
    """``value`` in a form whose ``==`` is JSON's equality: Python's, except that a boolean is
    never a number (``True == 1`` in Python, ``true`` is not ``1`` in JSON). Containers nested
    deeper than ``depth`` become a value equal to nothing: enums list shallow values, and a
    model's deeply nested argument then costs no deep recursion."""
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, (list, tuple, Mapping)):
        if depth == 0:
            return _UNEQUAL
        if isinstance(value, Mapping):
            return (dict, {key: _json_identity(item, depth - 1) for key, item in value.items()})
        return (list, [_json_identity(item, depth - 1) for item in value])
    return value


class _Unequal:
    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


_UNEQUAL = _Unequal()


def _length_checks(schema: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = []
    min_len, max_len = schema.get("minLength"), schema.get("maxLength")
    if min_len is not None or max_len is not None:

        def check_string(value: Any, path: str, problems: list[str]) -> None:
            if isinstance(value, str):
                if min_len is not None and len(value) < min_len:
                    problems.append(f"{path}: shorter than {min_len} characters")
                if max_len is not None and len(value) > max_len:
                    problems.append(f"{path}: {len(value):,} characters, the limit is {max_len}")

        checks.append(check_string)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:

        def check_number(value: Any, path: str, problems: list[str]) -> None:
            if _is_number(value):
                if low is not None and value < low:
                    problems.append(f"{path}: {shown_value(value)} is below the minimum {low}")
                if high is not None and value > high:
                    problems.append(f"{path}: {shown_value(value)} is above the maximum {high}")

        checks.append(check_number)
    min_items, max_items = schema.get("minItems"), schema.get("maxItems")
    if min_items is not None or max_items is not None:

        def check_array(value: Any, path: str, problems: list[str]) -> None:
            if isinstance(value, list):
                if min_items is not None and len(value) < min_items:
                    problems.append(f"{path}: fewer than {min_items} items")
                if max_items is not None and len(value) > max_items:
                    problems.append(f"{path}: {len(value):,} items, the limit is {max_items}")

        checks.append(check_array)
    return checks


def _object_check(schema: Mapping[str, Any]) -> Check:
    properties = {name: compile_schema(sub) for name, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    check_extra = compile_schema(extra) if isinstance(extra, Mapping) else None
    refuse_extra = extra is False

    def check_object(value: Any, path: str, problems: list[str]) -> None:
        if not isinstance(value, dict):
            return
        for name in required:
            if name not in value:
                problems.append(f"{path}: missing required field {name!r}")
        for name, item in value.items():
            check_property = properties.get(name)
            if check_property is not None:
                check_property(item, f"{path}.{name}", problems)
            elif refuse_extra:
                problems.append(f"{path}: unexpected field {shown_value(name)}")
            elif check_extra is not None:
                check_extra(item, f"{path}.{_path_key(name)}", problems)

    return check_object


def error_payload(tool_name: str, error: ToolError) -> dict[str, Any]:
    """What the model reads when a call fails: the tool, a reason code and each problem.

    It goes back into the model's context, so it is bounded whatever the error says: the
    message is cut to 1,000 characters, the tool name and each detail to 400, and the details
    to the first 20 (then how many more there were). ``Run.call_tool`` cuts an unknown tool's
    name to :data:`ECHO_LIMIT` characters before it gets here. Every text in it can be encoded
    as UTF-8: a lone surrogate it echoes is shown as its escape.
    """
    payload: dict[str, Any] = {"code": error.code, "message": _cut(str(error), _MESSAGE_LIMIT)}
    if error.retry is not None:
        payload["retry"] = error.retry
    if error.details:
        # A 21st line may be the count of the rest (raise_problems adds it); more are cut.
        kept = (
            error.details
            if len(error.details) <= _DETAILS_KEPT + 1
            else error.details[:_DETAILS_KEPT]
        )
        details = [_cut(str(line), _LINE_LIMIT) for line in kept]
        if len(kept) < len(error.details):
            details.append(_more(len(error.details) - len(kept)))
        payload["details"] = details
    return {"ok": False, "tool": _cut(tool_name, _LINE_LIMIT), "error": payload}


def _encodable(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``). A host's JSON
    parser may let one through in a tool's name or an argument's key, and an error echoing it
    could not be written as JSON (orjson, ``json.dumps`` to a UTF-8 pipe): the adapters would
    raise instead of answering."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def run_failure_payload(tool_name: str, exc: Exception, *, answered: bool) -> dict[str, Any]:
    """What the model reads when the short run a tool call was made in failed around it: it
    could not open (``answered`` False), or its writes (a mind's draft) could not be committed
    when it closed, after the tool answered, so that answer must not reach the model. The
    message names memstrata's own error, else only the exception's type: a driver's message
    may name hosts, users or paths. A store's failure is ``memory_unavailable``, as in
    ``Run.call_tool``."""
    shown = clip_text(tool_name)
    failure = store_failure(exc)
    if failure is not None:
        if answered and failure.written == _NOTHING_WRITTEN:
            failure.written = "the call's writes were not committed"
        elif answered:
            failure.written = "whether the call's writes were committed is not known"
        return error_payload(shown, failure.tool_error())
    reason = str(exc) if isinstance(exc, MemstrataError) else type(exc).__name__
    if answered:
        message = f"the call's writes were not committed: {reason}"
    else:
        message = f"the memory could not be opened: {reason}"
    return error_payload(shown, ToolError(message, code="internal_error"))


@dataclass
class StoreFailure:
    """A store that failed a call (locked, unreachable, full), as the model reads it: the
    memory is unavailable, not the call wrong.

    Attributes:
        why: What failed, naming no host, path or SQL: a driver's message may.
        written: Whether the call's write reached the store, as far as the client knows.
        retry: Whether the same call may succeed later.
    """

    why: str
    written: str
    retry: bool

    def tool_error(self) -> ToolError:
        advice = (
            "Call the tool again in a moment."
            if self.retry
            else "Calling it again will not help until the memory's operator fixes it."
        )
        if self.retry and self.written.startswith("whether"):
            advice = "Read the memory before writing it again."
        return ToolError(
            f"the memory is unavailable: {self.why}; {self.written}. {advice}",
            code="memory_unavailable",
            retry=self.retry,
        )


_NOTHING_WRITTEN = "nothing was written"
_NOT_KNOWN = "whether this call's write was saved is not known"
# SQLite's primary result codes (sqlite3 names them from Python 3.11).
_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED = 1, 5, 6
# The database refuses writes, or is not a database (SQLITE_READONLY, SQLITE_CORRUPT,
# SQLITE_NOTADB): only its operator can change that.
_SQLITE_LASTING = frozenset({8, 11, 26})
# What sqlite3 raises (ProgrammingError) for a call on a connection that was closed.
_SQLITE_CLOSED = "Cannot operate on a closed database."


def store_failure(exc: BaseException) -> StoreFailure | None:
    """``exc`` as a store's failure, or None for anything else (a bug, bad input).

    A store's failure: its lock held past the timeout (:class:`LockTimeoutError`), other
    writers racing it past every retry (:class:`StorageRaceError`), SQLite's operational errors
    (a locked file, a full disk, an I/O error, a read-only file) and PostgreSQL's (the
    connection ended, the server restarting or out of room, no pooled connection free in
    time), and a store that was closed. A failed SQLite statement wrote nothing (each store
    call is one transaction); a PostgreSQL connection that ended mid-call leaves unknown
    whether its COMMIT got there."""
    if isinstance(exc, LockTimeoutError):
        return StoreFailure(
            "it is busy (another connection held a lock past the store's lock timeout)",
            _NOTHING_WRITTEN,
            retry=True,
        )
    if isinstance(exc, StorageRaceError):
        return StoreFailure(
            "it is busy (other writers kept changing it)", _NOTHING_WRITTEN, retry=True
        )
    if isinstance(exc, sqlite3.ProgrammingError) and str(exc) == _SQLITE_CLOSED:
        # SQLiteStore.close ran (a server shutting down with runs in flight), as PoolClosed.
        return StoreFailure("its store is closed", _NOTHING_WRITTEN, retry=False)
    if isinstance(exc, sqlite3.OperationalError) or (
        isinstance(exc, sqlite3.DatabaseError) and type(exc) is sqlite3.DatabaseError
    ):
        code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
        name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
        busy = code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED) if code is not None else False
        if busy or (code is None and "database is locked" in str(exc)):
            return StoreFailure(
                "it is busy (another process held its database past the store's busy timeout)",
                _NOTHING_WRITTEN,
                retry=True,
            )
        if code is not None and code & 0xFF == _SQLITE_ERROR:
            return None  # a statement SQLite refused (a missing table, bad SQL): a bug's
        lasting = code is not None and code & 0xFF in _SQLITE_LASTING
        return StoreFailure(f"its database failed ({name})", _NOTHING_WRITTEN, retry=not lasting)
    return _postgres_failure(exc)


def _postgres_failure(exc: BaseException) -> StoreFailure | None:
    psycopg = sys.modules.get("psycopg")  # an optional dependency: loaded if a store uses it
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return None
    pool = sys.modules.get("psycopg_pool")
    name = type(exc).__name__
    if pool is not None and isinstance(exc, pool.PoolClosed):
        return StoreFailure("its store is closed", _NOTHING_WRITTEN, retry=False)
    if pool is not None and isinstance(exc, pool.PoolTimeout):
        return StoreFailure(
            "no connection to its database was free in time (PoolTimeout)",
            _NOTHING_WRITTEN,
            retry=True,
        )
    errors = psycopg.errors
    if isinstance(exc, (errors.QueryCanceled, errors.LockNotAvailable, errors.DeadlockDetected)):
        # The server ended the statement and rolled its transaction back.
        return StoreFailure(f"its database cancelled the call ({name})", _NOTHING_WRITTEN, True)
    if isinstance(exc, (psycopg.OperationalError, errors.ReadOnlySqlTransaction)):
        return StoreFailure(f"its database connection failed ({name})", _NOT_KNOWN, retry=True)
    return None


def _cut(line: str, limit: int) -> str:
    """A line cut to about ``limit`` characters: its head and its tail (where a problem's
    description often is), the middle replaced by how much was left out; any lone surrogate
    in it escaped (see :func:`_encodable`)."""
    line = _encodable(line)
    if len(line) <= limit:
        return line
    head, tail = limit * 2 // 3, limit // 3
    return f"{line[:head]} …({len(line) - head - tail:,} characters cut)… {line[-tail:]}"
