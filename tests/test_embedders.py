"""Embedders (HashingEmbedder, OpenAIEmbedder against a loopback server)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest

from memstrata import Embedder, HashingEmbedder, OpenAIEmbedder, hash_embed
from memstrata.embedders import EmbedderError
from memstrata.exceptions import InvalidInputError

# HashingEmbedder -------------------------------------------------------------------------------


def test_hashing_embedder_is_the_rust_kernel_and_deterministic() -> None:
    embedder = HashingEmbedder(dim=96)
    assert isinstance(embedder, Embedder)
    texts = ["Hello world", "hello, WORLD!", "something else entirely"]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 96)
    np.testing.assert_array_equal(vectors, hash_embed(texts, 96))
    np.testing.assert_array_equal(vectors, HashingEmbedder(dim=96).embed(texts))
    assert vectors[0] @ vectors[1] == pytest.approx(1.0, abs=1e-6)
    assert embedder.model.endswith("96") and embedder.dim == 96
    np.testing.assert_array_equal(asyncio.run(embedder.aembed(texts)), vectors)


def test_hashing_embedder_refuses_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="list of str"):
        HashingEmbedder().embed("a lone string")
    with pytest.raises(InvalidInputError, match=r"texts\[1\]"):
        HashingEmbedder().embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="dim"):
        HashingEmbedder(dim=0)


# OpenAIEmbedder against a local server speaking the /v1/embeddings API --------------------------


class FakeEmbeddingsAPI(BaseHTTPRequestHandler):
    """Answers like OpenAI: vectors from hash_embed, data in reverse order (index says where)."""

    requests: ClassVar[list[dict[str, Any]]] = []
    mode = "ok"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        if self.mode == "fail":
            self._send(500, {"error": {"message": "model overloaded"}})
            return
        if self.mode == "unauthorized" and not self.headers.get("Authorization"):
            self._send(401, {"error": {"message": "You didn't provide an API key."}})
            return
        if self.mode == "garbage":
            self._send(200, {"data": [{"index": 0, "embedding": "nope"}]})
            return
        dim = body.get("dimensions", 16)
        vectors = hash_embed(body["input"], dim)
        data = [
            {"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
            for i in range(len(body["input"]))
        ]
        self._send(200, {"object": "list", "data": data[::-1], "model": body["model"]})

    def _send(self, status: int, payload: Any) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    FakeEmbeddingsAPI.requests = []
    FakeEmbeddingsAPI.mode = "ok"
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEmbeddingsAPI)  # loopback, a free port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_openai_embedder_speaks_the_embeddings_api(api: str) -> None:
    embedder = OpenAIEmbedder(model="text-embedding-3-small", base_url=api, api_key="sk-test")
    texts = ["first text", "second text", "third"]
    vectors = embedder.embed(texts)
    np.testing.assert_allclose(vectors, hash_embed(texts, 16), atol=1e-6)  # order restored
    assert vectors.dtype == np.float32 and embedder.dim == 16
    (sent,) = FakeEmbeddingsAPI.requests
    assert sent["path"] == "/v1/embeddings" and sent["auth"] == "Bearer sk-test"
    assert sent["body"]["model"] == "text-embedding-3-small" and sent["body"]["input"] == texts
    assert "text-embedding-3-small" in embedder.model
    assert isinstance(embedder, Embedder)


def test_openai_embedder_batches_and_sends_dimensions(api: str) -> None:
    embedder = OpenAIEmbedder(base_url=api, dim=24, send_dimensions=True, batch_size=2)
    vectors = asyncio.run(embedder.aembed([f"text {i}" for i in range(5)]))
    assert vectors.shape == (5, 24)
    assert [len(r["body"]["input"]) for r in FakeEmbeddingsAPI.requests] == [2, 2, 1]
    assert all(
        r["body"]["dimensions"] == 24 and r["auth"] is None for r in FakeEmbeddingsAPI.requests
    )


def test_openai_embedder_learns_its_dim_from_a_probe(api: str) -> None:
    assert OpenAIEmbedder(base_url=api).dim == 16
    assert len(FakeEmbeddingsAPI.requests) == 1


def test_openai_embedder_errors_are_clear(api: str) -> None:
    FakeEmbeddingsAPI.mode = "fail"
    with pytest.raises(EmbedderError, match=r"HTTP 500.*overloaded"):
        OpenAIEmbedder(base_url=api).embed(["x"])
    FakeEmbeddingsAPI.mode = "garbage"
    with pytest.raises(EmbedderError, match="not a list of numbers"):
        OpenAIEmbedder(base_url=api).embed(["x"])
    FakeEmbeddingsAPI.mode = "ok"
    with pytest.raises(EmbedderError, match="expected 8-dimensional"):
        OpenAIEmbedder(base_url=api, dim=8).embed(["x"])
    with pytest.raises(EmbedderError, match="failed"):
        OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", timeout=2).embed(["x"])
    with pytest.raises(InvalidInputError, match="base_url"):
        OpenAIEmbedder(base_url="ftp://example")


def test_an_endpoint_refusing_an_embedder_given_no_api_key_is_told_to_give_one(api: str) -> None:
    """OpenAI's own SDK reads OPENAI_API_KEY; this embedder sends only the key it is given,
    so a refusal for want of one says where the key goes."""
    FakeEmbeddingsAPI.mode = "unauthorized"
    with pytest.raises(EmbedderError, match=r"HTTP 401.*no api_key was given.*OpenAIEmbedder"):
        OpenAIEmbedder(base_url=api).embed(["x"])
    assert OpenAIEmbedder(base_url=api, api_key="sk-test").embed(["x"]).shape == (1, 16)


def test_agent_mind_works_over_the_openai_embedder(api: str, tmp_path: Any) -> None:
    from memstrata import AgentMind, MemoryStack, SQLiteStore

    store = SQLiteStore(tmp_path / "m.db")
    stack = MemoryStack(
        [AgentMind(embedder=OpenAIEmbedder(base_url=api, dim=64, send_dimensions=True))],
        store=store,
    )
    with stack.run(agent="a") as run:
        assert (
            run.call_tool("mind_believe", {"content": "The API answers in JSON"})["status"] == "ok"
        )
    with stack.run(agent="a") as run:
        found = run.call_tool("mind_recall", {"query": "API answers JSON"})["result"]
    assert found[0]["content"] == "The API answers in JSON"
    store.close()


def _imported_by_import_memstrata(modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after ``import memstrata``."""
    code = (
        "import json, sys, memstrata\n"
        f"print(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def test_import_memstrata_leaves_the_http_client_for_the_first_request() -> None:
    assert _imported_by_import_memstrata(("urllib.request", "http.client", "email.parser")) == []


def test_import_memstrata_does_not_load_ssl_or_asyncio() -> None:
    # asyncio brings ssl along; the async twins import it when first awaited.
    assert _imported_by_import_memstrata(("ssl", "asyncio")) == []
