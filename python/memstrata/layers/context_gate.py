"""ContextGate: every call boundary is checked against the model's input window.

Implements Layer 2 of seed 003. :meth:`ContextGate.check_and_compress` estimates the prompt
(padded by ``pad_pct``) and takes one of four paths:

* below ``soft_warn_at_pct`` of the window: pass, unchanged;
* in ``[soft_warn_at_pct, prune_at_pct)``: pass, with one WARNING through :mod:`logging` per
  run (not one per tool-loop iteration);
* at ``prune_at_pct`` or above: older tool results become ``[summarized: call_id=...]``
  placeholders (the ``keep_recent`` latest stay verbatim) and the prompt is estimated again;
  if it now fits under the window it passes, pruned;
* still at or over the window: a redacted checkpoint is written to
  ``<checkpoints_dir>/<call_id>.json`` and :class:`RecoverableContextError` is raised with its
  path, so the caller can decompose the task instead of burning iterations on a sure failure.

With a :class:`~memstrata.stack.MemoryStack`, pass ``gate=ContextGate(...)``: ``run.prepare()``
then ends at the gate, so every call boundary passes it.

Decisions where the seed is silent:

* "Fits" means the padded estimate is strictly below ``max_input_tokens``; the refusal is "at
  or above 100% after compression", as the seed says.
* Per-message token counts are cached by message identity (the gate never mutates messages and
  neither does the stack); a message whose ``content`` object was replaced is counted again.
  Count a conversation you mutate in place with ``cache=False``.
* The once-per-run warning is keyed by ``run_id`` (the stack passes one per run); without one,
  the gate itself is the run until :meth:`ContextGate.new_run`.
* Redaction (on by default) replaces tool-role contents and assistant tool-call arguments by
  ``[redacted: N chars]`` and, going beyond the seed, sweeps user, assistant and system prose
  for secret-shaped strings (API keys, bearer tokens, JWTs, private keys, passwords in URLs,
  ``password=...`` pairs). ``redaction_policy`` lists the channels that were redacted.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import and_, is_, is_not, lt, not_
from pathlib import Path
from typing import Any, Literal

import orjson

from memstrata._core import prune_sliding_window
from memstrata.exceptions import InvalidInputError, RecoverableContextError
from memstrata.model_windows import FALLBACK_MAX_INPUT_TOKENS, max_input_tokens_for
from memstrata.prompts import TOOL_RESULT_PRUNED
from memstrata.safe_files import path_in, write_private
from memstrata.tokens import EstimatingCounter, TokenCounter

logger = logging.getLogger("memstrata.context_gate")

Message = dict[str, Any]
GateState = Literal["pass", "warn", "pruned", "refused", "disabled"]

_WARNED_RUNS_KEPT = 4096
# Messages whose counts are cached by identity, and the characters of content (text, or JSON
# for structured content) they may keep alive between them.
_CACHE_LIMIT = 200_000
_CACHE_MAX_CHARS = 64 << 20
# Texts held for their counts: few and large (layer blocks), so a short list.
_TEXT_CACHE_LIMIT = 64


@dataclass(frozen=True)
class GateDecision:
    """What the gate did at one call boundary.

    Attributes:
        state: ``pass``, ``warn``, ``pruned`` (pruned, now fits) or ``disabled``. A refusal
            raises instead of returning.
        messages: The messages to send (the input list itself unless pruned).
        estimated_tokens: The padded estimate of ``messages``.
        max_input_tokens: The window they were checked against.
        pruned: How many tool results were replaced by placeholders.
    """

    state: GateState
    messages: list[Message]
    estimated_tokens: int
    max_input_tokens: int
    pruned: int = 0

    @property
    def fraction(self) -> float:
        return self.estimated_tokens / self.max_input_tokens


class ContextGate:
    """The context-window gate.

    Args:
        model: Model name: picks the window from the table in :mod:`memstrata.model_windows`
            when ``max_input_tokens`` is None, and goes into checkpoints.
        max_input_tokens: The window in tokens; None: from the model table, else 8192.
        soft_warn_at_pct: Fraction of the window from which a WARNING is logged (once per run).
        prune_at_pct: Fraction of the window from which old tool results are pruned.
        pad_pct: Padding added to every estimate (tokenizers differ across providers).
        keep_recent: Tool results kept verbatim when pruning.
        checkpoints_dir: Where refusal checkpoints go; None: ``./checkpoints``.
        checkpoint_redact_secrets: Redact tool bodies, tool-call arguments and secret-shaped
            strings in checkpoints.
        enabled: False turns every check into a pass-through.
        tokens: Token counter; the native estimator (for ``model``'s encoding) by default.
        cache: Cache per-message counts by message identity (see the module docstring).
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        max_input_tokens: int | None = None,
        soft_warn_at_pct: float = 0.70,
        prune_at_pct: float = 0.80,
        pad_pct: float = 0.05,
        keep_recent: int = 3,
        checkpoints_dir: str | os.PathLike[str] | None = None,
        checkpoint_redact_secrets: bool = True,
        enabled: bool = True,
        tokens: TokenCounter | None = None,
        cache: bool = True,
    ) -> None:
        if max_input_tokens is not None and (
            isinstance(max_input_tokens, bool)
            or not isinstance(max_input_tokens, int)
            or max_input_tokens < 1
        ):
            raise InvalidInputError(
                f"max_input_tokens must be a positive int or None, got {max_input_tokens!r}"
            )
        for option, value in (
            ("soft_warn_at_pct", soft_warn_at_pct),
            ("prune_at_pct", prune_at_pct),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InvalidInputError(f"{option} must be in (0, 1], got {value!r}")
        if soft_warn_at_pct > prune_at_pct:
            raise InvalidInputError(
                f"soft_warn_at_pct ({soft_warn_at_pct}) must not exceed prune_at_pct "
                f"({prune_at_pct})"
            )
        if (
            isinstance(pad_pct, bool)
            or not isinstance(pad_pct, (int, float))
            or not 0 <= pad_pct < 1
        ):
            raise InvalidInputError(f"pad_pct must be in [0, 1), got {pad_pct!r}")
        if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
            raise InvalidInputError(f"keep_recent must be a non-negative int, got {keep_recent!r}")
        self.model = model
        self.max_input_tokens = (
            max_input_tokens
            if max_input_tokens is not None
            else max_input_tokens_for(model, fallback=FALLBACK_MAX_INPUT_TOKENS)
        )
        self.soft_warn_at_pct = float(soft_warn_at_pct)
        self.prune_at_pct = float(prune_at_pct)
        self.pad_pct = float(pad_pct)
        self.keep_recent = keep_recent
        self.checkpoints_dir = (
            Path(checkpoints_dir) if checkpoints_dir is not None else Path("checkpoints")
        )
        self.checkpoint_redact_secrets = checkpoint_redact_secrets
        self.enabled = enabled
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter(model)
        self.cache = cache
        # id(message) -> (message, content object, tokens, characters of the content); holding
        # the message keeps its id from being reused while cached.
        self._counts: OrderedDict[int, tuple[Message, Any, int, int]] = OrderedDict()
        self._counts_chars = 0
        self._text_counts: OrderedDict[int, tuple[str, Any, int]] = OrderedDict()
        self._placeholders: OrderedDict[int, tuple[Message, Any, int]] = OrderedDict()
        # The last call's messages, their contents and their counts.
        self._last: tuple[list[Message], list[Any], list[int]] = ([], [], [])
        self._lock = threading.Lock()
        self._warned: OrderedDict[str, None] = OrderedDict()
        self._default_run = 0
        self._priming = _priming_tokens(self.tokens)

    # The gate ---------------------------------------------------------------------------------

    def check_and_compress(
        self, messages: Sequence[Message], call_id: str, *, run_id: str | None = None
    ) -> list[Message]:
        """The messages to send at this call boundary: as given, or pruned to fit.

        Raises:
            RecoverableContextError: Even pruned, the prompt does not fit; the checkpoint path
                is on the error.
            InvalidInputError: ``messages`` is not a list of dicts, or ``call_id`` is not a safe
                file name (checked only when a checkpoint is written).
        """
        return self.evaluate(messages, call_id, run_id=run_id).messages

    def evaluate(
        self, messages: Sequence[Message], call_id: str, *, run_id: str | None = None
    ) -> GateDecision:
        """Like :meth:`check_and_compress`, returning what was decided and the estimates."""
        given = _as_message_list(messages)
        if not self.enabled:
            return GateDecision("disabled", given, 0, self.max_input_tokens)
        limit = self.max_input_tokens
        raw, counts = self._raw_counts(given)
        estimate = self._pad(raw)
        if estimate < self.soft_warn_at_pct * limit:
            return GateDecision("pass", given, estimate, limit)
        if estimate < self.prune_at_pct * limit:
            self._warn_once(run_id, call_id, estimate)
            return GateDecision("warn", given, estimate, limit)
        pruned, count = prune_sliding_window(
            given, keep_recent=self.keep_recent, placeholder=TOOL_RESULT_PRUNED
        )
        after = self._pad(self._raw_after_prune(given, pruned, counts, raw)) if count else estimate
        if after < limit:
            logger.info(
                "context gate: call %s at %d/%d tokens; pruned %d tool results to %d",
                call_id,
                estimate,
                limit,
                count,
                after,
            )
            return GateDecision("pruned", pruned, after, limit, count)
        path = self.write_checkpoint(pruned, call_id, after)
        raise RecoverableContextError(
            f"call {call_id} needs ~{after:,} tokens (padded {self.pad_pct:.0%}) after pruning "
            f"{count} tool results; the model accepts {limit:,}. Decompose the task; the "
            f"conversation was checkpointed to {path}",
            checkpoint_path=str(path),
            call_id=call_id,
            estimated_tokens=after,
            max_input_tokens=limit,
        )

    def estimate(self, messages: Sequence[Message]) -> int:
        """The padded token estimate of ``messages`` (per-message counts cached)."""
        return self._pad(self._raw_counts(_as_message_list(messages))[0])

    def _pad(self, raw: int) -> int:
        return math.ceil(raw * (1 + self.pad_pct))

    def _raw_counts(self, messages: list[Message]) -> tuple[int, list[int]]:
        """The unpadded total and each message's own tokens.

        The hot path of a tool loop sees the same message objects again plus a few new ones:
        the stack's injected items are new objects each turn, the conversation after them is
        not, though a sliding window shifts it. So the last call's messages, contents and counts
        are kept; a message that is the same object as the last call's, at its position shifted
        by the window, with the same content object, reuses its count, and only the others are
        counted (through a per-message cache keyed by identity, for messages seen before that).
        """
        if not messages:
            return 0, []
        if not self.cache:
            counts = [self.tokens.count_messages([m]) - self._priming for m in messages]
            return sum(counts) + self._priming, counts
        contents = list(map(dict.get, messages, repeat("content")))
        with self._lock:
            held, prev_contents, prev_counts = self._last
            # `held` keeps every message of the last call alive, so an object found there by
            # identity is that very message; its content may have been replaced since, hence
            # the second check.
            counts = _reused_counts(messages, contents, held, prev_contents, prev_counts)
            for i in compress(range(len(counts)), map(lt, counts, repeat(0))):
                counts[i] = self._message_tokens(messages[i], contents[i])
            self._last = (list(messages), contents, counts)
        return sum(counts) + self._priming, counts

    def _raw_after_prune(
        self, given: list[Message], pruned: list[Message], counts: list[int], raw: int
    ) -> int:
        """The unpadded total of ``pruned``: ``raw`` minus each replaced message plus its
        placeholder (placeholder counts cached by the original message's identity)."""
        for i in compress(range(len(given)), map(is_not, pruned, given)):
            original, replaced = given[i], pruned[i]
            placeholder = replaced.get("content")
            entry = self._placeholders.get(id(original))
            if entry is not None and entry[0] is original and entry[1] == placeholder:
                tokens = entry[2]
            else:
                tokens = self.tokens.count_messages([replaced]) - self._priming
                self._placeholders[id(original)] = (original, placeholder, tokens)
                if len(self._placeholders) > _CACHE_LIMIT:
                    self._placeholders.popitem(last=False)
            raw += tokens - counts[i]
        return raw

    def new_run(self) -> None:
        """Starts a new run for callers that do not pass ``run_id``: the soft warning may fire
        once more."""
        self._default_run += 1

    def _message_tokens(self, message: Message, content: Any) -> int:
        key = id(message)
        entries = self._counts
        entry = entries.get(key)
        if entry is not None and entry[0] is message and entry[1] is content:
            return entry[2]
        # A message of only a role and a text is counted from those two alone, so a new dict
        # around the same text object (the stack wraps each layer's item afresh every turn,
        # and a layer's large block rarely changes) reuses the count of the last one.
        simple = len(message) == 2 and type(content) is str and "role" in message
        if simple:
            role = message["role"]
            text_entry = self._text_counts.get(id(content))
            if text_entry is not None and text_entry[0] is content and text_entry[1] == role:
                return text_entry[2]
        tokens = self.tokens.count_messages([message]) - self._priming
        if simple:
            # Only by its text: the stack's wrapper dict is new every turn, and caching it by
            # identity too would hold every turn's copy of a large block (a 200 KB working
            # memory each turn) until 200,000 messages had passed.
            self._text_counts[id(content)] = (content, role, tokens)
            if len(self._text_counts) > _TEXT_CACHE_LIMIT:
                self._text_counts.popitem(last=False)
            return tokens
        size = _length(content)
        entries[key] = (message, content, tokens, size)
        self._counts_chars += size
        while len(entries) > _CACHE_LIMIT or self._counts_chars > _CACHE_MAX_CHARS:
            self._counts_chars -= entries.popitem(last=False)[1][3]
        return tokens

    def _warn_once(self, run_id: str | None, call_id: str, estimate: int) -> None:
        key = run_id if run_id is not None else f"\x00default-{self._default_run}"
        if key in self._warned:
            return
        self._warned[key] = None
        if len(self._warned) > _WARNED_RUNS_KEPT:
            self._warned.popitem(last=False)
        logger.warning(
            "context gate: call %s uses %d of %d input tokens (%.0f%%, soft warning at %.0f%%, "
            "pruning at %.0f%%)",
            call_id,
            estimate,
            self.max_input_tokens,
            100 * estimate / self.max_input_tokens,
            100 * self.soft_warn_at_pct,
            100 * self.prune_at_pct,
        )

    # Checkpoints ------------------------------------------------------------------------------

    def write_checkpoint(self, messages: Sequence[Message], call_id: str, estimated: int) -> Path:
        """Writes ``<checkpoints_dir>/<call_id>.json`` (mode 0600) in the seed's format."""
        path = path_in(self.checkpoints_dir, call_id, ".json")
        if self.checkpoint_redact_secrets:
            redacted, policy = redact_messages(messages)
        else:
            redacted, policy = list(messages), []
        record = {
            "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "call_id": call_id,
            "model": self.model,
            "estimated_tokens": estimated,
            "max_input_tokens": self.max_input_tokens,
            "redaction_policy": policy,
            "redacted": bool(policy),
            "messages": redacted,
        }
        write_private(path, orjson.dumps(record, option=orjson.OPT_INDENT_2))
        return path


# Redaction ------------------------------------------------------------------------------------

POLICY_TOOL_CONTENT = "tool.content"
POLICY_TOOL_ARGUMENTS = "assistant.tool_calls.function.arguments"
POLICY_FUNCTION_CALL = "assistant.function_call.arguments"

# Content blocks that carry a tool's input or output inside another role's message (Anthropic's
# tool_use / tool_result, OpenAI Responses' function_call / function_call_output): the field
# holding the body, redacted whole like a tool-role message.
_TOOL_BLOCK_BODIES = {
    "tool_use": "input",
    "server_tool_use": "input",
    "tool_result": "content",
    "function_call": "arguments",
    "function_call_output": "output",
}

# Secret-shaped strings. Each pattern keeps a harmless prefix (group "keep") where one helps a
# reader see what was there ("Bearer ", "https://user:"). Checkpoints are for audit, so the
# patterns lean towards redacting too much rather than too little.
_ASSIGNED_VALUE = r"(?!\[redacted)(?:(?<=\")[^\"\n]{6,}(?=\")|(?<=')[^'\n]{6,}(?=')|[^\s\"',;]{6,})"
_SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    ("slack_webhook", re.compile(r"(?P<keep>\bhttps://hooks\.slack\.com/services/)[\w/-]+")),
    ("url_password", re.compile(r"(?P<keep>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s@/]+(?=@)")),
    ("bearer", re.compile(r"(?P<keep>\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{16,}=*")),
    (
        "basic_auth",
        re.compile(r"(?P<keep>\b(?i:authorization)\s*[:=]\s*[Bb]asic\s+)[A-Za-z0-9+/]{8,}={0,2}"),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ),
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}")),
    ("slack_token", re.compile(r"\b(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("google_oauth", re.compile(r"\b(?:ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[0-9A-Za-z_-]{20,})")),
    ("stripe_key", re.compile(r"\b(?:[rs]k_(?:live|test)_|whsec_)[0-9A-Za-z]{16,}")),
    ("twilio_key", re.compile(r"\bSK[0-9a-fA-F]{32}\b")),
    ("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("package_token", re.compile(r"\b(?:npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_-]{50,})")),
    (
        # An AWS secret access key has no prefix: 40 characters of base64 mixing upper case,
        # lower case and digits. Hex digests (one case only) and prose never look like that.
        "aws_secret_key",
        re.compile(
            r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
            r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
    ),
    (
        # key = value pairs whose name says secret (``TWILIO_AUTH_TOKEN=...``,
        # ``"password": "..."``, ``aws_secret_access_key: ...``), in any case.
        "assigned_secret",
        re.compile(
            r"(?P<keep>(?:password|passwd|pwd|secret|api[_-]?key|private[_-]?key"
            r"|(?:auth|access|refresh|session|id|api)[_-]?token)"
            r"[A-Za-z0-9_-]*[\"']?\s*[:=]\s*[\"']?)" + _ASSIGNED_VALUE,
            re.IGNORECASE,
        ),
    ),
]


def redact_secrets(text: str) -> tuple[str, int]:
    """``text`` with every secret-shaped string replaced by ``[redacted: <kind>]``, and how many
    were replaced."""
    total = 0
    for kind, pattern in _SECRET_PATTERNS:

        def replace(match: re.Match[str], kind: str = kind) -> str:
            keep = match.groupdict().get("keep") or ""
            return f"{keep}[redacted: {kind}]"

        text, n = pattern.subn(replace, text)
        total += n
    return text, total


def redact_messages(messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """Redacted copies of ``messages`` and the channels that were redacted.

    Tool bodies and tool-call arguments become ``[redacted: N chars]`` wherever they are: the
    content of a tool-role message, ``tool_calls[].function.arguments``, a legacy
    ``function_call``, and tool blocks inside content (``tool_use`` input, ``tool_result``
    content, ``function_call`` / ``function_call_output``). Every other string of every message,
    at any depth, is swept for secret-shaped strings. The inputs are not changed.
    """
    policy: dict[str, None] = {}
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        copy = dict(message)
        if role == "tool" and "content" in copy:
            copy["content"] = _redacted(copy["content"])
            policy[POLICY_TOOL_CONTENT] = None
        calls = copy.get("tool_calls")
        if isinstance(calls, list):
            new_calls = []
            for call in calls:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping) and "arguments" in function:
                    arguments = _redacted(function["arguments"])
                    call = {**call, "function": {**function, "arguments": arguments}}
                    policy[POLICY_TOOL_ARGUMENTS] = None
                new_calls.append(call)
            copy["tool_calls"] = new_calls
        legacy = copy.get("function_call")
        if isinstance(legacy, Mapping) and "arguments" in legacy:
            copy["function_call"] = {**legacy, "arguments": _redacted(legacy["arguments"])}
            policy[POLICY_FUNCTION_CALL] = None
        for field, value in list(copy.items()):
            if field == "role" or (field == "content" and role == "tool"):
                continue
            swept, blocks, secrets = _sweep(value)
            if blocks or secrets:
                copy[field] = swept
            for kind in blocks:
                policy[f"{role}.{field}.{kind}"] = None
            if secrets:
                policy[f"{role}.{field}.secrets"] = None
        out.append(copy)
    return out, list(policy)


def _redacted(body: Any) -> str:
    return f"[redacted: {_length(body)} chars]"


def _sweep(value: Any) -> tuple[Any, list[str], int]:
    """``value`` with tool blocks redacted and secrets swept from every string, at any depth;
    the kinds of tool blocks found and how many secrets. Containers are copied only where
    something changed."""
    if isinstance(value, str):
        text, n = redact_secrets(value)
        return text, [], n
    if isinstance(value, list):
        blocks: list[str] = []
        total = 0
        items = []
        for item in value:
            new, found, n = _sweep(item)
            items.append(new)
            blocks += found
            total += n
        return (items if blocks or total else value), blocks, total
    if isinstance(value, Mapping):
        blocks = []
        total = 0
        kind = value.get("type")
        body_field = _TOOL_BLOCK_BODIES.get(kind) if isinstance(kind, str) else None
        out: dict[str, Any] = {}
        for field, item in value.items():
            if field == body_field:
                out[field] = _redacted(item)
                blocks.append(f"{kind}.{field}")
                continue
            new, found, n = _sweep(item)
            out[field] = new
            blocks += found
            total += n
        return (out if blocks or total else value), blocks, total
    return value, [], 0


def _length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if value is None:
        return 0
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return len(repr(value))


def _as_message_list(messages: Sequence[Message]) -> list[Message]:
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise InvalidInputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    given = messages if isinstance(messages, list) else list(messages)
    if not all(map(isinstance, given, repeat(dict))):
        for index, message in enumerate(given):
            if not isinstance(message, dict):
                raise InvalidInputError(
                    f"messages[{index}] must be a dict, got {type(message).__name__}"
                )
    return given


def _priming_tokens(counter: TokenCounter) -> int:
    """The tokens a counter adds once per conversation (3 under OpenAI's convention), measured
    so per-message counts can be cached and summed: ``2 * n([m]) - n([m, m])``."""
    sample = {"role": "user", "content": "x"}
    return max(2 * counter.count_messages([sample]) - counter.count_messages([sample, sample]), 0)


# How far back from the last call's end a shifted window's anchor is looked for.
_ALIGN_SEARCH = 8
# How many fresh messages at the head of a call are stepped over before the rest is compared
# with the last call's as one run.
_HEAD_SEARCH = 16


def _reused_counts(
    messages: list[Message],
    contents: list[Any],
    held: list[Message],
    held_contents: list[Any],
    held_counts: list[int],
) -> list[int]:
    """Each message's count from the last call where it is the same message with the same
    content object (or, for a run of messages, an equal one: equal messages count the same),
    -1 elsewhere.

    A tool loop's conversation is the last call's shifted by a sliding window, so the two lists
    are aligned by one of the newest messages found near the end of the last call, and compared
    position by position in C (`map(is_, ...)`) instead of through a dictionary of the last
    call's messages by identity, rebuilt on every call (in the whole-turn benchmark, 200
    messages: ~75 -> ~57 us for the gate's bookkeeping). Without an alignment (the conversation
    was rebuilt) every position is -1 and the caller's per-message cache answers.
    """
    n, m = len(messages), len(held)
    counts = [-1] * n
    shift = None
    for anchor in range(n - 1, max(n - 4, -1), -1):
        target = messages[anchor]
        for p in range(m - 1, max(m - 1 - _ALIGN_SEARCH, -1), -1):
            if held[p] is target:
                shift = p - anchor
                break
        if shift is not None:
            break
    if shift is None:
        return counts
    lo, hi = max(0, -shift), min(n, m - shift)
    if lo >= hi:
        return counts
    # The usual call: a few fresh items at the head (the stack's injected ones), then the last
    # call's messages, shifted. Past that head, the two runs are compared as lists, in C
    # (identity first, then equality, and an equal message has the same count): in the
    # whole-turn benchmark ~19 -> ~5 us for 204 messages. Anything else is compared one by one.
    head = lo
    while head < min(hi, lo + _HEAD_SEARCH) and messages[head] is not held[head + shift]:
        head += 1
    if (
        head < hi
        and messages[head:hi] == held[head + shift : hi + shift]
        and contents[head:hi] == held_contents[head + shift : hi + shift]
    ):
        counts[head:hi] = held_counts[head + shift : hi + shift]
        return counts
    same = list(
        map(
            and_,
            map(is_, messages[lo:hi], held[lo + shift : hi + shift]),
            map(is_, contents[lo:hi], held_contents[lo + shift : hi + shift]),
        )
    )
    counts[lo:hi] = held_counts[lo + shift : hi + shift]
    for i in compress(range(lo, hi), map(not_, same)):
        counts[i] = -1
    return counts
