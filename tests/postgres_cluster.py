"""A throwaway PostgreSQL cluster for the tests: initdb into a temporary directory, started with
pg_ctl on a free loopback port, removed afterwards.

Uses the server binaries of Debian's ``postgresql`` package (``.ci/run`` installs it when
missing). ``initdb`` refuses to run as root, so under root the cluster runs as the ``postgres``
system user the package creates. Set ``MEMSTRATA_TEST_POSTGRES_URL`` to use a server you
already have instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(
            f"PostgreSQL's {name} was not found: install Debian's postgresql package "
            "(apt-get install postgresql) or set MEMSTRATA_TEST_POSTGRES_URL"
        )
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_cluster(extra_options: str = "") -> Iterator[str]:
    """Yields a postgresql:// URL of a fresh cluster that is stopped and deleted afterwards
    (``extra_options``: more ``-c name=value`` server settings)."""
    if os.environ.get("MEMSTRATA_TEST_POSTGRES_URL"):
        yield os.environ["MEMSTRATA_TEST_POSTGRES_URL"]
        return
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="memstrata-pg-")
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = os.path.join(root, "data"), os.path.join(root, "server.log")
    port = _free_port()
    pg_ctl = [*as_user, _bin("pg_ctl"), "-D", data]
    try:
        subprocess.run(
            [*as_user, _bin("initdb"), "-D", data, "-U", "memstrata", "--auth=trust",
             "--encoding=UTF8", "--locale=C", "--no-sync"],
            check=True, capture_output=True,
        )  # fmt: skip
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
            f"{extra_options}"
        )
        subprocess.run(
            [*pg_ctl, "-o", options, "-l", log, "-w", "-t", "60", "start"],
            check=True, capture_output=True,
        )  # fmt: skip
        yield f"postgresql://memstrata@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
