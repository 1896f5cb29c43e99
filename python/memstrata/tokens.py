"""Token counting: a fast calibrated estimator, an exact offline counter, and the protocol that
lets callers plug in any other counter.

Two functions of the native core do the work:

* :func:`estimate_tokens` / :func:`estimate_messages` run one pass over the text and apply a
  linear model fitted against exact o200k_base / cl100k_base counts (see
  ``tools/calibrate_tokens.py``). They are meant for every agent turn.
* :func:`count_tokens` / :func:`count_message_tokens` are exact and identical to tiktoken's
  ``encode_ordinary`` (special-token text is counted as ordinary text); the vocabularies are
  compiled into the extension and loaded once, on first use.

Chat messages are counted with OpenAI's published convention: 3 tokens per message plus its
role and content, 1 more per ``name``, 3 to prime the reply (an empty list costs 0). Where the
convention is silent: text parts of content lists count their text, other parts (images, audio,
files) cost a fixed 85 tokens; each tool call costs its function name, its arguments and 3;
``tool_call_id`` counts its text; other keys are ignored.

Model names map to encodings by longest prefix (``gpt-4o-mini-2024-07-18`` -> o200k_base,
``gpt-4-0613`` -> cl100k_base; unknown and ``None`` -> o200k_base): see :func:`encoding_for`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memstrata._core import (
    count_message_tokens,
    count_tokens,
    encoding_for,
    estimate_messages,
    estimate_tokens,
    fits_within,
)

__all__ = [
    "EstimatingCounter",
    "ExactCounter",
    "TokenCounter",
    "count_message_tokens",
    "count_tokens",
    "encoding_for",
    "estimate_messages",
    "estimate_tokens",
    "fits_within",
]

Messages = Sequence[Mapping[str, Any]]


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts tokens of texts and of chat messages."""

    def count(self, text: str) -> int:
        """Returns the number of tokens of ``text``."""
        ...

    def count_messages(self, messages: Messages) -> int:
        """Returns the prompt tokens of chat ``messages``, framing included."""
        ...


class EstimatingCounter:
    """The native estimator as a :class:`TokenCounter`: fast, within a few percent.

    Args:
        model: Model name choosing the encoding family (``None``: o200k_base).
    """

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self.encoding = encoding_for(model)

    def count(self, text: str) -> int:
        """Returns the estimated number of tokens of ``text``."""
        return estimate_tokens(text, model=self.encoding)

    def count_messages(self, messages: Messages) -> int:
        """Returns the estimated prompt tokens of ``messages``."""
        return estimate_messages(messages, model=self.encoding)

    def __repr__(self) -> str:
        return f"EstimatingCounter(model={self.model!r})"


class ExactCounter:
    """Exact BPE counts as a :class:`TokenCounter`, identical to tiktoken.

    The encoding's vocabulary is loaded (once per process, ~0.1 s for o200k_base) when the
    counter is built, so the first count does not pay for it.

    Args:
        encoding: ``"o200k_base"`` or ``"cl100k_base"``.

    Raises:
        InvalidOptionError: For any other encoding name.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        count_tokens("", encoding=encoding)  # validates the name now rather than on first use
        self.encoding = encoding

    def count(self, text: str) -> int:
        """Returns the exact number of tokens of ``text``."""
        return count_tokens(text, encoding=self.encoding)

    def count_messages(self, messages: Messages) -> int:
        """Returns the exact prompt tokens of ``messages`` under the same convention."""
        return count_message_tokens(messages, encoding=self.encoding)

    def __repr__(self) -> str:
        return f"ExactCounter(encoding={self.encoding!r})"
