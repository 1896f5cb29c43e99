"""WorkingMemory benchmark data: a project-tracker schema, states of any size, and the merge a
Python developer writes by hand.

Shared by ``test_working_memory.py`` and the whole-turn benchmark (``turn_scenario.py``).
"""

from __future__ import annotations

from typing import Any

UNSAFE = ("__proto__", "constructor")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "timezone": {"type": "string"}},
        },
        "projects": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "status": {"type": "string", "enum": ["todo", "doing", "done", "blocked"]},
                    "owner": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "team": {"type": "string"}},
                    },
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "estimate_days": {"type": "number", "minimum": 0},
                },
                "required": ["name", "status"],
            },
        },
    },
}


def make_state(projects: int = 100) -> dict[str, Any]:
    """About 1,000 nodes: 100 projects of 10 nodes each, plus the user."""
    return {
        "user": {"name": "Priya", "timezone": "Europe/Oslo"},
        "projects": {
            f"p{i:03d}": {
                "name": f"Project {i}",
                "status": "doing",
                "owner": {"name": f"dev{i}", "team": "payments"},
                "tags": ["backend", f"q{i % 4 + 1}"],
                "estimate_days": i % 13,
            }
            for i in range(projects)
        },
    }


def count_nodes(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(count_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(count_nodes(v) for v in value)
    return 1


def python_merge(base: Any, patch: Any) -> Any:
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return strip(patch)
    out = dict(base)
    for key, value in patch.items():
        if key in UNSAFE:
            continue
        out[key] = python_merge(out[key], value) if key in out else strip(value)
    return out


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in UNSAFE}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value
