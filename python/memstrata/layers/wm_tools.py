"""The working memory's tools, their names and the guidelines that name them.

noetic's flavour offers ``<name>/update`` (the patch's fields as its parameters; text memory
takes ``content`` and ``mode``) and, for structured state, ``<name>/replace``: the patch tool
has no way to remove a key, so a model told its memory is over budget needs one to shorten it.
VoltAgent's flavour offers ``get_``, ``update_`` and ``clear_working_memory``. The layer named
``working-memory`` also takes legacy ``updateWorkingMemory`` calls through ``call_tool``, a tool
no spec lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memstrata.exceptions import (
    BudgetExceededError,
    SchemaViolationError,
    ToolError,
    WriteConflictError,
)
from memstrata.prompts import WORKING_MEMORY_CLEAR_DESCRIPTION as CLEAR_DESCRIPTION
from memstrata.prompts import WORKING_MEMORY_GET_DESCRIPTION as GET_DESCRIPTION
from memstrata.prompts import (
    WORKING_MEMORY_GUIDELINES_NOETIC,
    WORKING_MEMORY_GUIDELINES_NOETIC_TEXT,
    WORKING_MEMORY_GUIDELINES_READ_ONLY,
    WORKING_MEMORY_GUIDELINES_VOLTAGENT,
)
from memstrata.prompts import WORKING_MEMORY_REPLACE_DESCRIPTION as REPLACE_DESCRIPTION
from memstrata.prompts import WORKING_MEMORY_SET_DESCRIPTION as SET_DESCRIPTION
from memstrata.prompts import WORKING_MEMORY_UPDATE_DESCRIPTION as UPDATE_DESCRIPTION
from memstrata.prompts import WORKING_MEMORY_UPDATE_REQUIRED as WHAT_REQUIRED
from memstrata.prompts import WORKING_MEMORY_UPDATE_WHAT_STRUCTURED as WHAT_STRUCTURED
from memstrata.prompts import WORKING_MEMORY_UPDATE_WHAT_TEXT as WHAT_TEXT
from memstrata.schemas import json_schema_of
from memstrata.tools import Tool, frozen, wire_name

if TYPE_CHECKING:
    from memstrata.layers.working_memory import WorkingMemory, WorkingMemoryHandle

DEFAULT_NAME = "working-memory"
LEGACY_TOOL = "updateWorkingMemory"
MODES = ("append", "replace")
_NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_names(layer: WorkingMemory) -> dict[str, str]:
    """The layer's tool names (``update``, and ``replace`` or ``get`` and ``clear``), the
    guidelines shown with its block, the wire name of the tool that rewrites it whole
    (``rewrite_wire``) and the advice a refused write gives (``compact``)."""
    if layer.tool_flavor == "voltagent":
        noun = "working_memory" if layer.name == DEFAULT_NAME else layer.label
        noun = noun if noun.endswith("memory") else f"{noun}_memory"
        names = {"get": f"get_{noun}", "update": f"update_{noun}", "clear": f"clear_{noun}"}
        update = wire_name(names["update"])
        guidelines = WORKING_MEMORY_GUIDELINES_VOLTAGENT.format(
            update=update, clear=wire_name(names["clear"])
        )
        rewrite, compact = update, f"shorten it: call `{update}` with mode 'replace'"
    elif layer.structured:
        names = {"update": f"{layer.name}/update", "replace": f"{layer.name}/replace"}
        update, rewrite = wire_name(names["update"]), wire_name(names["replace"])
        guidelines = WORKING_MEMORY_GUIDELINES_NOETIC.format(update=update, replace=rewrite)
        compact = f"shorten it: call `{rewrite}` with the whole, shorter state"
    else:
        names = {"update": f"{layer.name}/update"}
        rewrite = wire_name(names["update"])
        guidelines = WORKING_MEMORY_GUIDELINES_NOETIC_TEXT.format(update=rewrite)
        compact = f"shorten it: call `{rewrite}` with mode 'replace' and a shorter text"
    if layer.read_only:
        guidelines = WORKING_MEMORY_GUIDELINES_READ_ONLY
    return {**names, "guidelines": guidelines, "rewrite_wire": rewrite, "compact": compact}


def tool_schemas(layer: WorkingMemory) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Each tool's description and parameter schema, by the tool's short name (``update``,
    ``replace``, ``get``, ``clear``, the legacy tool). Built once per layer, read-only (see
    :func:`~memstrata.tools.frozen`): every run shares them."""
    if layer.tool_flavor == "voltagent":
        schemas = {
            "get": (GET_DESCRIPTION, _NO_ARGUMENTS),
            "update": (SET_DESCRIPTION, _content_schema(layer)),
            "clear": (CLEAR_DESCRIPTION, _NO_ARGUMENTS),
        }
    elif layer.structured:
        # A patch is partial; it is checked after merging, against the full schema.
        full = json_schema_of(layer.schema)
        partial = {k: v for k, v in full.items() if k != "required"}
        what = UPDATE_DESCRIPTION.format(what=WHAT_STRUCTURED)
        if layer.required:
            what += " " + WHAT_REQUIRED.format(fields=", ".join(layer.required))
        schemas = {"update": (what, partial), "replace": (REPLACE_DESCRIPTION, full)}
    else:
        schemas = {"update": (UPDATE_DESCRIPTION.format(what=WHAT_TEXT), _content_schema(layer))}
    schemas[LEGACY_TOOL] = ("", {"type": "object"})
    return {name: (text, frozen(schema)) for name, (text, schema) in schemas.items()}


