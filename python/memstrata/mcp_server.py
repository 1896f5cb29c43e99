"""``memstrata mcp``: the stack's tools and prompt blocks over MCP (stdio), for any MCP client.

Tools are served under their wire-safe names (``working-memory_update``): SEP-986 allows only
``[A-Za-z0-9._-]``, and hosts forward MCP tools to APIs that refuse ``/``. Each tool call is its
own run: MCP has no notion of an agent turn, so a call's writes are committed (and a mind's
drafts flushed) when it returns, and the next call sees them; a call whose run cannot open, or
whose writes cannot be committed when it closes, answers with an error payload naming the
failure's type (a driver's message may name hosts, users or paths), never with the tool's
answer: ``memory_unavailable`` when the store failed, else ``internal_error``. Each layer's
prompt block (the working memory, a mind header, the shared-memory section) is a resource,
``memstrata://layer/<layer name>``, read through a fresh run, so it always shows what is
committed; an unknown resource is an MCP error. Under asyncio (what ``memstrata mcp`` runs
on) the calls run on the event loop, as the stack's async forms do: no thread hop for a store
call that need not wait; under another anyio backend they run in a worker thread. A client
that closes the pipes with calls in flight ends the server as an end of input does (exit 0).
Needs the ``mcp`` extra (``pip install 'memstrata[mcp]'``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from memstrata._bridge import run_sync
from memstrata.exceptions import InvalidInputError, MemstrataError
from memstrata.stack import MemoryStack, Run
from memstrata.tools import clip_text, run_failure_payload

logger = logging.getLogger("memstrata.mcp")

RESOURCE_PREFIX = "memstrata://layer/"

T = TypeVar("T")


def build_server(open_run: Callable[[], Run]) -> Any:
    """An MCP server over runs made by ``open_run`` (an unopened run of the stack)."""
    try:
        import anyio
        from mcp import types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise InvalidInputError(
            "the MCP server needs the mcp package: pip install 'memstrata[mcp]'"
        ) from None

    async def off_loop(fn: Callable[..., T], *args: Any) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend (trio)
            return await anyio.to_thread.run_sync(fn, *args)
        return await run_sync(fn, *args)

    def specs() -> list[dict[str, Any]]:
        with open_run() as run:
            return run.tool_specs("mcp")

    def call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        answer: dict[str, Any] | None = None
        try:
            with open_run() as run:
                answer = run.call_tool(name, arguments or {})
        except Exception as exc:
            # The run could not open, or its writes (a mind's draft) could not be committed
            # when it closed, after the tool answered: the model must not read that answer.
            if answer is None:
                logger.exception("a run could not open for tool %s", clip_text(name))
            return run_failure_payload(name, exc, answered=answer is not None)
        return answer

    def blocks() -> dict[str, str]:
        try:
            with open_run() as run:
                out = {}
                for layer in run.stack.layers:
                    items = layer.recall(run.layer(layer.name), run.stack.budgets[layer.name])
                    out[layer.name] = "\n\n".join(str(i.get("content", "")) for i in items)
                return out
        except Exception as exc:
            # An MCP error naming what failed, never the text of an exception from a driver
            # (hosts, users, paths).
            logger.exception("the prompt blocks could not be read")
            reason = str(exc) if isinstance(exc, MemstrataError) else type(exc).__name__
            raise MCPError(
                types.INTERNAL_ERROR, f"the memory could not be read: {reason}"
            ) from None

    async def on_list_tools(_ctx: Any, _params: Any) -> Any:
        found = await off_loop(specs)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec["name"],
                    description=spec["description"],
                    input_schema=spec["inputSchema"],
                )
                for spec in found
            ]
        )

    async def on_call_tool(_ctx: Any, params: Any) -> Any:
        result = await off_loop(call, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=result.get("ok") is False,
        )

    async def on_list_resources(_ctx: Any, _params: Any) -> Any:
        names = list(await off_loop(blocks))
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name=name,
                    uri=f"{RESOURCE_PREFIX}{name}",
                    description=f"The prompt block the {name} layer gives the model now.",
                    mime_type="text/plain",
                )
                for name in names
            ]
        )

    async def on_read_resource(_ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        found = await off_loop(blocks)
        name = uri.removeprefix(RESOURCE_PREFIX)
        if not uri.startswith(RESOURCE_PREFIX) or name not in found:
            known = ", ".join(f"{RESOURCE_PREFIX}{n}" for n in sorted(found))
            # An MCP error the client gets as the answer, not a traceback on the server's stderr.
            raise MCPError(types.INVALID_PARAMS, f"unknown resource {uri!r}; resources: {known}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=found[name])]
        )

    return Server(
        "memstrata",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_read_resource=on_read_resource,
    )


def serve(stack: MemoryStack, *, thread_id: str, resource_id: str | None, agent: str) -> None:
    """Serves the stack over stdio until the client disconnects."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(
        lambda: stack.run(thread_id=thread_id, resource_id=resource_id, agent=agent)
    )

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    except Exception as exc:
        if not _hung_up(exc):
            raise
        # A host that closes the pipes with calls in flight ends the session as a plain EOF
        # does: those answers have no one to go to, and their writes were done whole or not.
        logger.info("the client closed the connection before every answer was sent")


def _hung_up(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of its group) is the client's pipe being closed."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, (list, tuple)) and inner:
        return all(isinstance(e, BaseException) and _hung_up(e) for e in inner)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))


__all__ = ["RESOURCE_PREFIX", "build_server", "serve"]
