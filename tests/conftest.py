"""Shared test configuration: hypothesis profiles and the PostgreSQL cluster fixture.

CI runs derandomized so a red build is reproducible; locally every run explores new examples.
"""

from __future__ import annotations

import os
import pathlib
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


@pytest.fixture
def empty_postgres_url(postgres_url: str) -> Iterator[str]:
    """The session's cluster with no memstrata tables: the test starts from an empty database,
    and leaves none behind."""
    from store_checks import drop_postgres_tables

    drop_postgres_tables(postgres_url)
    yield postgres_url
    drop_postgres_tables(postgres_url)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def two_connections(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> Iterator[tuple[object, object]]:
    """Two connections to one store, as two processes would hold (one store, for memory)."""
    from store_checks import empty_postgres_tables

    from memstrata.stores import InMemoryStore, PostgresStore, SQLiteStore

    first: object
    second: object
    if request.param == "memory":
        first = second = InMemoryStore()
    elif request.param == "sqlite":
        first, second = SQLiteStore(tmp_path / "two.db"), SQLiteStore(tmp_path / "two.db")
    else:
        url = request.getfixturevalue("postgres_url")
        first = PostgresStore(url)
        empty_postgres_tables(url)
        second = PostgresStore(url)
    yield first, second
    first.close()  # type: ignore[attr-defined]
    second.close()  # type: ignore[attr-defined]
