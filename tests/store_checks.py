"""Checks shared by the store tests."""

from __future__ import annotations

from typing import Any

from memstrata.stores import Item, Namespace, Store
from memstrata.stores.base import ChangeMark


def changed_keys(store: Store, namespace: Namespace, since: ChangeMark) -> list[str]:
    """The keys ``update_many_since`` reports as changed since the mark (it writes nothing)."""
    seen: list[str] = []

    def plan(changed: list[Item]) -> dict[str, Any]:
        seen.extend(item.key for item in changed)
        return {}

    assert store.update_many_since(namespace, since, plan) == []
    return seen
