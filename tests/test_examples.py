"""The examples, run with the real OpenAI and Anthropic SDKs against a server on loopback that
replays recorded model responses (no key, no network), as a provider would answer them."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest
from anthropic import Anthropic
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, OpenAI

from memstrata import Embedder, MemoryStack, SQLiteStore, WorkingMemory, hash_embed

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Loopback:
    """An HTTP server on loopback answering each POST with ``answer(json body)`` as JSON; keeps
    the requests it got."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body})
                answer_bytes = json.dumps(answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer_bytes)))
                self.end_headers()
                self.wfile.write(answer_bytes)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Replay(Loopback):
    """Answers each POST with the next recorded response (no network, no key)."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        pending = list(responses)
        super().__init__(lambda _body: pending.pop(0))


def chat_completion(message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def update_call(call_id: str, patch: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "working-memory_update", "arguments": json.dumps(patch)},
            }
        ],
    }


@pytest.fixture
def replay() -> Iterator[Any]:
    servers: list[Replay] = []

    def start(responses: list[dict[str, Any]]) -> Replay:
        servers.append(Replay(responses))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_openai_tool_loop(replay: Any, tmp_path: pathlib.Path) -> None:
    example = load("openai_tool_loop")
    server = replay(
        [
            chat_completion(update_call("call_1", {"user": "Priya", "release": "v2.4"})),
            chat_completion({"role": "assistant", "content": "Noted: v2.4 ships Friday."}),
            chat_completion({"role": "assistant", "content": "You are Priya."}),
        ]
    )
    client = OpenAI(api_key="test", base_url=f"{server.url}/v1")
    stack = example.make_stack(str(tmp_path / "openai.db"))
    reply = example.agent_turn(client, stack, "I'm Priya; v2.4 ships Friday.", thread_id="t")
    assert reply == "Noted: v2.4 ships Friday."
    assert example.agent_turn(client, stack, "Who am I?", thread_id="t") == "You are Priya."

    first, second, third = (r["body"] for r in server.requests)
    assert "working-memory_update" in [t["function"]["name"] for t in first["tools"]]
    # The tool result went back to the model, and the next turn's prompt carries the memory.
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"]) == {"ok": True, "version": 1}
    system_text = " ".join(m["content"] for m in third["messages"] if m["role"] == "system")
    assert "<working_memory>" in system_text and '"user": "Priya"' in system_text


def test_anthropic_tool_loop(replay: Any, tmp_path: pathlib.Path) -> None:
    example = load("anthropic_tool_loop")

    def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    server = replay(
        [
            message(
                [
                    {"type": "text", "text": "Saving that."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "working-memory_update",
                        "input": {"style": "short answers"},
                    },
                ],
                "tool_use",
            ),
            message([{"type": "text", "text": "Will do."}], "end_turn"),
        ]
    )
    client = Anthropic(api_key="test", base_url=server.url)
    stack = MemoryStack(
        [WorkingMemory(schema={"type": "object"})], store=SQLiteStore(tmp_path / "a.db")
    )
    assert example.agent_turn(client, stack, "I prefer short answers.", thread_id="t") == "Will do."
    first, second = (r["body"] for r in server.requests)
    assert (
        "input_schema" in first["tools"][0] and first["tools"][0]["name"] == "working-memory_update"
    )
    assert all(m["role"] != "system" for m in first["messages"])
    tool_result = second["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "toolu_1"
    assert "<working_memory>" in second["system"] and "short answers" in second["system"]


def test_fastapi_agent_endpoint(replay: Any, tmp_path: pathlib.Path) -> None:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        example = load("fastapi_agent")
    finally:
        sys.path.remove(str(EXAMPLES))
    server = replay(
        [
            chat_completion(update_call("call_1", {"ticket": "OPS-42"})),
            chat_completion({"role": "assistant", "content": "Tracking OPS-42."}),
        ]
    )
    client = AsyncOpenAI(api_key="test", base_url=f"{server.url}/v1")
    app = example.create_app(client=client, db_path=str(tmp_path / "api.db"))
    with TestClient(app) as http:
        ana = {"X-User": "ana"}
        response = http.post(
            "/chat", json={"thread_id": "1", "message": "Track OPS-42"}, headers=ana
        )
        assert response.status_code == 200
        assert response.json() == {"reply": "Tracking OPS-42.", "memory": {"ticket": "OPS-42"}}
        bad = http.post("/chat", json={"thread_id": 5}, headers=ana)
        assert bad.status_code == 422
        assert http.post("/chat", json={"thread_id": "1", "message": "hi"}).status_code == 401
    # The turn ran through the async forms; its memory is ana's conversation "1", which
    # another user's conversation of the same id does not see.
    stack = example.make_stack(str(tmp_path / "api.db"))
    with stack.run(thread_id="1", resource_id="ana") as run:
        assert run.layer("working-memory").snapshot == {"ticket": "OPS-42"}
    with stack.run(thread_id="1", resource_id="bo") as run:
        assert run.layer("working-memory").snapshot == {}
    stack.close()


def embeddings_answer(body: Any) -> dict[str, Any]:
    """An OpenAI-compatible ``/v1/embeddings`` answer, with the offline hashing embedder's
    vectors in the API's shape (what Ollama, vLLM or TEI would send)."""
    vectors = hash_embed(body["input"], 64)
    return {
        "object": "list",
        "model": body["model"],
        "data": [
            {"object": "embedding", "index": i, "embedding": v.tolist()}
            for i, v in enumerate(vectors)
        ],
    }


def test_real_embeddings_example_talks_to_an_openai_compatible_endpoint() -> None:
    example = load("real_embeddings")
    server = Loopback(embeddings_answer)
    try:
        url = f"{server.url}/v1"
        found = example.remember_and_recall(example.endpoint_embedder(url, "nomic-embed"))
    finally:
        server.close()
    assert found[0] == "The user's production database is PostgreSQL 16 on AWS RDS"
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert all(r["body"]["model"] == "nomic-embed" for r in server.requests)
    sent = [text for r in server.requests for text in r["body"]["input"]]
    assert "Which database runs in production?" in sent


def test_real_embeddings_example_wraps_any_encode_function() -> None:
    example = load("real_embeddings")
    calls: list[list[str]] = []

    def encode(texts: list[str]) -> Any:
        calls.append(texts)
        return hash_embed(texts, 64)

    embedder = example.EncoderEmbedder(encode, model="my-encoder-v1", dim=64)
    assert isinstance(embedder, Embedder)
    found = example.remember_and_recall(embedder)
    assert found[0] == "The user's production database is PostgreSQL 16 on AWS RDS"
    assert calls  # the mind embedded through the wrapped function
