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
    │   └── ZeroVectorError                   a zero vector where a direction is needed
    └── UnsupportedTypeError (TypeError)      a value that is not JSON data (set, bytes, object)

Errors raised by the Rust core are mapped to these classes in one place
(``rust/src/python/errors.rs``). Errors that concern a position inside a value carry it in
``path`` (``$.profile.tags[3]``).
"""

from __future__ import annotations

__all__ = [
    "DimensionMismatchError",
    "InvalidInputError",
    "InvalidJSONError",
    "InvalidOptionError",
    "MemstrataError",
    "NestingTooDeepError",
    "NonFiniteNumberError",
    "UnsupportedTypeError",
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
