"""Stores: where memory lives. ``open_store(url)`` picks the backend from a URL.

| URL | backend |
|---|---|
| ``memory://`` | :class:`InMemoryStore`, gone with the process |
| ``sqlite:///relative/path.db``, ``sqlite:////abs/path.db`` | :class:`SQLiteStore`, the default |
| ``postgresql://user@host:5432/db``, ``postgres://...`` | :class:`PostgresStore` (extra) |
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from memstrata.exceptions import InvalidInputError
from memstrata.stores.base import (
    ChangeMark,
    Changes,
    ChangesSince,
    ConditionalWrite,
    GetMany,
    Item,
    Namespace,
    Read,
    Store,
    erase,
)
from memstrata.stores.copy import CopyResult, copy_store
from memstrata.stores.memory import InMemoryStore
from memstrata.stores.sqlite import SQLiteStore
from memstrata.stores.urls import redacted_url

__all__ = [
    "ChangeMark",
    "Changes",
    "ChangesSince",
    "ConditionalWrite",
    "CopyResult",
    "GetMany",
    "InMemoryStore",
    "Item",
    "Namespace",
    "PostgresStore",
    "Read",
    "SQLiteStore",
    "Store",
    "copy_store",
    "erase",
    "open_store",
]


def __getattr__(name: str) -> object:
    # PostgresStore imports psycopg only when asked for: SQLite users need not install it.
    if name == "PostgresStore":
        from memstrata.stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(name)


def open_store(url: str) -> Store:
    """Opens the store a URL names.

    ``sqlite:///x.db`` is relative to the working directory and ``sqlite:////tmp/x.db`` absolute,
    as in SQLAlchemy.

    Raises:
        InvalidInputError: The URL's scheme is not one memstrata knows, or it has no path;
            or a sqlite URL lacks its ``//`` or has a host.
            The message quotes the URL with its password hidden (:func:`redacted_url`).
    """
    if not isinstance(url, str):
        raise InvalidInputError(f"store URL must be str, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket, a bad port
        raise InvalidInputError(f"store URL {redacted_url(url)!r} cannot be read: {exc}") from None
    if parts.scheme == "memory":
        return InMemoryStore()
    if parts.scheme == "sqlite":
        if not url.partition(":")[2].startswith("//"):
            # sqlite:/var/x.db looks absolute, and would be read as the relative var/x.db.
            raise InvalidInputError(
                f"sqlite URL {url!r} lacks the // after sqlite:; use sqlite:///relative.db or "
                "sqlite:////abs.db"
            )
        if parts.netloc:
            raise InvalidInputError(
                f"sqlite URL {redacted_url(url)!r} has a host; use sqlite:///relative.db or "
                "sqlite:////abs.db"
            )
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not path:
            raise InvalidInputError(f"sqlite URL {url!r} names no file")
        return SQLiteStore(path)
    if parts.scheme in ("postgresql", "postgres"):
        from memstrata.stores.postgres import PostgresStore

        # libpq reads a URL only by a lower-case scheme; urlsplit lower-cases it for us.
        return PostgresStore(parts.scheme + url[len(parts.scheme) :])
    raise InvalidInputError(
        f"unknown store URL scheme {parts.scheme!r} in {redacted_url(url)!r}; expected "
        "memory://, sqlite:/// or postgresql://"
    )
