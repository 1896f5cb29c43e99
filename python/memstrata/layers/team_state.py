"""TeamState: a short state document a team carries from one sub-objective to the next.

Implements Layer 4 of Modulatio's context engineering. ``<state_dir>/current_state.md`` says,
for the latest sub-objectives: what was shipped, what the producer claimed (its
``## summary_for_state_doc`` trailer, removed from the artifact), what QC verified, and
divergence flags where claim and verdict disagree. Producers and QC see it prepended to their
prompts under ``## Team State``; divergences are also appended to ``<state_dir>/audit.jsonl``.

Usage::

    team = TeamState(state_dir=run_dir)
    artifact, claim = extract_claim(producer_output)
    team.record("parse config", shipped="config.py", claim=claim,
                verified="tests pass", verdict="pass")
    prompt = team.prepend(next_prompt)

As a stack layer it injects the same block as a prompt item.

Decisions where Modulatio is silent:

* The entries live in ``current_state.json`` (the source of truth, written first) and are
  rendered to ``current_state.md``; both writes are atomic (temp file, fsync, rename). A damaged
  JSON file is moved aside to ``current_state.json.corrupt-<time>`` and the state starts empty,
  with a warning, rather than raising in the middle of a plan.
* FIFO by whole entries: the oldest entries go until the rendered document is within
  ``soft_cap_bytes`` (2 KB); the newest entry always stays, cut to the cap if it alone is over
  (to its objective alone under a cap too small for its other lines cut to a character).
* A divergence is flagged automatically when a producer claimed something and QC's verdict is
  ``fail``; callers add their own flags (e.g. Leader-reflect's) with ``divergences=[...]``.
* Leader-reflect's write-back emits the next document whole: :meth:`TeamState.rewrite` takes
  its entries, and the prior document's entries it drops go to the audit log first (event
  ``replaced``): the FIFO of the soft cap is the only way an entry leaves untraced.
* An entry cut to fit (the soft cap, or the prompt's token budget) is cut by characters, every
  text field to the same length, longest fields first, each cut field ending in `` …``: a field
  with content never comes out empty and no UTF-8 sequence is split. The audit log gets the
  whole entry.
* The prompt block fits the layer's token budget (the smaller of the stack's share and
  ``budget.max``), counted with the run's token counter: the oldest entries go first, then the
  newest is cut; a budget too small for even that injects nothing.
* Writers in several processes (or threads) take an OS lock on ``<state_dir>/current_state.lock``
  around the read-modify-write, so no entry is lost to a concurrent ``record``. An async call
  (``await run.alayer("team-state").record(...)``) waits for it without blocking the event
  loop: it asks again after a growing pause (at most 50 ms) while other tasks run.
* A state directory that cannot be used (a file in its place, not writable, not creatable, a
  path with NUL) switches the layer off, as Modulatio says: one warning naming the path and the
  reason, then nothing is read, written or injected (``record`` returns the entry unsaved;
  :attr:`TeamState.off_reason` says why). Build a new ``TeamState`` to try the directory again.
* Files are reached through the state directory's descriptor (:mod:`memstrata.safe_files`):
  ``current_state.json``, ``audit.jsonl`` and the lock file are opened ``O_NOFOLLOW |
  O_NONBLOCK`` and used only if the opened descriptor is a regular file with one link. A
  symlink, a hard link, a FIFO or a directory planted under one of these names switches the
  layer off as above (the reason names it); nothing is read, appended or locked through it.
  The documents are written by temp file and rename, which replaces whatever was planted under
  their names and never writes through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import itertools
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from memstrata._bridge import TaskLock, await_, blocking, bridged
from memstrata._checks import checked_bool, checked_budget
from memstrata.exceptions import InvalidInputError
from memstrata.prompts import TEAM_STATE_HEADER, one_line
from memstrata.safe_files import (
    Dir,
    append_regular,
    make_directory,
    open_dir,
    open_lock_file,
    read_regular,
    write_atomic,
)
from memstrata.stack import Budget, Message, RunContext
from memstrata.tokens import (
    EstimatingCounter,
    TokenCounter,
    checked_counter,
    exact_count,
    exact_count_over,
    same_counts,
)
from memstrata.tools import Tool

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

logger = logging.getLogger("memstrata.team_state")

Verdict = Literal["pass", "fail"]

STATE_MD = "current_state.md"
STATE_JSON = "current_state.json"
AUDIT_LOG = "audit.jsonl"
LOCK_FILE = "current_state.lock"
DEFAULT_SOFT_CAP_BYTES = 2048
MAX_FIELD_CHARS = 4000
# Most divergence flags one entry takes.
MAX_DIVERGENCES = 200
# The flag a producer's claim meeting a failing QC verdict raises by itself.
CLAIM_FAILED = "producer claimed success; QC verdict is fail"
# Most entries one rewrite takes: the document keeps about 2 KB of them.
MAX_REWRITTEN_ENTRIES = 1_000
# current_state.json is kept near soft_cap_bytes; a file far past that was not written by us.
MAX_STATE_BYTES = 8 << 20
# The coarsest mtime granularity of a file system the state may live on (FAT's two seconds).
_TIMESTAMP_TICK_NS = 2_000_000_000

# The trailer: a "## summary_for_state_doc" heading (any level from 1 to 6, indented by up to
# three spaces as markdown allows, its line ended by LF or CRLF) and everything after it up to
# the next heading, or the end.
_TRAILER = re.compile(
    r"^ {0,3}#{1,6}[ \t]+summary_for_state_doc[ \t]*:?[ \t]*(?:\r?\n|\Z)"
    r"(?P<body>.*?)(?=^ {0,3}#{1,6}[ \t]|\Z)",
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
    end = "\r\n" if artifact.endswith("\r\n") else "\n"
    return (stripped + end if artifact.endswith("\n") and stripped else stripped), claim or None


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
        """The entry's lines; each field is folded onto its own line (``one_line``), so a
        producer's claim cannot add a ``- QC verified`` or ``- DIVERGENCE`` line of its own."""
        lines = [f"### {one_line(self.objective)}"]
        if self.shipped:
            lines.append(f"- shipped: {one_line(self.shipped)}")
        if self.claim:
            lines.append(f"- producer claim: {one_line(self.claim)}")
        if self.verified or self.verdict:
            verdict = f"[{self.verdict}] " if self.verdict else ""
            lines.append(f"- QC verified: {verdict}{one_line(self.verified or '')}".rstrip())
        for flag in self.divergences:
            lines.append(f"- DIVERGENCE: {one_line(flag)}")
        return "\n".join(lines)


