"""Shared test configuration: hypothesis profiles and the PostgreSQL cluster fixture.

CI runs derandomized so a red build is reproducible; locally every run explores new examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One throwaway PostgreSQL cluster for the whole test session (see postgres_cluster.py)."""
    from postgres_cluster import throwaway_cluster

    with throwaway_cluster() as url:
        yield url