def tools_for(layer: WorkingMemory, handle: WorkingMemoryHandle) -> list[Tool]:
    if layer.read_only:
        return []
    names, schemas = layer.tool_names, layer.tool_schemas

    def tool(name: str, write: Any, **kw: Any) -> Tool:
        description, parameters = schemas[name]
        return Tool(names.get(name, name), description, parameters, _for_model(handle, write), **kw)

    def update(args: dict[str, Any]) -> None:
        if layer.structured and layer.tool_flavor == "noetic":
            return handle.apply(args)
        return handle.apply(args["content"], args.get("mode", "append"))

    def get() -> dict[str, Any]:
        return {"content": handle.snapshot, "format": layer.format}

    if layer.tool_flavor == "voltagent":
        description, parameters = schemas["get"]
        tools = [
            Tool(names["get"], description, parameters, lambda _: get()),
            tool("update", update),
            tool("clear", lambda _: handle.clear()),
        ]
    elif layer.structured:

        def replace(args: dict[str, Any]) -> None:
            return handle.apply(args, "replace")

        tools = [tool("update", update, validate=False), tool("replace", replace, validate=False)]
    else:
        tools = [tool("update", update)]
    if layer.name == DEFAULT_NAME:

        def legacy(args: dict[str, Any]) -> Any:
            return handle.apply_legacy(args, source="call_tool")

        tools.append(tool(LEGACY_TOOL, legacy, validate=False, listed=False))
    return tools


def _for_model(
    handle: WorkingMemoryHandle, write: Callable[[dict[str, Any]], Any]
) -> Callable[[dict[str, Any]], Any]:
    """A write as a tool handler: ``{"ok": true, "version": n}``, or the refusals the model
    must learn from (schema, budget, another writer's change) as tool errors carrying their
    reason code."""
    names = handle.layer.tool_names
    reread = (
        f"call `{wire_name(names['get'])}` to read it as it is now"
        if "get" in names
        else "your next prompt shows it as it is now"
    )

    def handler(args: dict[str, Any]) -> dict[str, Any]:
        try:
            write(args)
        except SchemaViolationError as exc:
            raise ToolError(str(exc), code="schema_violation", details=exc.violations) from None
        except BudgetExceededError as exc:
            raise ToolError(str(exc), code="budget_exceeded") from None
        except WriteConflictError as exc:
            raise ToolError(f"{exc}; {reread}, then write again", code="conflict") from None
        if not handle.saved:
            return {"ok": True, "version": handle.version, "saved": False}
        return {"ok": True, "version": handle.version}

    return handler


def _content_schema(layer: WorkingMemory) -> dict[str, Any]:
    content: dict[str, Any] = (
        {"type": ["object", "string"], "description": "Fields to merge (or a JSON string of them)."}
        if layer.structured
        else {"type": "string", "description": "Text to add (or to write, with mode 'replace')."}
    )
    return {
        "type": "object",
        "properties": {"content": content, "mode": {"type": "string", "enum": list(MODES)}},
        "required": ["content"],
        "additionalProperties": False,
    }