class TeamState:
    """The team-state document of one plan.

    Args:
        state_dir: Where ``current_state.md``, its JSON source, ``audit.jsonl`` and the lock
            file live.
        soft_cap_bytes: Rendered size the document is kept within by dropping oldest entries.
        enabled: False: nothing is read, written or prepended.
        name: The layer's name.
        slot: Order among layers' prompt items.
        budget: ``(min, max)`` tokens of prompt as a layer; ``prepend`` keeps within ``max``.
        tokens: Token counter for the budget; by default the stack's (the native estimator's
            encoding, counted exactly) when used as a layer.

    Raises:
        InvalidInputError: ``state_dir`` is not a path, or ``soft_cap_bytes`` is under 64.
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
        tokens: TokenCounter | None = None,
    ) -> None:
        if not isinstance(state_dir, (str, os.PathLike)):
            raise InvalidInputError(
                f"state_dir must be a path (str or os.PathLike), got {type(state_dir).__name__}"
            )
        if (
            isinstance(soft_cap_bytes, bool)
            or not isinstance(soft_cap_bytes, int)
            or soft_cap_bytes < 64
        ):
            raise InvalidInputError(f"soft_cap_bytes must be an int >= 64, got {soft_cap_bytes!r}")
        if not os.fspath(state_dir):
            # Path("") is the current directory: the state would land wherever the program runs.
            raise InvalidInputError("state_dir is empty; give the directory the state lives in")
        if tokens is not None:
            checked_counter(tokens)
        self.state_dir = Path(state_dir)
        self.soft_cap_bytes = soft_cap_bytes
        self.enabled = checked_bool(enabled, "enabled")
        self.name = name
        self.slot = slot
        self.budget = checked_budget(budget)
        self._tokens_given = tokens is not None
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter()
        self._tokens_taken = False  # whether a stack's counter replaced the default one
        # The prompt item, by the state file it was read from, (inode, mtime, size), and the
        # token limit it was cut to: every write replaces the file (a new inode), so a prepare
        # whose file is unchanged reuses the item, the same text object, whose token count the
        # context gate then reuses too. None in place of the key: not to be reused (see recall).
        self._item: tuple[tuple[int, int, int, int] | None, str] | None = None
        self._json_path = os.fspath(self.state_dir / STATE_JSON)
        self._off: str | None = None
        # flock excludes other open files, not other threads sharing one: threads of this
        # process queue here first, and so do tasks whose awaited call waits for the file's
        # lock (see _lock_fd), each suspended while it waits.
        self._thread_lock = TaskLock()

    @property
    def md_path(self) -> Path:
        """The rendered document, ``<state_dir>/current_state.md``."""
        return self.state_dir / STATE_MD

    @property
    def audit_path(self) -> Path:
        """The append-only log of divergences and replaced entries, ``<state_dir>/audit.jsonl``."""
        return self.state_dir / AUDIT_LOG

    @property
    def off_reason(self) -> str | None:
        """Why the layer switched itself off (its state directory could not be used), or None
        while it works."""
        return self._off

    def _active(self) -> bool:
        return self.enabled and self._off is None

    def _switch_off(self, exc: BaseException) -> None:
        if self._off is not None:
            return
        reason = str(exc) if isinstance(exc, InvalidInputError) else _os_reason(exc)
        self._off = reason
        self._item = None
        logger.warning(
            "team state switched off: state_dir %r cannot be used (%s); nothing is recorded or "
            "injected until a new TeamState is built",
            os.fspath(self.state_dir),
            reason,
        )

    # Reading ----------------------------------------------------------------------------------

    def entries(self) -> list[StateEntry]:
        """The remembered sub-objectives, oldest first (none while the layer is off)."""
        if not self._active():
            return []
        try:
            return self._read()
        except (OSError, ValueError) as exc:
            self._switch_off(exc)
            return []

    def _read(self, locked: Dir | None = None) -> list[StateEntry]:
        """The entries of ``current_state.json``, read through the state directory's descriptor
        (``locked``: the one the caller holds the lock in). Something planted under the name (a
        symlink, a hard link, a FIFO, a directory) raises InvalidInputError: the layer switches
        off rather than read it."""
        path = self.state_dir / STATE_JSON
        try:
            if locked is not None:
                data, _ = read_regular(locked, STATE_JSON, MAX_STATE_BYTES)
            else:
                with open_dir(self.state_dir) as directory:
                    data, _ = read_regular(directory, STATE_JSON, MAX_STATE_BYTES)
            raw = orjson.loads(data)
            return [_stored_entry(item) for item in raw["entries"]]
        except FileNotFoundError:
            return []
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            if locked is None:
                # Re-read under the lock: a writer may have replaced the file since.
                with self._lock() as directory:
                    return self._read(directory)
            # In nanoseconds: a rename replaces what is under its new name, and a file set
            # aside in the same second must not replace the one set aside before it.
            aside = f"{STATE_JSON}.corrupt-{time.time_ns()}"
            locked.rename(STATE_JSON, aside)
            logger.warning("team state %s was unreadable (%s); moved aside to %s", path, exc, aside)
            return []

    def render(self) -> str:
        """The document body (empty when nothing was recorded yet)."""
        return _render(self.entries())

    def prepend(self, prompt: str) -> str:
        """``prompt`` with the team state before it under ``## Team State``, within
        ``budget.max`` tokens (unchanged when the state is empty or the layer off)."""
        if not isinstance(prompt, str):
            raise InvalidInputError(f"prompt must be a string, got {type(prompt).__name__}")
        block = self._block(self.budget.max)
        return f"{block}\n\n{prompt}" if block else prompt

    def _block(self, limit: int) -> str:
        """``## Team State`` and the entries, newest first, within ``limit`` tokens: the oldest
        entries dropped, then the newest cut; empty when even that does not fit."""
        entries = self.entries()
        if not entries:
            return ""
        counter = self.tokens
        head = TEAM_STATE_HEADER + "\n"
        block = head + _render(entries)
        if exact_count_over(counter, block, limit) is None:
            return block
        # Newest first, as many whole entries as their summed counts allow, then checked as a
        # whole (BPE counts of parts add up closely, not exactly).
        room = limit - exact_count(counter, head)
        keep = 0
        for entry in reversed(entries):
            room -= exact_count(counter, entry.render()) + 1
            if room < 0:
                break
            keep += 1
        while keep > 0:
            block = head + _render(entries[len(entries) - keep :])
            if exact_count(counter, block) <= limit:
                return block
            keep -= 1
        newest = _shrink(entries[-1], lambda e: exact_count(counter, head + e.render()) <= limit)
        return head + newest.render() if newest is not None else ""

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
        the document atomically and appends divergences to ``audit.jsonl``, all under the
        state directory's lock.

        Returns:
            The entry as given. It is saved unless the layer is disabled or off: when the state
            directory cannot be used, the layer switches itself off with one warning and the
            entry is returned unsaved (see :attr:`off_reason`), so a plan goes on without it.

        Raises:
            InvalidInputError: A field of the wrong type, over 4,000 characters or not valid
                Unicode, or an unknown verdict.
        """
        entry = _checked_entry(objective, shipped, claim, verified, verdict, divergences)
        if not self._active():
            return entry
        try:
            with self._lock() as directory:
                # Two fsynced writes and an append: from an async call, in a worker thread.
                blocking(self._add, directory, entry)
        except (OSError, ValueError) as exc:
            self._switch_off(exc)
        return entry

    def rewrite(self, entries: Iterable[StateEntry]) -> list[StateEntry]:
        """Leader-reflect's write-back between sub-objectives: the next state document whole,
        as the Leader wrote it from the prior state, the producers' claims and QC's verdicts
        (older sub-objectives condensed into one entry, a claim corrected, divergences the
        Leader caught flagged). ``entries`` replace the document's, oldest first, and are cut
        to the soft cap as :meth:`record` cuts; their fields are checked as ``record``'s are
        (an entry's ``at`` is kept when given, else now). Each entry of the prior document not
        among them is first appended to ``audit.jsonl`` (``"event": "replaced"``), so nothing
        leaves the document without a trace, and each new entry with divergence flags is
        audited as ``record`` audits it.

        Returns:
            The entries as checked (saved unless the layer is off, as for ``record``).

        Raises:
            InvalidInputError: An item that is not a :class:`StateEntry`, or a field as for
                ``record``; nothing is written then.
        """
        if isinstance(entries, (str, bytes, bytearray, Mapping)) or not isinstance(
            entries, Iterable
        ):
            raise InvalidInputError(
                f"entries must be a list of StateEntry, got {type(entries).__name__}"
            )
        given = list(itertools.islice(entries, MAX_REWRITTEN_ENTRIES + 1))
        if len(given) > MAX_REWRITTEN_ENTRIES:
            raise InvalidInputError(
                f"entries holds more than {MAX_REWRITTEN_ENTRIES}; the document keeps about 2 KB"
            )
        checked = []
        for i, item in enumerate(given):
            if not isinstance(item, StateEntry):
                raise InvalidInputError(
                    f"entries[{i}] must be a StateEntry, got {type(item).__name__}"
                )
            checked.append(
                _checked_entry(
                    item.objective,
                    item.shipped,
                    item.claim,
                    item.verified,
                    item.verdict,
                    item.divergences,
                    at=_text("at", item.at) or None,
                    flag_claim=False,  # the Leader's flags are the document's, as written
                )
            )
        if not self._active():
            return checked
        try:
            with self._lock() as directory:
                # As record's writes: from an async call, in a worker thread.
                blocking(self._replace, directory, checked)
        except (OSError, ValueError) as exc:
            self._switch_off(exc)
        return checked

    def _add(self, directory: Dir, entry: StateEntry) -> None:
        """Writes the entries with ``entry`` added, in the state directory the caller holds
        the lock in."""
        entries = self._within_cap([*self._read(directory), entry])
        data = orjson.dumps({"entries": [asdict(e) for e in entries]}, option=orjson.OPT_INDENT_2)
        write_atomic(directory, STATE_JSON, data, mode=0o644)
        write_atomic(directory, STATE_MD, (_render(entries) + "\n").encode(), mode=0o644)
        if entry.divergences:
            self._audit(directory, entry)

    def _replace(self, directory: Dir, checked: list[StateEntry]) -> None:
        """Writes ``checked`` as the document (see :meth:`rewrite`), in the state directory
        the caller holds the lock in."""
        prior = self._read(directory)
        kept = self._within_cap(checked)
        unmatched = list(kept)  # each kept entry stands for one prior entry, however alike
        for old in prior:
            if old in unmatched:
                unmatched.remove(old)
            else:
                self._audit(directory, old, event="replaced")
        data = orjson.dumps({"entries": [asdict(e) for e in kept]}, option=orjson.OPT_INDENT_2)
        write_atomic(directory, STATE_JSON, data, mode=0o644)
        write_atomic(directory, STATE_MD, (_render(kept) + "\n").encode(), mode=0o644)
        for new in checked:
            if new.divergences and new not in prior:
                self._audit(directory, new)

    def clear(self) -> None:
        """Starts a new plan: an empty document (the audit log is kept)."""
        if not self._active():
            return
        try:
            with self._lock() as directory:
                blocking(_remove_documents, directory)
        except (OSError, ValueError) as exc:
            self._switch_off(exc)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[Dir]:
        """An exclusive OS lock on the lock file, for one read-modify-write; yields the state
        directory, opened, that the files are read and written through."""
        with self._thread_lock:
            make_directory(self.state_dir, private=False)
            with open_dir(self.state_dir) as directory:
                fd = open_lock_file(directory, LOCK_FILE)
                try:
                    _lock_fd(fd)
                    try:
                        yield directory
                    finally:
                        _unlock_fd(fd)
                finally:
                    os.close(fd)

    def _within_cap(self, entries: list[StateEntry]) -> list[StateEntry]:
        def fits(kept: list[StateEntry]) -> bool:
            return len(_render(kept).encode()) <= self.soft_cap_bytes

        # The rendered document is the entries' renderings joined by blank lines: each is
        # rendered once and the oldest dropped while the sum is over, in one pass (dropping
        # and rendering the rest again each time took minutes for a long rewrite).
        sizes = [len(e.render().encode()) for e in entries]
        total = sum(sizes) + 2 * (len(entries) - 1)
        oldest = 0
        while len(entries) - oldest > 1 and total > self.soft_cap_bytes:
            total -= sizes[oldest] + 2
            oldest += 1
        entries = entries[oldest:]
        if not fits(entries):
            newest = entries[0]
            only = _shrink(newest, lambda e: fits([e]))
            if only is None:
                # Even cut to a character each, its lines pass a small cap: its objective alone
                # (the whole entry is in the audit log when it has divergences).
                heading = StateEntry(newest.objective, at=newest.at)
                only = _shrink(heading, lambda e: fits([e]))
            # The soft cap is at least 64 bytes: a heading of one character and " …" fits.
            assert only is not None
            entries = [only]
        return entries

    def _audit(self, directory: Dir, entry: StateEntry, event: str = "divergence") -> None:
        line = orjson.dumps(
            {
                "at": entry.at,
                "event": event,
                "objective": entry.objective,
                **({"shipped": entry.shipped} if event == "replaced" else {}),
                "claim": entry.claim,
                "verified": entry.verified,
                "verdict": entry.verdict,
                "divergences": entry.divergences,
            }
        )
        # One write of one line with O_APPEND: concurrent appenders do not interleave lines.
        # Never through a symlink, a hard link, a FIFO or a directory planted as audit.jsonl.
        append_regular(directory, AUDIT_LOG, line + b"\n", mode=0o600)

    # Layer protocol ---------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> TeamState:
        """The layer itself, counting with the stack's token counter unless the caller chose
        one. A layer already counting for a stack of other counts (another encoding) gives
        the run a view of itself (the same files and lock) counting with the run's own: a
        block fitted in one encoding may not fit another's budget."""
        if self._tokens_given or same_counts(self.tokens, ctx.tokens):
            return self
        if not self._tokens_taken:
            self._tokens_taken = True
            self.tokens = ctx.tokens
            self._item = None
            return self
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view.tokens, view._item = ctx.tokens, None
        return view

    def recall(self, handle: TeamState, budget: int) -> list[Message]:
        if not self._active():
            return []
        limit = min(budget, self.budget.max)
        try:
            stat = os.lstat(self._json_path)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            self._switch_off(exc)
            return []
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size, limit)
        item = self._item
        if item is None or item[0] != key:
            # Read after the stat: a write racing with it changes the file's key, and the next
            # prepare reads again.
            read_at = time.time_ns()
            block = self._block(limit)
            if item is not None and item[1] == block:
                block = item[1]  # the same text object: the gate reuses its count
            # A rename frees the old file's inode number for the next write's file, and a file
            # system stamps mtimes in ticks (a second on many): a rewrite of the same size in
            # the tick of the file read would have its key. Keyed only once that tick is past.
            fresh = read_at - stat.st_mtime_ns < _TIMESTAMP_TICK_NS
            item = self._item = (None if fresh else key, block)
        return [{"content": item[1]}] if item[1] else []

    def observe(self, handle: TeamState, message: Message) -> None:
        return None

    def tools(self, handle: TeamState) -> list[Tool]:
        return []

    def on_spawn(self, handle: TeamState, child: RunContext) -> TeamState:
        return self

    def close(self, handle: TeamState, error: BaseException | None) -> None:
        """Nothing to flush: ``record`` writes through."""


