"""Embedders: text in, float32 vectors out, for semantic dedup and recall.

Anything with ``model``, ``dim``, ``embed(texts)`` and ``aembed(texts)`` is an
:class:`Embedder`. Two ship with memstrata:

* :class:`HashingEmbedder`: the Rust ``hash_embed`` kernel. Offline, deterministic, no model to
  download; similarity follows shared words, word pieces, numbers, negation and word order, not
  meaning.
* :class:`OpenAIEmbedder`: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint
  (OpenAI, Azure-style proxies, vLLM, llama.cpp server, Ollama's OpenAI API...), over the
  standard library's HTTP client so it adds no dependency.

``model`` names the vector space: a layer that stored vectors under one ``model``/``dim`` and
is later given another embedder re-embeds what it stored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memstrata._bridge import await_, bridged
from memstrata._core import hash_embed
from memstrata.exceptions import InvalidInputError, MemstrataError

__all__ = ["Embedder", "EmbedderError", "HashingEmbedder", "OpenAIEmbedder"]

Vectors = npt.NDArray[np.float32]


class EmbedderError(MemstrataError):
    """An embedding service failed or answered something that is not embeddings."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed dimension.

    Attributes:
        model: Names the vector space (vectors from different models are not comparable).
        dim: The vectors' dimension.
    """

    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Returns a float32 array of shape ``(len(texts), dim)``."""

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """The async twin of :meth:`embed`."""


def embed_texts(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """``embedder.embed(texts)``; in layer code that an async method runs (memstrata._bridge),
    ``embedder.aembed(texts)`` awaited by that method, so an embedding service's round trip
    never blocks the event loop."""
    if bridged():
        return await_(embedder.aembed(texts))
    return embedder.embed(texts)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise InvalidInputError(f"texts must be a list of str, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise InvalidInputError(f"texts[{i}] must be str, got {type(text).__name__}")
    return out


class HashingEmbedder:
    """Deterministic feature-hashing embeddings computed in Rust (:func:`memstrata.hash_embed`).

    ``model`` is ``memstrata-hash-v2-<dim>``. Version 2 weighs numbers as whole tokens,
    negation, word pairs (order) and stems, and down-weights stop words; vectors stored under
    ``memstrata-hash-v1-<dim>`` are re-embedded by the layers that stored them.

    Args:
        dim: The dimension, between 1 and 65536.
    """

    def __init__(self, *, dim: int = 384) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 65536:
            raise InvalidInputError(f"dim must be an int between 1 and 65536, got {dim!r}")
        self._dim = dim

    @property
    def model(self) -> str:
        """``memstrata-hash-v2-<dim>``: the vector space, as the layers record it."""
        return f"memstrata-hash-v2-{self._dim}"

    @property
    def dim(self) -> int:
        """The vectors' dimension."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """A float32 array of shape ``(len(texts), dim)``, computed in Rust."""
        return hash_embed(_check_texts(texts), self._dim)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """:meth:`embed`, inline: it only computes (microseconds a text)."""
        return self.embed(texts)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        model: The model name sent to the endpoint (``text-embedding-3-small``...).
        base_url: The API root, up to and including ``/v1``.
        api_key: Sent as ``Authorization: Bearer``; None sends no header (local servers).
        dim: The vectors' dimension. When None it is learned from the first response (or from a
            one-word probe if ``dim`` is read first). Also sent as ``dimensions`` when
            ``send_dimensions`` is true (text-embedding-3 models can shorten their vectors).
        send_dimensions: Send ``dimensions`` in the request.
        batch_size: Texts per request; longer lists are split.
        timeout: Seconds per request.
    """

    def __init__(
        self,
        *,
        model: str = "text-embedding-3-small",
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dim: int | None = None,
        send_dimensions: bool = False,
        batch_size: int = 256,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidInputError(f"model must be a non-empty str, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"base_url must be an http(s) URL, got {base_url!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise InvalidInputError(f"dim must be a positive int, got {dim!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
        self._model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._dim = dim
        self.send_dimensions = send_dimensions
        self.batch_size = batch_size
        self.timeout = timeout

    @property
    def model(self) -> str:
        """``openai-compatible:<base_url>:<model>``: the vector space, as the layers record
        it. The endpoint is part of it, so vectors stored through another ``base_url`` (even
        the same server under another name) are embedded again on first use."""
        return f"openai-compatible:{self.base_url}:{self._model}"

    @property
    def dim(self) -> int:
        """The vectors' dimension; when not given, learned from the first response (read
        first, it costs a one-word request)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """A float32 array of shape ``(len(texts), dim)``, in ``batch_size`` requests.

        Raises:
            EmbedderError: A request failed or the answer held no embeddings of ``dim``.
        """
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [
            self._request(texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """:meth:`embed` in a worker thread, so the requests never block the event loop."""
        import asyncio  # here, like urllib below: most programs never create this embedder

        return await asyncio.to_thread(self.embed, texts)

    def _request(self, batch: list[str]) -> Vectors:
        # Imported on first request: urllib.request pulls in http.client, email and ssl, which
        # would cost every `import memstrata` for an embedder most programs never create.
        import urllib.error
        import urllib.request

        body: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self.send_dimensions and self._dim is not None:
            body["dimensions"] = self._dim
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(
            f"{self.base_url}/embeddings",
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            hint = ""
            if exc.code in (401, 403) and not self._api_key:
                # OpenAI's SDK reads OPENAI_API_KEY by itself; this embedder does not.
                hint = (
                    "; no api_key was given: OpenAIEmbedder(api_key=...), e.g. "
                    'os.environ["OPENAI_API_KEY"]'
                )
            raise EmbedderError(
                f"embedding request to {self.base_url} failed: HTTP {exc.code}: {detail}{hint}"
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise EmbedderError(f"embedding request to {self.base_url} failed: {exc}") from None
        except json.JSONDecodeError:
            raise EmbedderError(f"{self.base_url} answered with something not JSON") from None
        return self._vectors(payload, len(batch))

    def _vectors(self, payload: Any, expected: int) -> Vectors:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no"
            raise EmbedderError(f"expected {expected} embeddings in 'data', got {got}")
        rows: list[Any] = [None] * expected
        for position, entry in enumerate(data):
            index = entry.get("index", position) if isinstance(entry, dict) else None
            vector = entry.get("embedding") if isinstance(entry, dict) else None
            if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
                raise EmbedderError(f"embedding {position} has a bad or repeated index {index!r}")
            if not isinstance(vector, list) or not vector:
                raise EmbedderError(f"embedding {index} is not a list of numbers")
            rows[index] = vector
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (ValueError, TypeError):
            raise EmbedderError("embeddings are not lists of numbers of one length") from None
        if matrix.ndim != 2 or not np.isfinite(matrix).all():
            raise EmbedderError("embeddings are not finite vectors of one length")
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise EmbedderError(
                f"expected {self._dim}-dimensional embeddings, got {matrix.shape[1]}"
            )
        return matrix

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._model!r}, base_url={self.base_url!r})"
