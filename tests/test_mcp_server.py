"""``memstrata mcp`` driven by the official SDK's stdio client, which spawns the server."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.tool_name_validation import validate_tool_name

MEMSTRATA = shutil.which("memstrata", path=str(pathlib.Path(sys.executable).parent))


@contextlib.contextmanager
def raw_server(db: pathlib.Path) -> Iterator[subprocess.Popen[bytes]]:
    """``memstrata mcp`` on ``db``, spoken to a line at a time over its pipes as a host does,
    past the MCP handshake; killed if it still runs at the end, where its stderr must hold no
    traceback."""
    assert MEMSTRATA is not None
    command = [MEMSTRATA, "mcp", "--store", f"sqlite:///{db}", "--agent", "tester"]
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert server.stdout is not None and server.stderr is not None
    try:
        client = {"name": "test", "version": "1"}
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        send_line(
            server,
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}),
        )
        assert b'"id":0' in server.stdout.readline()
        send_line(server, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        yield server
    finally:
        if server.poll() is None:
            server.kill()
    assert b"Traceback" not in server.stderr.read()


def send_line(server: subprocess.Popen[bytes], line: str) -> None:
    assert server.stdin is not None
    server.stdin.write(line.encode() + b"\n")
    server.stdin.flush()


def session_run(db: pathlib.Path, steps: Any, *extra: str) -> Any:
    """Spawns the server on ``db``, runs ``steps(session)`` and returns what it returns."""
    assert MEMSTRATA is not None
    params = StdioServerParameters(
        command=MEMSTRATA,
        args=["mcp", "--store", f"sqlite:///{db}", "--agent", "tester", "--thread", "t1", *extra],
    )

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await steps(session)

    return anyio.run(main)


def test_tools_resources_and_persistence(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "mcp.db"

    async def first(session: ClientSession) -> dict[str, Any]:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"working-memory_update", "memory_list", "memory_read", "memory_write"} <= set(tools)
        # SEP-986: the SDK's own validator accepts every served name, with no warning.
        for name in tools:
            checked = validate_tool_name(name)
            assert checked.is_valid and not checked.warnings, (name, checked)
        assert tools["memory_read"].input_schema["required"] == ["keys"]
        updated = await session.call_tool("working-memory_update", {"goal": "ship v2"})
        assert not updated.is_error
        assert json.loads(updated.content[0].text) == {"ok": True, "version": 1}
        bad = await session.call_tool("memory_read", {"keys": "not-a-list"})
        assert bad.is_error and "$.keys: expected array" in bad.content[0].text
        resources = {str(r.uri) for r in (await session.list_resources()).resources}
        assert "memstrata://layer/working-memory" in resources
        block = await session.read_resource("memstrata://layer/working-memory")
        return {"text": block.contents[0].text}

    out = session_run(db, first)
    assert '"goal": "ship v2"' in out["text"] and out["text"].startswith("<working_memory>")

    async def second(session: ClientSession) -> str:
        # A new server process on the same file: the memory is still there.
        block = await session.read_resource("memstrata://layer/working-memory")
        text: str = block.contents[0].text
        return text

    assert '"goal": "ship v2"' in session_run(db, second)


def test_mind_writes_are_committed_when_the_call_returns(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "mind.db"

    async def steps(session: ClientSession) -> tuple[str, str]:
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"mind_believe", "mind_recall", "mind_set_goal"} <= names
        before = (await session.read_resource("memstrata://layer/agent-mind")).contents[0].text
        believed = await session.call_tool(
            "mind_believe", {"content": "Staging uses a different API key.", "confidence": "high"}
        )
        assert not believed.is_error
        assert json.loads(believed.content[0].text)["action"] == "created"
        # Each call is its own run: the draft was flushed when the call returned.
        after = (await session.read_resource("memstrata://layer/agent-mind")).contents[0].text
        return before, after

    before, after = session_run(db, steps)
    assert before == ""  # an empty mind shows no header
    assert after.startswith("--- AGENT MIND ---")
    assert "Staging uses a different API key. (high confidence)" in after


def test_the_working_memory_schema_is_served_and_checked(tmp_path: pathlib.Path) -> None:
    schema = {
        "type": "object",
        "properties": {"goal": {"type": "string"}, "steps": {"type": "array"}},
        "additionalProperties": False,
    }
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))

    async def steps(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        served = tools["working-memory_update"].input_schema
        assert set(served["properties"]) == {"goal", "steps"}
        refused = await session.call_tool("working-memory_update", {"mood": "x"})
        assert refused.is_error and "schema_violation" in refused.content[0].text
        ok = await session.call_tool("working-memory_update", {"goal": "ship"})
        assert not ok.is_error

    session_run(tmp_path / "mcp.db", steps, "--schema", str(schema_file))


def test_an_unknown_resource_is_an_mcp_error(tmp_path: pathlib.Path) -> None:
    async def steps(session: ClientSession) -> str:
        try:
            await session.read_resource("memstrata://layer/nope")
        except MCPError as exc:
            return str(exc)
        raise AssertionError("no error")

    message = session_run(tmp_path / "mcp.db", steps)
    assert "unknown resource" in message and "memstrata://layer/working-memory" in message


def test_a_client_that_hangs_up_mid_call_ends_the_server_quietly(tmp_path: pathlib.Path) -> None:
    """The host closes both pipes while calls are in flight: the server cannot write their
    answers and ends as for a plain hang-up (exit 0, no traceback); each call's writes are in
    the store whole or not at all, and the next server on the file works."""
    db = tmp_path / "hangup.db"
    with raw_server(db) as server:
        for i in range(20):
            arguments = {"content": f"Belief number {i} is whole."}
            call = {"name": "mind_believe", "arguments": arguments}
            send_line(
                server,
                json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": call}),
            )
        assert server.stdin is not None and server.stdout is not None
        server.stdin.close()
        server.stdout.close()
        # A few seconds here; a loop spinning against the calls it cancelled took about 30.
        assert server.wait(timeout=15) == 0

    async def recall(session: ClientSession) -> Any:
        found = await session.call_tool("mind_recall", {"query": "belief number", "limit": 50})
        return found.structured_content

    hits = session_run(db, recall)["result"]
    assert all(hit["content"].endswith(" is whole.") for hit in hits)


def test_tool_calls_run_on_the_event_loop_and_answer_as_the_sync_calls(
    tmp_path: pathlib.Path,
) -> None:
    """An in-process server (``build_server``) makes no thread hop for a store call that need
    not wait: after a first call has read the namespaces whole (on SQLite that read goes to a
    worker thread), every record read or written runs on the event loop's thread, and the
    answers and stored state are those of the same calls made directly."""
    import asyncio
    import threading

    from mcp import Client
    from store_checks import ThreadNotingSQLiteStore

    from memstrata import MemoryStack, SharedMemory, SQLiteStore, WorkingMemory
    from memstrata.mcp_server import build_server

    calls = [
        ("working-memory_update", {"content": "goal: ship v2"}),
        ("memory_write", {"key": "plan", "value": "migrate, then test"}),
        ("working-memory_update", {"content": "status: testing", "mode": "append"}),
        ("memory_read", {"keys": ["shared:plan"]}),
    ]

    def stack_on(store: SQLiteStore) -> MemoryStack:
        memory = SharedMemory(store=store, namespace=("workflow", "w1"))
        return MemoryStack([WorkingMemory(), memory], store=store)

    noted = ThreadNotingSQLiteStore(tmp_path / "mcp.db")
    stack = stack_on(noted)
    server = build_server(lambda: stack.run(thread_id="t1", agent="tester"))

    async def main() -> tuple[int, list[Any]]:
        answers = []
        async with Client(server) as client:
            first, *rest = calls
            answers.append((await client.call_tool(*first)).structured_content)
            noted.threads.clear()
            for name, arguments in rest:
                answers.append((await client.call_tool(name, arguments)).structured_content)
        return threading.get_ident(), answers

    loop_thread, answers = asyncio.run(main())
    assert noted.threads == {loop_thread}

    plain = SQLiteStore(tmp_path / "sync.db")
    expected, plain_stack = [], stack_on(plain)
    for name, arguments in calls:
        with plain_stack.run(thread_id="t1", agent="tester") as run:
            expected.append(run.call_tool(name, arguments))

    def timeless(answer: Any) -> Any:
        if isinstance(answer, dict):
            return {k: timeless(v) for k, v in answer.items() if k != "createdAt"}
        return answer

    assert [timeless(a) for a in answers] == [timeless(a) for a in expected]
    assert [a["ok"] for a in answers[:3]] == [True, True, True], answers
    assert answers[3]["entries"]["shared:plan"]["value"] == "migrate, then test"
    noted.close()
    plain.close()


def test_a_call_whose_writes_cannot_be_committed_is_an_error_payload(
    tmp_path: pathlib.Path,
) -> None:
    """A mind's draft is flushed when the call's run closes, after the tool answered: when that
    fails (here the database is locked by another process past the busy timeout), the model
    reads an error payload rather than the tool's "created", and the MCP client gets a tool
    result, not a protocol error carrying the exception's text."""
    import asyncio
    import sqlite3

    from mcp import Client

    from memstrata import AgentMind, MemoryStack, SQLiteStore
    from memstrata.mcp_server import build_server

    db = tmp_path / "locked.db"
    stack = MemoryStack([AgentMind()], store=SQLiteStore(db, busy_timeout=0.2))
    server = build_server(lambda: stack.run(thread_id="t1", agent="tester"))
    arguments = {"content": "Staging uses a different API key.", "confidence": "high"}

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool("mind_believe", arguments)

    asyncio.run(call())  # creates the tables and a first belief
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        answer = asyncio.run(call())
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert answer.is_error
    payload = json.loads(answer.content[0].text)
    assert payload["ok"] is False and payload["tool"] == "mind_believe"
    assert payload["error"]["code"] == "memory_unavailable" and payload["error"]["retry"] is True
    assert "the call's writes were not committed" in payload["error"]["message"]
    assert str(tmp_path) not in answer.content[0].text