def _remove_documents(directory: Dir) -> None:
    for name in (STATE_JSON, STATE_MD):
        with contextlib.suppress(FileNotFoundError):
            directory.unlink(name)


def _lock_fd(fd: int) -> None:
    """Waits for the lock on ``fd``. Under an async call (see memstrata._bridge) the wait
    suspends the call, asking again after a growing pause, so the event loop serves other
    tasks meanwhile; a cancellation ends the wait at once, holding nothing."""
    if bridged():
        import asyncio

        pause = 0.001
        while not _try_lock_fd(fd):
            await_(asyncio.sleep(pause))
            pause = min(pause * 2, 0.05)
        return
    if sys.platform == "win32":
        # Byte 0 of the file; LK_LOCK gives up after ~10 s of retries, so keep asking.
        os.lseek(fd, 0, os.SEEK_SET)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                return
            except OSError:
                continue
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _try_lock_fd(fd: int) -> bool:
    """Takes the lock on ``fd`` if no other open file holds it; False if one does."""
    if sys.platform == "win32":
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock_fd(fd: int) -> None:
    if sys.platform == "win32":
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


def _stored_entry(item: Any) -> StateEntry:
    """An entry of ``current_state.json`` as :meth:`TeamState.record` writes it.

    Raises:
        TypeError: A field is missing, unknown or of the wrong type (a file edited by hand or
            by another program), named: the caller moves the file aside.
    """
    entry = StateEntry(**item)  # TypeError: not a dict, a missing or an unknown field
    checks = {
        "objective": isinstance(entry.objective, str),
        "shipped": isinstance(entry.shipped, str),
        "claim": entry.claim is None or isinstance(entry.claim, str),
        "verified": entry.verified is None or isinstance(entry.verified, str),
        "verdict": entry.verdict in (None, "pass", "fail"),
        "divergences": isinstance(entry.divergences, list)
        and all(isinstance(d, str) for d in entry.divergences),
        "at": isinstance(entry.at, str),
    }
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        raise TypeError(f"an entry's {', '.join(wrong)} is not what record writes")
    return entry


