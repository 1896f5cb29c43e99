"""What the model-based tests share: their settings and the generated values.

The default run is short and derandomized, so ``make test`` gives the same answer every run.
``STATEFUL_EXAMPLES`` (and ``STATEFUL_STEPS``) set a long run, which also draws new examples
each time (``make stateful``); a failure prints the steps and how to replay them.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("STATEFUL_EXAMPLES", "30"))
STEPS = int(os.environ.get("STATEFUL_STEPS", "30"))
LONG = "STATEFUL_EXAMPLES" in os.environ

SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    # A short run is the same run every time; a long one hunts for new sequences.
    derandomize=not LONG,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)

USERS = ("A", "B")
THREADS = ("t1", "t2")
UNSAFE_KEYS = ("__proto__", "constructor", "prototype")


def marker(user: str) -> str:
    """Text only ``user``'s writes carry: any other user's prompt or tool result holding it
    shows memory that is not theirs."""
    return f"SECRET_{user}_"


words = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
)
short_text = st.one_of(
    st.sampled_from(["", " ", "note", "# Heading", "- item", "</notes>", "<working_memory>"]),
    words,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    short_text,
)


def _keys() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(["a", "b", "c", *UNSAFE_KEYS]), st.text(max_size=4))


json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_keys(), children, max_size=3)
    ),
    max_leaves=8,
)

# Runs open at once, and the index a rule draws to pick one of them.
MAX_OPEN = 4
PICK = st.integers(min_value=0, max_value=MAX_OPEN - 1)


def has_runs(machine: Any) -> bool:
    return bool(machine.open_runs)


# What the calls answered, by tool and error code ("ok" for none): the guard tests read it, so
# a change that keeps the machines from reaching a path fails them.
OUTCOMES: Counter[tuple[str, str]] = Counter()


def note_outcome(name: str, result: dict[str, Any]) -> None:
    error = result.get("error")
    OUTCOMES[(name, error["code"] if isinstance(error, dict) else "ok")] += 1


# Servers sharing the one store, each with its own connection and layers, as processes would.
SERVERS = 2
SERVER = st.integers(min_value=0, max_value=SERVERS - 1)
