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
A call whose JSON the SDK's parser refuses (a lone surrogate's escape, deep nesting) is
answered as ``call_tool`` answers its arguments, never dropped (see :class:`_ReadableLines`).
Needs the ``mcp`` extra (``pip install 'memstrata[mcp]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from memstrata._bridge import run_sync
from memstrata.exceptions import InvalidInputError, MemstrataError
from memstrata.stack import MemoryStack, Run
from memstrata.tools import clip_text, run_failure_payload, shown_value

logger = logging.getLogger("memstrata.mcp")

RESOURCE_PREFIX = "memstrata://layer/"

T = TypeVar("T")


def build_server(open_run: Callable[[], Run]) -> Any:
    """An MCP server over runs made by ``open_run`` (an unopened run of the stack)."""
    try:
        from mcp import types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise InvalidInputError(
            "the MCP server needs the mcp package: pip install 'memstrata[mcp]'"
        ) from None

    def specs() -> list[dict[str, Any]]:
        with open_run() as run:
            return run.tool_specs("mcp")

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
        found = await _off_loop(specs)
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
        return await call_tool_result(open_run, params.name, params.arguments)

    async def on_list_resources(_ctx: Any, _params: Any) -> Any:
        names = list(await _off_loop(blocks))
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
        found = await _off_loop(blocks)
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


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the event loop as the stack's async forms run it (asyncio), or in a
    worker thread under another anyio backend (trio)."""
    import anyio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return await anyio.to_thread.run_sync(fn, *args)
    return await run_sync(fn, *args)


def _call(open_run: Callable[[], Run], name: Any, arguments: Any) -> dict[str, Any]:
    """One tool call in a run of its own, committed when it returns."""
    answer: dict[str, Any] | None = None
    try:
        with open_run() as run:
            answer = run.call_tool(name, {} if arguments is None else arguments)
    except Exception as exc:
        # The run could not open, or its writes (a mind's draft) could not be committed
        # when it closed, after the tool answered: the model must not read that answer.
        shown = clip_text(name) if isinstance(name, str) else shown_value(name)
        if answer is None:
            logger.exception("a run could not open for tool %s", shown)
        return run_failure_payload(shown, exc, answered=answer is not None)
    return answer


async def call_tool_result(open_run: Callable[[], Run], name: Any, arguments: Any) -> Any:
    """The MCP result of a tool call: ``call_tool``'s JSON as text and as structured content,
    an error when the call failed."""
    from mcp import types

    result = await _off_loop(_call, open_run, name, arguments)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
        is_error=result.get("ok") is False,
    )


def serve(stack: MemoryStack, *, thread_id: str, resource_id: str | None, agent: str) -> None:
    """Serves the stack over stdio until the client disconnects."""
    import anyio
    from mcp.server.stdio import stdio_server

    def open_run() -> Run:
        return stack.run(thread_id=thread_id, resource_id=resource_id, agent=agent)

    server = build_server(open_run)

    lines = _ReadableLines(open_run)

    async def main() -> None:
        lines.ready = anyio.Event()
        async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
            lines.answers = write
            lines.ready.set()
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    except Exception as exc:
        if not _hung_up(exc):
            raise
        # A host that closes the pipes with calls in flight ends the session as a plain EOF
        # does: those answers have no one to go to, and their writes were done whole or not.
        logger.info("the client closed the connection before every answer was sent")
    finally:
        lines.close()


class _ReadableLines:
    """The server's standard input as the MCP SDK reads it, a line at a time, less the requests
    its parser refuses although they are JSON (RFC 8259): a lone surrogate's escape, which a
    JavaScript host writes for a string holding one, or arguments nested past its depth limit
    (about 200 levels, within what a store holds). The SDK drops such a line unanswered, and
    its host would wait for the answer forever. A tool call among them is answered here as
    ``call_tool`` answers its arguments (read by Python's json, which takes both, or, nested
    past Python's own limit, as the JSON text they are); any other request with an id gets a
    JSON-RPC parse error. A line with no id to answer goes on to the SDK, which drops it."""

    def __init__(self, open_run: Callable[[], Run]) -> None:
        import anyio

        self.open_run = open_run
        # Made in the event loop (see serve): the transport's write stream, once it is up.
        self.ready: Any = None
        self.answers: Any = None
        # UTF-8 whatever the platform's default, as the SDK reads it. The SDK points fd 0 at
        # the null device only when it opens standard input itself; no tool reads it.
        self._text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self._stdin = anyio.wrap_file(self._text)

    def close(self) -> None:
        """Lets go of standard input without closing it (the wrapper would at collection)."""
        with contextlib.suppress(ValueError):
            self._text.detach()

    def __aiter__(self) -> _ReadableLines:
        return self

    async def __anext__(self) -> str:
        from mcp import types

        while True:
            line = await self._stdin.readline()
            if not line:
                raise StopAsyncIteration
            if _suspect(line):
                try:
                    types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError:  # pydantic's ValidationError
                    if await self._answered(line):
                        continue
            return line

    async def _answered(self, line: str) -> bool:
        from mcp import types
        from mcp.shared.message import SessionMessage

        try:
            message = json.loads(line)
        except RecursionError:
            # Nested past Python's own limit too: the envelope is read around the arguments,
            # which call_tool then refuses as the JSON text they are.
            message = _envelope(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return False
        request_id = message.get("id")
        if not (type(request_id) is int or isinstance(request_id, str)) or not _encodable(
            request_id
        ):
            return False
        params = message.get("params")
        await self.ready.wait()
        reply: Any
        if (
            message["method"] == "tools/call"
            and isinstance(params, dict)
            and isinstance(params.get("name"), str)
        ):
            result = await call_tool_result(self.open_run, params["name"], params.get("arguments"))
            reply = types.JSONRPCResponse(
                jsonrpc="2.0",
                id=request_id,
                result=result.model_dump(by_alias=True, mode="json", exclude_none=True),
            )
        else:
            error = types.ErrorData(
                code=types.PARSE_ERROR,
                message="the request is JSON the MCP SDK cannot read (a lone surrogate's "
                "escape, or nesting past its limit)",
            )
            reply = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        await self.answers.send(SessionMessage(reply))
        return True


def _envelope(line: str) -> dict[str, Any] | None:
    """A request too deep for Python's json: its members read as JSON, except ``params``'s
    ``arguments``, kept as its text; None when the line is no object of members."""
    members = _members(line, 0)
    if members is None:
        return None
    message: dict[str, Any] = {}
    for key, text in members.items():
        if key == "params":
            params = _members(text, 0)
            if params is None:
                return None
            message[key] = {
                name: value if name == "arguments" else _loaded(value)
                for name, value in params.items()
            }
        else:
            message[key] = _loaded(text)
    return message


def _loaded(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _members(text: str, start: int) -> dict[str, str] | None:
    """The JSON text of each member of the object at ``text[start:]``, by key, read without
    recursion; None when it is no well-formed object."""
    i = _blank(text, start)
    if not text.startswith("{", i):
        return None
    out: dict[str, str] = {}
    i = _blank(text, i + 1)
    if text.startswith("}", i):
        return out
    while True:
        end = _value_end(text, i)
        if end is None or text[i] != '"':
            return None
        key = _loaded(text[i:end])
        i = _blank(text, end)
        if not isinstance(key, str) or not text.startswith(":", i):
            return None
        begin = _blank(text, i + 1)
        end = _value_end(text, begin)
        if end is None:
            return None
        out[key] = text[begin:end]
        i = _blank(text, end)
        if text.startswith("}", i):
            return out
        if not text.startswith(",", i):
            return None
        i = _blank(text, i + 1)


def _blank(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _value_end(text: str, i: int) -> int | None:
    """Where the JSON value starting at ``text[i]`` ends (brackets counted, strings skipped);
    None when it does not."""
    if i >= len(text):
        return None
    depth, in_string, escaped = 0, False, False
    for j in range(i, len(text)):
        c = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 0:
                    return j + 1
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                return j if j > i else None
            depth -= 1
            if depth == 0:
                return j + 1
        elif depth == 0 and c in ", \t\r\n":
            return j if j > i else None
    return None if depth or in_string else len(text)


# A surrogate's escape (a pair's half too: the parse decides) in any case of hex digits.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# Fewer brackets than this cannot nest past the SDK's depth limit.
_DEEP_ENOUGH = 128


def _suspect(line: str) -> bool:
    """Whether the SDK's parser may refuse ``line``, which is then parsed once more here: a
    call of a megabyte costs about 10 ms to parse, and most have neither."""
    return (
        line.count("[") + line.count("{") >= _DEEP_ENOUGH
        or _SURROGATE_ESCAPE.search(line) is not None
    )


def _encodable(value: Any) -> bool:
    """Whether ``value`` can be written as JSON text: an int, or a str with no lone
    surrogate."""
    if not isinstance(value, str):
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _hung_up(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of its group) is the client's pipe being closed."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, (list, tuple)) and inner:
        return all(isinstance(e, BaseException) and _hung_up(e) for e in inner)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))


__all__ = ["RESOURCE_PREFIX", "build_server", "serve"]