def _render(entries: list[StateEntry]) -> str:
    return "\n\n".join(e.render() for e in reversed(entries))


_CUT_FIELDS = ("objective", "shipped", "claim", "verified")
# Fields are cut to this many characters before any divergence flag is left out.
_MIN_CUT = 24


def _cut_to(entry: StateEntry, chars: int, flags: int) -> StateEntry:
    """A copy of ``entry`` with every text field over ``chars`` characters cut to them (and
    `` …``), and only its first ``flags`` divergence flags (a last one counts the rest)."""

    def cut(value: str) -> str:
        return value if len(value) <= chars else value[:chars].rstrip() + " …"

    changes: dict[str, Any] = {a: cut(getattr(entry, a)) for a in _CUT_FIELDS if getattr(entry, a)}
    divergences = [cut(d) for d in entry.divergences[:flags]]
    if flags < len(entry.divergences):
        divergences.append(f"{len(entry.divergences) - flags} more in {AUDIT_LOG}")
    return dataclasses.replace(entry, **changes, divergences=divergences)


def _shrink(entry: StateEntry, fits: Callable[[StateEntry], bool]) -> StateEntry | None:
    """``entry`` with its longest text fields cut by characters to the greatest common length
    that ``fits``, or None when nothing does. Divergence flags are left out (the last first)
    only when the fields cannot keep ``_MIN_CUT`` characters each otherwise, and when they
    cannot keep even one. The entry itself is not changed."""
    if fits(entry):
        return entry
    longest = max(
        (len(v) for v in (*(getattr(entry, a) or "" for a in _CUT_FIELDS), *entry.divergences)),
        default=1,
    )
    for floor in (min(_MIN_CUT, longest), 1):
        flags = len(entry.divergences)
        while flags >= 0 and not fits(_cut_to(entry, floor, flags)):
            flags -= 1
        if flags >= 0:
            break
    else:
        return None
    low, high = floor, longest  # _cut_to(entry, low, flags) fits
    while low < high:
        middle = (low + high + 1) // 2
        if fits(_cut_to(entry, middle, flags)):
            low = middle
        else:
            high = middle - 1
    return _cut_to(entry, low, flags)