def test_a_store_that_fails_to_open_a_run_is_an_error_naming_no_internals(
    tmp_path: pathlib.Path,
) -> None:
    """The database file is overwritten under the server: each call and each resource read
    answers with an error naming the failure's type, never the driver's text or a path."""
    import asyncio
    import os

    from mcp import Client

    from memstrata import MemoryStack, SQLiteStore, WorkingMemory
    from memstrata.mcp_server import build_server

    db = tmp_path / "broken.db"
    first = SQLiteStore(db)
    with MemoryStack([WorkingMemory()], store=first).run(thread_id="t1") as run:
        run.layer("working-memory").update("hello")
    first.close()
    store = SQLiteStore(db)
    stack = MemoryStack([WorkingMemory()], store=store)
    for name in os.listdir(tmp_path):
        with open(tmp_path / name, "r+b") as file:
            file.write(os.urandom(8192))
    server = build_server(lambda: stack.run(thread_id="t1"))

    async def steps() -> tuple[Any, str]:
        async with Client(server) as client:
            answer = await client.call_tool("working-memory_update", {"content": "x"})
            try:
                await client.read_resource("memstrata://layer/working-memory")
            except MCPError as exc:
                return answer, str(exc)
        raise AssertionError("the read did not fail")

    answer, read_error = asyncio.run(steps())
    store.close()
    payload = json.loads(answer.content[0].text)
    # The file is no database: no call will do better until its operator restores it.
    assert answer.is_error and payload["error"]["code"] == "memory_unavailable"
    assert payload["error"]["retry"] is False
    assert payload["error"]["message"].startswith(
        "the memory is unavailable: its database failed (SQLITE_NOTADB); nothing was written"
    )
    assert str(tmp_path) not in answer.content[0].text
    read = "the memory could not be read: "
    assert read in read_error and read_error.split(read)[1].isidentifier()
    assert str(tmp_path) not in answer.content[0].text + read_error


