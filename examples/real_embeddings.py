"""Give an AgentMind a real embedding model.

Two ways:

* any OpenAI-compatible ``/v1/embeddings`` endpoint, through ``OpenAIEmbedder(base_url=...)``:
  OpenAI itself, or a server on your own machine (Ollama, vLLM, Hugging Face TEI,
  llama.cpp's server all speak this API);
* anything else, by writing a class with ``model``, ``dim``, ``embed`` and ``aembed``: the
  ``Embedder`` protocol. ``EncoderEmbedder`` below wraps any function from a list of texts to
  a matrix, such as ``SentenceTransformer("all-MiniLM-L6-v2").encode``.

Run against a local Ollama (``ollama pull nomic-embed-text``)::

    python examples/real_embeddings.py http://localhost:11434/v1 nomic-embed-text
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata import AgentMind, Embedder, InMemoryStore, MemoryStack, OpenAIEmbedder


def endpoint_embedder(base_url: str, model: str, api_key: str | None = None) -> Embedder:
    """An OpenAI-compatible endpoint: ``base_url`` up to and including ``/v1``; local servers
    need no key."""
    return OpenAIEmbedder(base_url=base_url, model=model, api_key=api_key)


class EncoderEmbedder:
    """The ``Embedder`` protocol around any ``encode(texts) -> (n, dim) array`` function.

    ``model`` names the vector space: change it when the function changes, and a mind that
    stored vectors under the old name re-embeds them.
    """

    def __init__(self, encode: Callable[[list[str]], Any], *, model: str, dim: int) -> None:
        self._encode, self._model, self._dim = encode, model, dim

    @property
    def model(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.asarray(self._encode(list(texts)), dtype=np.float32).reshape(-1, self._dim)

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed(texts)


def remember_and_recall(embedder: Embedder) -> list[str]:
    """One run stores two beliefs, the next recalls by meaning: what changes with the model."""
    stack = MemoryStack([AgentMind(embedder=embedder)], store=InMemoryStore())
    with stack.run(agent="docs-example") as run:
        for fact in (
            "The user's production database is PostgreSQL 16 on AWS RDS",
            "The user wants weekly reports on Monday mornings",
        ):
            run.call_tool("mind_believe", {"content": fact, "confidence": "high"})
    with stack.run(agent="docs-example") as run:
        found = run.call_tool("mind_recall", {"query": "Which database runs in production?"})
    return [hit["content"] for hit in found["result"]]


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://localhost:11434/v1"
    name = sys.argv[2] if len(sys.argv) > 2 else "nomic-embed-text"
    print(remember_and_recall(endpoint_embedder(url, name)))
