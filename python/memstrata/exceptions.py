"""The one exception hierarchy of memstrata.

Every error memstrata raises is a ``MemstrataError``. Errors about bad input also derive from
the matching builtin (``ValueError`` or ``TypeError``) so existing ``except ValueError`` code
keeps working::

    MemstrataError
    ├── InvalidInputError (ValueError)        an argument outside its documented range
    │   ├── NestingTooDeepError               a value nests past a kernel's depth limit
    │   ├── NonFiniteNumberError              NaN or ±Infinity where JSON needs a finite number
    │   ├── InvalidJSONError                  bytes/str that do not parse as JSON
    │   ├── InvalidOptionError                an option outside its allowed set
    │   ├── DimensionMismatchError            vectors of different lengths
    │   ├── ZeroVectorError                   a zero vector where a direction is needed
    │   ├── SchemaViolationError              a state that fails the layer's schema
    │   ├── BudgetExceededError               a write past a layer's token budget
    │   └── LimitExceededError                a write past a size or count limit (bytes of a
    │                                         value, entries in a namespace)
    ├── UnsupportedTypeError (TypeError)      a value that is not JSON data (set, bytes, object)
    ├── ReadOnlyError                         a write to a read-only layer
    ├── StorageRaceError                      other writers kept changing a record past every
    │                                         retry (a working memory's state and journal)
    ├── WriteConflictError                    a rewrite of a state another writer changed since
    │                                         it was read; nothing written
    ├── CopyConflictError                     a store copy that would overwrite a record the
    │                                         target holds, or that found the source changed
    ├── LockTimeoutError (TimeoutError)       a store call gave up waiting for a lock another
    │                                         connection held (PostgreSQL's lock_timeout)
    ├── RecoverableContextError               a prompt that cannot fit the model's window even
    │                                         after pruning; carries the checkpoint's path
    └── ToolError                             a model's tool call that cannot be carried out;
                                              Run.call_tool returns it as an error payload

Errors raised by the Rust core are mapped to these classes in one place
(``rust/src/python/errors.rs``). Errors that concern a position inside a value carry it in
``path`` (``$.profile.tags[3]``).
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "CopyConflictError",
    "DimensionMismatchError",
    "InvalidInputError",
    "InvalidJSONError",
    "InvalidOptionError",
    "LimitExceededError",
    "LockTimeoutError",
    "MemstrataError",
    "NestingTooDeepError",
    "NonFiniteNumberError",
    "ReadOnlyError",
    "RecoverableContextError",
    "SchemaViolationError",
    "StorageRaceError",
    "ToolError",
    "UnsupportedTypeError",
    "WriteConflictError",
    "ZeroVectorError",
]


class MemstrataError(Exception):
    """Base class of every error memstrata raises."""


class InvalidInputError(MemstrataError, ValueError):
    """An argument is outside its documented range; the message names it and the limit.

    Attributes:
        path: Where inside the value the problem is (``$.a.b[2]``), when it concerns a position.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class NestingTooDeepError(InvalidInputError):
    """A value nests deeper than the kernel's documented limit.

    Attributes:
        limit: The depth limit that was exceeded.
    """

    def __init__(self, message: str, *, path: str | None = None, limit: int = 0) -> None:
        super().__init__(message, path=path)
        self.limit = limit


class NonFiniteNumberError(InvalidInputError):
    """NaN or ±Infinity where JSON data needs a finite number."""


class InvalidJSONError(InvalidInputError):
    """Bytes or text that do not parse as JSON."""


class InvalidOptionError(InvalidInputError):
    """An option outside its allowed set (``arrays="merge"``, an unknown encoding...)."""


class DimensionMismatchError(InvalidInputError):
    """Vectors whose dimensions disagree.

    Attributes:
        expected: The dimension that was required.
        got: The dimension that was given.
    """

    def __init__(
        self, message: str, *, path: str | None = None, expected: int = 0, got: int = 0
    ) -> None:
        super().__init__(message, path=path)
        self.expected = expected
        self.got = got


class ZeroVectorError(InvalidInputError):
    """A zero vector where cosine similarity needs a direction."""


class UnsupportedTypeError(MemstrataError, TypeError):
    """A value that is not JSON data (a set, bytes, an arbitrary object...).

    Attributes:
        path: Where inside the value the offending object is.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ToolError(MemstrataError):
    """A tool call the model made cannot be carried out; ``Run.call_tool`` turns it into an
    error payload the model can read, never an exception.

    Attributes:
        code: A stable machine-readable reason (``unknown_tool``, ``invalid_arguments``,
            ``schema_violation``, ``budget_exceeded``, ``limit_exceeded``, ``read_only``,
            ``memory_unavailable``, ``internal_error``; a layer may add its own, such as
            ``not_found``).
        details: Specific problems, one readable line each (e.g. each schema violation).
        retry: For a failure of the store rather than of the call (``memory_unavailable``):
            whether the same call may succeed later; None for the others.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "tool_error",
        details: list[str] | None = None,
        retry: bool | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.details = list(details or [])
        self.retry = retry


