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

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memstrata._core import (
    count_message_tokens,
    count_tokens,
    encoding_for,
    estimate_messages,
    estimate_tokens,
    fits_within,
)
from memstrata.exceptions import InvalidInputError

__all__ = [
    "EstimatingCounter",
    "ExactCounter",
    "TokenCounter",
    "count_message_tokens",
    "count_tokens",
    "encoding_for",
    "estimate_messages",
    "estimate_tokens",
    "exact_count",
    "exact_count_over",
    "fits_exactly",
    "fits_within",
    "json_lines",
    "same_counts",
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


def checked_counter(tokens: object, option: str = "tokens") -> TokenCounter:
    """``tokens`` if it has a :class:`TokenCounter`'s methods, else InvalidInputError naming
    ``option`` (a str has a ``count`` method too, so both methods are asked for)."""
    if not (
        callable(getattr(tokens, "count", None))
        and callable(getattr(tokens, "count_messages", None))
    ):
        raise InvalidInputError(
            f"{option} must be a token counter (with count and count_messages), got "
            f"{type(tokens).__name__}"
        )
    return tokens  # type: ignore[return-value]


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


# Exact counts a budget check made, by encoding and content: a layer that checks its block when
# it is written meets the same text again when the next run renders it, and most of its lines
# in the next update. Whole texts: the last _TEXTS_KEPT. Parts: all of them, forgotten together
# once there are _PARTS_KEPT (a part seen since is counted again, once).
_TEXTS_KEPT = 32
_PARTS_KEPT = 1 << 16
_texts: dict[str, OrderedDict[str, int]] = {}
_parts: dict[str, dict[str, int]] = {}
_exact_lock = threading.Lock()


def exact_count(
    counter: TokenCounter,
    text: str,
    split: Callable[[str], Sequence[str]] | None = None,
    *,
    keep: bool = True,
) -> int:
    """``text``'s tokens as a budget must count them: exactly, in the encoding of an
    :class:`EstimatingCounter`, or by any other counter itself (it is the caller's own
    definition of a token). Counts are kept by content, for the texts last counted;
    ``keep=False`` counts without keeping (texts counted once, such as the prefixes of a
    search, would push out the ones met again).

    ``split`` cuts ``text`` into parts that are counted one by one and added up, each part's
    count kept, so an edit recounts only the parts it changed. The caller guarantees that no
    piece of the encoding's pre-tokenizer spans two parts: BPE never merges across pieces, so
    the counts then add up exactly. Indented JSON split after each line break qualifies (see
    WorkingMemory); arbitrary text does not.
    """
    if not isinstance(counter, EstimatingCounter):
        return counter.count(text)
    encoding = counter.encoding
    if not keep:
        return count_tokens(text, encoding=encoding)
    with _exact_lock:
        texts = _texts.setdefault(encoding, OrderedDict())
        known = texts.get(text)
    if known is not None:
        return known
    if split is None:
        total = count_tokens(text, encoding=encoding)
    else:
        parts = split(text)
        with _exact_lock:
            kept = _parts.setdefault(encoding, {})
            counts = list(map(kept.get, parts))
        if None in counts:
            new = {}
            for index, part in enumerate(parts):
                if counts[index] is None:
                    counts[index] = new[part] = count_tokens(part, encoding=encoding)
            with _exact_lock:
                if len(kept) + len(new) > _PARTS_KEPT:
                    kept.clear()
                kept.update(new)
        total = sum(counts)  # type: ignore[arg-type]
    with _exact_lock:
        texts[text] = total
        while len(texts) > _TEXTS_KEPT:
            texts.popitem(last=False)
    return total


def exact_count_over(
    counter: TokenCounter,
    text: str,
    limit: int,
    split: Callable[[str], Sequence[str]] | None = None,
    *,
    keep: bool = True,
) -> int | None:
    """``text``'s exact tokens (see :func:`exact_count`, which ``keep`` is passed to) when they
    pass ``limit``; None when it fits. A BPE token covers at least one byte, so with an
    :class:`EstimatingCounter`'s encoding a text of at most ``limit`` bytes fits without
    being counted."""
    fits_bytes = len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) <= limit
    if fits_bytes and isinstance(counter, EstimatingCounter):
        return None
    tokens = exact_count(counter, text, split, keep=keep)
    return tokens if tokens > limit else None


def fits_exactly(counter: TokenCounter, text: str, limit: int) -> bool:
    """Whether ``text``'s exact tokens (see :func:`exact_count`) are at most ``limit``, with
    nothing kept. With an :class:`EstimatingCounter`'s encoding the text is counted only as
    far as ``limit`` reaches (:func:`fits_within`), so a long text that does not fit costs a
    count of about ``limit`` tokens, not of the whole text; and a text of at most ``limit``
    bytes fits without being counted (a BPE token covers at least one byte)."""
    if limit < 0:
        return False
    if not isinstance(counter, EstimatingCounter):
        return counter.count(text) <= limit
    if len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) <= limit:
        return True
    return fits_within(text, limit, encoding=counter.encoding)


def same_counts(one: TokenCounter, other: TokenCounter) -> bool:
    """Whether a budget counts every text alike with either counter: the same object, or the
    library's own counters of one encoding (both count budgets exactly in it)."""
    if one is other:
        return True
    kinds = (EstimatingCounter, ExactCounter)
    return (
        type(one) in kinds
        and type(other) in kinds
        and getattr(one, "encoding", None) == getattr(other, "encoding", None)
    )


def json_lines(text: str) -> list[str]:
    """Indented JSON (optionally closed by a final line such as ``</tag>``) cut after each line
    break, a ``split`` for :func:`exact_count`: no piece of the BPE pre-tokenizer spans a break
    there. A break ends the piece it is in, and only a line starting with '/' could join the
    piece before it: no JSON line does, and a closing tag, which does, stays with the line
    before it."""
    lines = text.replace("\n", "\n\0").split("\0")  # NUL never occurs in JSON text
    if len(lines) > 1:
        closing = lines.pop()
        lines[-1] += closing
    return lines


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
