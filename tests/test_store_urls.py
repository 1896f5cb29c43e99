"""A store URL's password is never quoted: not by open_store's refusals, not by PostgresStore's
(libpq quotes the token of a connection string it cannot read), not by redacted_url."""

from __future__ import annotations

import pathlib

import pytest

from memstrata.exceptions import InvalidInputError
from memstrata.stores import PostgresStore, open_store
from memstrata.stores.urls import redacted_url, without_secrets


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:S3CRET@host/db", "postgresql://u:***@host/db"),
        ("postgresql://u:p@S3CRET@h1:5432,h2/db", "postgresql://u:***@h1:5432,h2/db"),
        ("postgresql://u:pa/S3CRET@h/db", "postgresql://u:***@h/db"),  # an unencoded "/"
        ("postgresql://u:S3CRET@[::1/db", "postgresql://u:***@[::1/db"),  # urlsplit refuses it
        ("postgres://u@h/db?sslmode=require&password=S3CRET", "postgres://u@h/db?sslmode=require&password=***"),
        ("host=h password=S3CRET user=u", "host=h password=*** user=u"),
        ("host=h password='S3 CRET' user=u", "host=h password=*** user=u"),
        ("host=h password=S3 CRET", "host=h password=***"),  # libpq refuses the space
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
        ("memory://", "memory://"),
    ],
)  # fmt: skip
def test_redacted_url_hides_the_password_only(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_a_drivers_message_loses_the_password_and_any_quoted_part_of_it() -> None:
    url = "host=h password=S3C RET"
    assert without_secrets('missing "=" after "RET" in connection info string', url) == (
        'missing "=" after "***" in connection info string'
    )
    url = "postgresql://u:S3%zzCRET@h/db"
    assert without_secrets('invalid percent-encoded token: "S3%zzCRET"', url) == (
        'invalid percent-encoded token: "***"'
    )
    assert without_secrets("user s@t", "postgresql://u:s%40t@h/db") == "user ***"


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://u:S3CRET@127.0.0.1:1/db",
        "host=127.0.0.1 password=S3CRET",
        "sqlite://u:S3CRET@host/x.db",
        "postgresql://u:S3CRET@[::1/db",
    ],
)
def test_open_store_refusals_hide_the_password(url: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        open_store(url)
    assert "S3CRET" not in str(refused.value) and "***" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:S3%zzCRET@127.0.0.1:1/db",
        "postgresql://u@127.0.0.1:1/db?password=S3%zzCRET",
        "host=127.0.0.1 port=1 password=S3C RET",
    ],
)
def test_a_connection_string_libpq_cannot_read_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(InvalidInputError, match="cannot be read") as refused:
        PostgresStore(url)
    for part in ("S3", "CRET", "RET"):
        assert part not in str(refused.value), str(refused.value)


@pytest.mark.parametrize("url", ["sqlite:/var/lib/agent/memory.db", "sqlite:memory.db"])
def test_a_sqlite_url_without_its_slashes_is_refused_not_read_as_a_relative_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """``sqlite:/var/lib/agent/memory.db`` looks absolute; read as the relative
    ``var/lib/agent/memory.db`` it would create its directories under the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=r"use sqlite:///relative\.db or sqlite:////abs"):
        open_store(url)
    assert list(tmp_path.iterdir()) == []
