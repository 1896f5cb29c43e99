"""A small pure-Python reference for the merge kernels, for the property tests.

It states the semantics as plainly as possible and ignores speed; the Rust kernel must agree
with it on every input hypothesis generates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

DEFAULT_UNSAFE_KEYS = ("__proto__", "constructor")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: a bool only equals a bool, ``1 == 1.0``, objects ignore key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def copy_in(value: Any, nulls: str, unsafe: frozenset[str]) -> Any:
    """A patch value with nothing to merge into. An array is a value: beneath it nulls stay."""
    if isinstance(value, dict):
        return {
            k: copy_in(v, nulls, unsafe)
            for k, v in value.items()
            if k not in unsafe and (v is not None or nulls == "keep")
        }
    if isinstance(value, (list, tuple)):
        return [copy_in(v, "keep", unsafe) for v in value]
    return value


def merge(base: Any, patch: Any, arrays: str, nulls: str, unsafe: frozenset[str]) -> Any:
    if isinstance(patch, dict):
        if not isinstance(base, dict):
            return copy_in(patch, nulls, unsafe)
        out = {k: v for k, v in base.items() if k not in unsafe}
        for k, v in patch.items():
            if k in unsafe:
                continue
            if v is None:
                if nulls == "keep":
                    out[k] = None
                elif nulls == "delete":
                    out.pop(k, None)
                continue
            if k in out:
                out[k] = merge(out[k], v, arrays, nulls, unsafe)
            else:
                out[k] = copy_in(v, nulls, unsafe)
        return out
    if arrays == "union" and isinstance(patch, (list, tuple)) and isinstance(base, (list, tuple)):
        result: list[Any] = []
        for item in [*base, *copy_in(patch, nulls, unsafe)]:
            if not any(json_equal(item, present) for present in result):
                result.append(item)
        return result
    return copy_in(patch, nulls, unsafe)


def deep_merge(
    base: Any,
    patch: Any,
    *,
    arrays: str = "replace",
    nulls: str = "keep",
    unsafe_keys: Iterable[str] = DEFAULT_UNSAFE_KEYS,
) -> Any:
    if patch is None:
        return base if nulls == "ignore" else None
    return merge(base, patch, arrays, nulls, frozenset(unsafe_keys))


def strip_unsafe_keys(value: Any, keys: Iterable[str] = DEFAULT_UNSAFE_KEYS) -> Any:
    unsafe = frozenset(keys)
    if isinstance(value, dict):
        return {k: strip_unsafe_keys(v, unsafe) for k, v in value.items() if k not in unsafe}
    if isinstance(value, (list, tuple)):
        return [strip_unsafe_keys(v, unsafe) for v in value]
    return value