def _checked_entry(
    objective: Any,
    shipped: Any,
    claim: Any,
    verified: Any,
    verdict: Any,
    divergences: Any,
    *,
    at: str | None = None,
    flag_claim: bool = True,
) -> StateEntry:
    """An entry of these fields, each checked (types, lengths, Unicode, the verdict, the
    number of flags), with the automatic flag when a claim met a failing verdict
    (``flag_claim``)."""
    if verdict not in (None, "pass", "fail"):
        raise InvalidInputError(f"verdict must be 'pass', 'fail' or None, got {verdict!r}")
    if isinstance(divergences, (str, bytes, bytearray, Mapping)) or not isinstance(
        divergences, Iterable
    ):
        # A text would be taken one character per flag.
        raise InvalidInputError(
            f"divergences must be a list of strings, got {type(divergences).__name__}"
        )
    flags = [_text("divergence", d) for d in itertools.islice(divergences, MAX_DIVERGENCES + 1)]
    if len(flags) > MAX_DIVERGENCES:
        # Each is kept whole in the audit log, and cutting the entry to the soft cap tries
        # one count of flags after another: a list without bound would take hours.
        raise InvalidInputError(
            f"divergences holds more than {MAX_DIVERGENCES} flags; the limit is "
            f"{MAX_DIVERGENCES}: merge related ones"
        )
    if flag_claim and claim and verdict == "fail":
        flags.insert(0, CLAIM_FAILED)
    return StateEntry(
        objective=_text("objective", objective, required=True),
        shipped=_text("shipped", shipped),
        claim=_text("claim", claim) or None,
        verified=_text("verified", verified) or None,
        verdict=verdict,
        divergences=flags,
        at=at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


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
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} is not valid Unicode text (it holds a lone surrogate)"
        ) from None
    checked: str = value
    return checked
