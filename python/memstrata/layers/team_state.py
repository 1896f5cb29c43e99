"""TeamState: a short state document a team carries from one sub-objective to the next.

Implements Layer 4 of seed 003. ``<state_dir>/current_state.md`` says, for the latest
sub-objectives: what was shipped, what the producer claimed (its ``## summary_for_state_doc``
trailer, removed from the artifact), what QC verified, and divergence flags where claim and
verdict disagree. Producers and QC see it prepended to their prompts under ``## Team State``;
divergences are also appended to ``<state_dir>/audit.jsonl``.

Usage::

    team = TeamState(state_dir=run_dir)
    artifact, claim = extract_claim(producer_output)
    team.record("parse config", shipped="config.py", claim=claim,
                verified="tests pass", verdict="pass")
    prompt = team.prepend(next_prompt)

As a stack layer it injects the same block as a prompt item.

Decisions where the seed is silent:

* The entries live in ``current_state.json`` (the source of truth, written first) and are
  rendered to ``current_state.md``; both writes are atomic (temp file, fsync, rename). A damaged
  JSON file is moved aside to ``current_state.json.corrupt-<time>`` and the state starts empty,
  with a warning, rather than raising in the middle of a plan.
* FIFO by whole entries: the oldest entries go until the rendered document is within
  ``soft_cap_bytes`` (2 KB); the newest entry always stays, cut to the cap if it alone is over.
* A divergence is flagged automatically when a producer claimed something and QC's verdict is
  ``fail``; callers add their own flags (e.g. Leader-reflect's) with ``divergences=[...]``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from memstrata.exceptions import InvalidInputError
from memstrata.prompts import TEAM_STATE_HEADER
from memstrata.safe_files import write_atomic
from memstrata.stack import Budget, Message, RunContext
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.team_state")

Verdict = Literal["pass", "fail"]

STATE_MD = "current_state.md"
STATE_JSON = "current_state.json"
AUDIT_LOG = "audit.jsonl"
DEFAULT_SOFT_CAP_BYTES = 2048
MAX_FIELD_CHARS = 4000

# The trailer: a "## summary_for_state_doc" heading (any level from 1 to 6) and everything after
# it up to the next heading, or the end.
_TRAILER = re.compile(
    r"^#{1,6}[ \t]+summary_for_state_doc[ \t]*:?[ \t]*(?:\n|\Z)(?P<body>.*?)(?=^#{1,6}[ \t]|\Z)",
    re.MULTILINE | re.DOTALL | re.IGNORECASE,
)


def extract_claim(artifact: str) -> tuple[str, str | None]:
    """Splits a producer's output into the artifact and its ``## summary_for_state_doc`` claim.

    Returns:
        The artifact without the trailer (trailing whitespace trimmed) and the claim text, or
        the artifact unchanged and None when it has no trailer. With several trailers, the last
        one is the claim and all are removed.
    """
    if not isinstance(artifact, str):
        raise InvalidInputError(f"artifact must be a string, got {type(artifact).__name__}")
    matches = list(_TRAILER.finditer(artifact))
    if not matches:
        return artifact, None
    claim = matches[-1].group("body").strip()
    stripped = _TRAILER.sub("", artifact).rstrip()
    return (stripped + "\n" if artifact.endswith("\n") and stripped else stripped), claim or None


@dataclass
class StateEntry:
    """One sub-objective as the team remembers it."""

    objective: str
    shipped: str = ""
    claim: str | None = None
    verified: str | None = None
    verdict: Verdict | None = None
    divergences: list[str] = field(default_factory=list)
    at: str = ""

    def render(self) -> str:
        lines = [f"### {self.objective}"]
        if self.shipped:
            lines.append(f"- shipped: {self.shipped}")
        if self.claim:
            lines.append(f"- producer claim: {self.claim}")
        if self.verified or self.verdict:
            verdict = f"[{self.verdict}] " if self.verdict else ""
            lines.append(f"- QC verified: {verdict}{self.verified or ''}".rstrip())
        for flag in self.divergences:
            lines.append(f"- DIVERGENCE: {flag}")
        return "\n".join(lines)


class TeamState:
    """The team-state document of one plan.

    Args:
        state_dir: Where ``current_state.md``, its JSON source and ``audit.jsonl`` live.
        soft_cap_bytes: Rendered size the document is kept within by dropping oldest entries.
        enabled: False: nothing is read, written or prepended.
        name: The layer's name.
        slot: Order among layers' prompt items.
        budget: ``(min, max)`` tokens of prompt as a layer.
    """

    def __init__(
        self,
        *,
        state_dir: str | os.PathLike[str],
        soft_cap_bytes: int = DEFAULT_SOFT_CAP_BYTES,
        enabled: bool = True,
        name: str = "team-state",
        slot: int = 50,
        budget: tuple[int, int] | Budget = (0, 800),
    ) -> None:
        if (
            isinstance(soft_cap_bytes, bool)
            or not isinstance(soft_cap_bytes, int)
            or soft_cap_bytes < 64
        ):
            raise InvalidInputError(f"soft_cap_bytes must be an int >= 64, got {soft_cap_bytes!r}")
        self.state_dir = Path(state_dir)
        self.soft_cap_bytes = soft_cap_bytes
        self.enabled = enabled
        self.name = name
        self.slot = slot
        self.budget = budget if isinstance(budget, Budget) else Budget(*budget)
        # The prompt item and the state file it was read from, by (inode, mtime, size): every
        # write replaces the file (a new inode), so a prepare whose file is unchanged reuses
        # the item, the same text object, whose token count the context gate then reuses too.
        self._item: tuple[tuple[int, int, int], str] | None = None
        self._json_path = os.fspath(self.state_dir / STATE_JSON)

    @property
    def md_path(self) -> Path:
        return self.state_dir / STATE_MD

    @property
    def audit_path(self) -> Path:
        return self.state_dir / AUDIT_LOG

    # Reading ----------------------------------------------------------------------------------

    def entries(self) -> list[StateEntry]:
        """The remembered sub-objectives, oldest first."""
        if not self.enabled:
            return []
        path = self.state_dir / STATE_JSON
        try:
            raw = orjson.loads(path.read_bytes())
            return [StateEntry(**item) for item in raw["entries"]]
        except FileNotFoundError:
            return []
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            aside = path.with_name(f"{STATE_JSON}.corrupt-{time.time():.0f}")
            os.replace(path, aside)
            logger.warning("team state %s was unreadable (%s); moved aside to %s", path, exc, aside)
            return []

    def render(self) -> str:
        """The document body (empty when nothing was recorded yet)."""
        return _render(self.entries())

    def prepend(self, prompt: str) -> str:
        """``prompt`` with the team state before it under ``## Team State`` (unchanged when the
        state is empty or the layer disabled)."""
        body = self.render()
        return f"{TEAM_STATE_HEADER}\n{body}\n\n{prompt}" if body else prompt

    # Writing ----------------------------------------------------------------------------------

    def record(
        self,
        objective: str,
        *,
        shipped: str = "",
        claim: str | None = None,
        verified: str | None = None,
        verdict: Verdict | None = None,
        divergences: Iterable[str] = (),
    ) -> StateEntry:
        """Adds one sub-objective's outcome, drops the oldest entries past the soft cap, writes
        the document atomically and appends divergences to ``audit.jsonl``.

        Raises:
            InvalidInputError: A field of the wrong type or over 4,000 characters, or an
                unknown verdict.
        """
        if verdict not in (None, "pass", "fail"):
            raise InvalidInputError(f"verdict must be 'pass', 'fail' or None, got {verdict!r}")
        flags = [_text("divergence", d) for d in divergences]
        if claim and verdict == "fail":
            flags.insert(0, "producer claimed success; QC verdict is fail")
        entry = StateEntry(
            objective=_text("objective", objective, required=True),
            shipped=_text("shipped", shipped),
            claim=_text("claim", claim) or None,
            verified=_text("verified", verified) or None,
            verdict=verdict,
            divergences=flags,
            at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        if not self.enabled:
            return entry
        entries = [*self.entries(), entry]
        entries = self._within_cap(entries)
        data = orjson.dumps({"entries": [asdict(e) for e in entries]}, option=orjson.OPT_INDENT_2)
        write_atomic(self.state_dir / STATE_JSON, data, mode=0o644)
        write_atomic(self.md_path, (_render(entries) + "\n").encode(), mode=0o644)
        if flags:
            self._audit(entry)
        return entry

    def clear(self) -> None:
        """Starts a new plan: an empty document (the audit log is kept)."""
        for name in (STATE_JSON, STATE_MD):
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / name).unlink()

    def _within_cap(self, entries: list[StateEntry]) -> list[StateEntry]:
        while len(entries) > 1 and len(_render(entries).encode()) > self.soft_cap_bytes:
            entries = entries[1:]
        if len(_render(entries).encode()) > self.soft_cap_bytes:
            only = entries[0]
            for attr in ("claim", "verified", "shipped"):
                value = getattr(only, attr)
                excess = len(_render([only]).encode()) - self.soft_cap_bytes
                if value and excess > 0:
                    # Cut by bytes, then drop chars until the multi-byte tail fits too.
                    keep = max(len(value) - excess - 4, 0)
                    setattr(only, attr, value[:keep] + " …")
                    while keep and len(_render([only]).encode()) > self.soft_cap_bytes:
                        keep -= 1
                        setattr(only, attr, value[:keep] + " …")
        return entries

    def _audit(self, entry: StateEntry) -> None:
        line = orjson.dumps(
            {
                "at": entry.at,
                "event": "divergence",
                "objective": entry.objective,
                "claim": entry.claim,
                "verified": entry.verified,
                "verdict": entry.verdict,
                "divergences": entry.divergences,
            }
        )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # One write of one line with O_APPEND: concurrent appenders do not interleave lines.
        fd = os.open(self.audit_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line + b"\n")
        finally:
            os.close(fd)

    # Layer protocol ---------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> TeamState:
        return self

    def recall(self, handle: TeamState, budget: int) -> list[Message]:
        if not self.enabled:
            return []
        try:
            stat = os.stat(self._json_path)
        except FileNotFoundError:
            return []
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        item = self._item
        if item is None or item[0] != key:
            # Read after the stat: a write racing with it changes the file's key, and the next
            # prepare reads again.
            body = self.render()
            item = self._item = (key, f"{TEAM_STATE_HEADER}\n{body}" if body else "")
        return [{"content": item[1]}] if item[1] else []

    def observe(self, handle: TeamState, message: Message) -> None:
        return None

    def tools(self, handle: TeamState) -> list[Tool]:
        return []

    def on_spawn(self, handle: TeamState, child: RunContext) -> TeamState:
        return self

    def close(self, handle: TeamState, error: BaseException | None) -> None:
        """Nothing to flush: ``record`` writes through."""


def _render(entries: list[StateEntry]) -> str:
    return "\n\n".join(e.render() for e in reversed(entries))


def _text(what: str, value: Any, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    value = value.strip()
    if required and not value:
        raise InvalidInputError(f"{what} is empty")
    if len(value) > MAX_FIELD_CHARS:
        raise InvalidInputError(
            f"{what} is {len(value):,} characters; the limit is {MAX_FIELD_CHARS:,}"
        )
    checked: str = value
    return checked
