"""Checks of what a calling program passes to the layers' constructors and handles: cheap (they
run on every turn), each raising an :class:`~memstrata.exceptions.InvalidInputError` that names
the argument, before anything is stored."""

from __future__ import annotations

from typing import Any

from memstrata.exceptions import InvalidInputError
from memstrata.stack import Budget, checked_scope_id
from memstrata.stores import Store
from memstrata.stores.urls import redacted_url

__all__ = ["checked_bool", "checked_budget", "checked_scope_id", "checked_store", "checked_text"]


def checked_bool(value: Any, option: str) -> bool:
    """``value`` if it is a bool: a string such as ``"no"`` is true to Python, so taking any
    truthy value would turn an option on that the caller meant off."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{option} must be True or False, got {value!r:.80}")
    return value


def checked_budget(value: Any, option: str = "budget") -> Budget:
    """A layer's ``budget``: a :class:`~memstrata.stack.Budget` or a ``(min, max)`` pair."""
    if isinstance(value, Budget):
        return value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidInputError(
            f"{option} must be a Budget or a (min, max) pair of ints, got {value!r:.80}"
        )
    return Budget(*value)


def checked_store(value: Any, option: str = "store") -> Store:
    """``value`` if it is a :class:`~memstrata.stores.Store`. A URL is refused with the way to
    open it: the caller that opened a store is the one to close it."""
    if isinstance(value, str):
        raise InvalidInputError(
            f"{option} must be a Store, got the str {redacted_url(value)!r:.120}: open it with "
            "open_store(url) and pass the store (in a stack, stack.store is the stack's)"
        )
    if not isinstance(value, Store):
        raise InvalidInputError(f"{option} must be a Store, got {type(value).__name__}")
    return value


def checked_text(value: Any, option: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{option} must be a str, got {type(value).__name__}")
    return value