# Lines JSON allows (RFC 8259) that the MCP SDK's parser refuses: a lone surrogate's escape,
# which a JavaScript host writes for a string holding one, and arguments nested past its depth
# limit (about 200 levels, within what memstrata stores). The SDK drops such a line unanswered,
# so the host would wait forever. NaN and Infinity (Python's json.dumps writes them) get
# through the SDK; they are here as the same calls must answer alike either way.
_UNREADABLE_TO_THE_SDK = [
    ("surrogate-key", '{"\\ud800": 1}', "surrogate"),
    ("surrogate-value", '{"goal": "a\\udfffb"}', "surrogate"),
    ("nested", '{"goal": ' + "[" * 220 + "]" * 220 + "}", ""),
    # Past Python's own recursion limit too: call_tool reads it as the JSON text it is.
    ("nested-100k", '{"goal": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON"),
    ("nan", '{"goal": NaN}', "NaN"),
    ("infinity", '{"goal": 1e400}', "Infinity"),
]


def test_a_call_the_sdk_cannot_read_is_answered_as_call_tool_answers_it(
    tmp_path: pathlib.Path,
) -> None:
    """Each such call gets the error payload ``call_tool`` gives its arguments, as an isError
    result for its id; the server keeps serving, and a refused call wrote nothing."""
    import selectors

    def answer(timeout: float = 10) -> dict[str, Any]:
        assert server.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(server.stdout, selectors.EVENT_READ)
            assert selector.select(timeout), "no answer"
        answered: dict[str, Any] = json.loads(server.stdout.readline())
        return answered

    with raw_server(tmp_path / "unreadable.db") as server:
        for number, (_name, arguments, shown) in enumerate(_UNREADABLE_TO_THE_SDK, 1):
            send_line(
                server,
                f'{{"jsonrpc": "2.0", "id": {number}, "method": "tools/call", "params": '
                f'{{"name": "working-memory_update", "arguments": {arguments}}}}}',
            )
            got = answer()
            assert got["id"] == number, got
            result = got["result"]
            assert result["isError"] is True, result
            payload = result["structuredContent"]
            assert payload["ok"] is False and payload["tool"] == "working-memory_update"
            assert shown in payload["error"]["message"], payload
        # A request that is no tool call gets a JSON-RPC error for its id.
        uri = '{"uri": "\\uDBFF"}'
        send_line(
            server, f'{{"jsonrpc": "2.0", "id": "r1", "method": "resources/read", "params": {uri}}}'
        )
        refused = answer()
        assert refused["id"] == "r1" and refused["error"]["code"] == -32700, refused
        # The server still serves, and nothing was written.
        send_line(
            server,
            '{"jsonrpc": "2.0", "id": 99, "method": "resources/read", "params": '
            '{"uri": "memstrata://layer/working-memory"}}',
        )
        block = answer()["result"]["contents"][0]["text"]
        assert block.startswith("<working_memory>\n</working_memory>"), block
        assert server.stdin is not None
        server.stdin.close()
        assert server.wait(timeout=15) == 0