class ReadOnlyError(MemstrataError):
    """A write to a layer configured ``read_only=True``."""


class SchemaViolationError(InvalidInputError):
    """A state that does not satisfy the layer's schema.

    Attributes:
        violations: One readable line per violation, each naming its path.
    """

    def __init__(
        self, message: str, *, path: str | None = None, violations: list[str] | None = None
    ):
        super().__init__(message, path=path)
        self.violations = list(violations or [])


class BudgetExceededError(InvalidInputError):
    """A write that would push a layer's prompt block past its token budget.

    Attributes:
        tokens: The size the block would have had.
        limit: The layer's maximum.
    """

    def __init__(self, message: str, *, path: str | None = None, tokens: int = 0, limit: int = 0):
        super().__init__(message, path=path)
        self.tokens = tokens
        self.limit = limit


class LimitExceededError(InvalidInputError):
    """A write that would pass a documented size or count limit; nothing was written.

    Attributes:
        setting: The option that sets the limit (``max_state_bytes``, ``max_entries``...), so
            the message can say what to raise.
        size: What the write would have made it (bytes, or entries).
        limit: The limit.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        setting: str = "",
        size: int = 0,
        limit: int = 0,
    ) -> None:
        super().__init__(message, path=path)
        self.setting = setting
        self.size = size
        self.limit = limit


class StorageRaceError(MemstrataError):
    """Other writers kept changing a record a read or a write depends on past every retry: a
    working memory's state and journal, written by many processes at once."""


class CopyConflictError(MemstrataError):
    """A store copy (``memstrata copy``, :func:`memstrata.stores.copy.copy_store`) that found
    the target holding other records under keys it copies, and so wrote nothing; or that
    finished writing and found the target's records differing from the source's (a server
    still writing to either store meanwhile).

    Attributes:
        records: ``(namespace, key)`` of the first records concerned (at most a few).
        count: How many records are concerned in all.
        copied: Records written before the difference was found (0 for a refusal).
    """

    def __init__(
        self,
        message: str,
        *,
        records: list[tuple[tuple[str, ...], str]] | None = None,
        count: int = 0,
        copied: int = 0,
    ) -> None:
        super().__init__(message)
        self.records = records or []
        self.count = count
        self.copied = copied


class WriteConflictError(MemstrataError):
    """A write that replaces a state whole (a working memory's ``replace`` or ``clear``) found
    that another writer changed it since this run read it. Nothing was written: replacing it
    would have dropped the other writer's change unseen. The run now holds the state as stored;
    read it and write again.

    Attributes:
        version: The stored state's version now.
    """

    def __init__(self, message: str, *, version: int = 0) -> None:
        super().__init__(message)
        self.version = version


class LockTimeoutError(MemstrataError, TimeoutError):
    """A store call waited longer than its store's lock timeout for a lock another connection
    held (another server updating the same record, a table locked by an administrator). The
    call's transaction was rolled back: nothing it would have written is in the store.

    Attributes:
        timeout: The timeout in seconds, or None when the server's own ``lock_timeout``
            setting applied.
    """

    def __init__(self, message: str, *, timeout: float | None = None) -> None:
        super().__init__(message)
        self.timeout = timeout


class StoreVersionError(MemstrataError, RuntimeError):
    """The store was written by a newer memstrata (a higher schema version than this one knows).
    It is left untouched: upgrade memstrata to open it."""


class RecoverableContextError(MemstrataError):
    """The context gate refused a prompt: even after pruning old tool results it does not fit
    the model's input window. The conversation was checkpointed (redacted) for the caller to
    decompose the task; the run itself is still usable with a smaller prompt.

    Attributes:
        checkpoint_path: The JSON checkpoint written for this call.
        call_id: The call boundary that was refused.
        estimated_tokens: The padded estimate after pruning.
        max_input_tokens: The model's input window.
    """

    def __init__(
        self,
        message: str,
        *,
        checkpoint_path: str,
        call_id: str,
        estimated_tokens: int,
        max_input_tokens: int,
    ) -> None:
        super().__init__(message)
        self.checkpoint_path = checkpoint_path
        self.call_id = call_id
        self.estimated_tokens = estimated_tokens
        self.max_input_tokens = max_input_tokens
