"""The installed ``memstrata`` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from memstrata import MemoryStack, SharedMemory, SQLiteStore, WorkingMemory

MEMSTRATA = shutil.which("memstrata", path=str(pathlib.Path(sys.executable).parent))


def run_cli(
    *args: str, columns: int | None = None, encoding: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs ``memstrata``, its output piped: tables are cut only to ``columns`` if given.
    ``encoding``: the one its output is written in, as a Windows console's code page (cp1252)
    is when the output goes to a pipe or a file."""
    assert MEMSTRATA is not None, "the memstrata entry point is not installed"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    if encoding is not None:
        env["PYTHONIOENCODING"] = encoding
    return subprocess.run(
        [MEMSTRATA, *args],
        capture_output=True,
        text=True,
        encoding=encoding,
        timeout=120,
        env=env,
    )


def populate(path: pathlib.Path) -> None:
    with SQLiteStore(path) as store:
        stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=store)
        with stack.run(thread_id="t1") as run:
            run.call_tool("working-memory/update", {"user": {"name": "Priya"}})
        shared = SharedMemory(store=store, namespace=("shared-memory", "wf"))
        shared.set(key="task:research", kind="task_result", value={"risks": 2}, title="Risks")
        store.put(("custom",), "k", "v")


def test_inspect_prints_tables(tmp_path: pathlib.Path) -> None:
    populate(tmp_path / "m.db")
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("3 item(s) in 3 namespace(s)")
    assert "Working memories (1)" in out and "working-memory/thread/t1" in out
    assert '{"user": {"name": "Priya"}}' in out
    assert "Shared memory entries (1)" in out and "task:research" in out
    assert "Risks [task_result]" in out  # a shared entry shows its title and kind
    assert "Other items (1)" in out


def test_inspect_json_filters_by_namespace(tmp_path: pathlib.Path) -> None:
    populate(tmp_path / "m.db")
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db", "--json", "shared-memory")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)
    assert [(i["namespace"], i["key"]) for i in items] == [
        (["shared-memory", "wf"], "task:research")
    ]
    assert items[0]["value"]["title"] == "Risks"


def test_a_store_from_a_newer_memstrata_is_a_clear_error_not_a_traceback(
    tmp_path: pathlib.Path,
) -> None:
    populate(tmp_path / "m.db")
    with sqlite3.connect(tmp_path / "m.db") as conn:
        conn.execute("INSERT INTO memstrata_schema VALUES (99)")
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "schema version 99" in result.stderr and "upgrade memstrata" in result.stderr


def test_bad_store_url_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    result = run_cli("inspect", "--store", "redis://nowhere")
    assert result.returncode == 2
    assert "unknown store URL scheme 'redis'" in result.stderr


def test_demo_command_runs_the_demo(tmp_path: pathlib.Path) -> None:
    result = run_cli("demo", "--db", str(tmp_path / "demo.db"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Process restarted" in result.stdout
    assert "final working memory (v4)" in result.stdout


def test_demo_runs_when_the_output_encoding_lacks_its_characters(tmp_path: pathlib.Path) -> None:
    """Windows writes piped output in the console's code page: the demo's rules and arrows
    come out as escapes there instead of ending it with UnicodeEncodeError."""
    result = run_cli("demo", "--db", str(tmp_path / "demo.db"), encoding="cp1252")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "final working memory (v4)" in result.stdout
    assert "\\u2500" in result.stdout  # the rule, as an escape


def test_inspect_in_a_narrow_output_encoding_is_readable_and_the_json_exact(
    tmp_path: pathlib.Path,
) -> None:
    _hostile_store(tmp_path / "m.db")
    url = f"sqlite:///{tmp_path}/m.db"
    tables = run_cli("inspect", "--store", url, encoding="cp1252")
    assert tables.returncode == 0, tables.stderr
    assert "Priya Müller" in tables.stdout  # what the encoding has stays as it is
    assert "\\u6771\\u4eac" in tables.stdout  # 東京, as escapes
    as_json = run_cli("inspect", "--store", url, "--json", encoding="cp1252")
    assert as_json.returncode == 0, as_json.stderr
    items = {i["key"]: i for i in json.loads(as_json.stdout)}  # valid JSON, the values exact
    assert items["k"]["value"] == {"text": READABLE, "evil": HOSTILE}
    emoji = run_cli(
        "inspect", "--store", _store_with(tmp_path, "\U0001f600 ok"), "--json", encoding="cp1252"
    )
    assert emoji.returncode == 0, emoji.stderr
    assert json.loads(emoji.stdout)[0]["value"] == "\U0001f600 ok"


def _store_with(tmp_path: pathlib.Path, value: str) -> str:
    with SQLiteStore(tmp_path / "one.db") as store:
        store.put(("custom",), "k", value)
    return f"sqlite:///{tmp_path}/one.db"


def test_reindex_re_embeds_a_mind_once_with_progress(tmp_path: pathlib.Path) -> None:
    from memstrata import AgentMind, HashingEmbedder

    path = tmp_path / "mind.db"
    with SQLiteStore(path) as store:
        mind = AgentMind(embedder=HashingEmbedder(dim=384))
        with mind.session(store, agent="a") as handle:
            handle.believe("The staging API key differs from production.", confidence="high")
            handle.believe("Payments rate limit is 100 requests per minute.")
            handle.reflect("Cite the filing date of every capacity figure.")
        old_models = {i.value["embeddingModel"] for i in store.list(("mind", "a"))}

    first = run_cli("reindex", "--store", f"sqlite:///{path}", "--agent", "a", "--dim", "256")
    assert first.returncode == 0, first.stderr
    assert "re-embedding [" in first.stderr and "] 3/3" in first.stderr
    assert first.stdout.startswith("3 mind entries indexed with")
    with SQLiteStore(path) as store:
        items = store.list(("mind", "a"))
        new_models = {i.value["embeddingModel"] for i in items}
    assert new_models.isdisjoint(old_models) and len(new_models) == 1

    again = run_cli("reindex", "--store", f"sqlite:///{path}", "--agent", "a", "--dim", "256")
    assert again.returncode == 0 and "re-embedding" not in again.stderr


def test_inspect_shows_a_working_memory_with_its_journal_merged(tmp_path: pathlib.Path) -> None:
    ns = ("working-memory", "thread", "big")
    journal = {"version": 2, "base": 1, "arrays": "replace", "nulls": "keep", "patches": [{"b": 2}]}
    with SQLiteStore(tmp_path / "m.db") as store:
        store.put(ns, "state", {"a": 1})
        store.put(ns, "journal", journal)
        store.put(("working-memory", "thread", "broken"), "state", {"a": 1})
        store.put(("working-memory", "thread", "broken"), "journal", {"base": 9})
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db", "--json", "working-memory")
    assert result.returncode == 0, result.stderr
    items = {(tuple(i["namespace"]), i["key"]): i for i in json.loads(result.stdout)}
    # One record, the state a run loads; a journal that belongs to no state is shown raw.
    assert set(items) == {
        (ns, "state"),
        (("working-memory", "thread", "broken"), "journal"),
        (("working-memory", "thread", "broken"), "state"),
    }
    assert items[(ns, "state")]["value"] == {"a": 1, "b": 2}
    assert items[(ns, "state")]["version"] == 1  # the state record's, until a run folds the rows


# What a model wrote, shown to an operator: terminal escapes and other control characters.
HOSTILE = (
    "copy\x1b]52;c;ZWNobyBwd25lZA==\x07 clear\x1b[2J\x1b[H bell\x07 csi\x9b31m nul\x00"
    " del\x7f ltr\u202eevil\u202c zw\u200b line\u2028sep"
)
READABLE = "Priya Müller, 東京, café"


def _hostile_store(path: pathlib.Path) -> None:
    with SQLiteStore(path) as store:
        store.put(("shared-memory", "wf"), "note\x1b[2J", {"title": HOSTILE, "kind": "shared"})
        store.put(("custom", "ns\x1b]0;title\x07"), "k", {"text": READABLE, "evil": HOSTILE})


def _raw_controls(text: str) -> set[str]:
    import unicodedata

    return {
        c
        for c in text
        if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
    }


def test_inspect_escapes_control_characters_a_model_wrote(tmp_path: pathlib.Path) -> None:
    _hostile_store(tmp_path / "m.db")
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert _raw_controls(out) == set(), _raw_controls(out)
    assert r"\x1b]52;c;ZWNobyBwd25lZA==\x07" in out  # shown, never sent to the terminal
    assert r"note\x1b[2J" in out and r"custom/ns\x1b]0;title\x07" in out
    assert READABLE in out  # letters of every script stay readable
    assert "Shared memory entries (1)" in out and "Other items (1)" in out


def test_inspect_json_escapes_control_characters_and_round_trips(tmp_path: pathlib.Path) -> None:
    _hostile_store(tmp_path / "m.db")
    result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db", "--json")
    assert result.returncode == 0, result.stderr
    assert _raw_controls(result.stdout) == set()
    assert READABLE in result.stdout and "\\u001b]52;c;" in result.stdout
    assert "\\u202e" in result.stdout and "\\u2028" in result.stdout
    items = {i["key"]: i for i in json.loads(result.stdout)}  # still JSON, the values exact
    assert items["k"]["value"] == {"text": READABLE, "evil": HOSTILE}
    assert items["k"]["namespace"] == ["custom", "ns\x1b]0;title\x07"]
    assert items["note\x1b[2J"]["value"]["title"] == HOSTILE


def test_version_prints_the_version() -> None:
    from memstrata import __version__

    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"memstrata {__version__}"


def test_python_dash_m_memstrata_is_the_same_command() -> None:
    from memstrata import __version__

    result = subprocess.run(
        [sys.executable, "-m", "memstrata", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"memstrata {__version__}"
    result = subprocess.run(
        [sys.executable, "-m", "memstrata"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "COMMAND" in result.stderr


def test_read_commands_refuse_a_missing_sqlite_file(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "typo" / "agent.db"
    for args in (["inspect"], ["inspect", "--json"], ["reindex", "--agent", "a"]):
        result = run_cli(*args, "--store", f"sqlite:///{missing}")
        assert result.returncode == 2, (args, result.stdout)
        assert f"no SQLite database at {missing}" in result.stderr
        assert result.stdout == ""
    assert not (tmp_path / "typo").exists()  # neither the file nor its directory was created
    directory = run_cli("inspect", "--store", f"sqlite:///{tmp_path}")
    assert directory.returncode == 2 and f"no SQLite database at {tmp_path}" in directory.stderr
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("not a database")
    wrong = run_cli("inspect", "--store", f"sqlite:///{not_sqlite}")
    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr == (
        f"memstrata: cannot open the SQLite database {not_sqlite}: file is not a database\n"
    )


def _columns(line: str) -> int:
    """Terminal columns a line takes (wide East Asian letters take two)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def _wide_store(path: pathlib.Path) -> None:
    with SQLiteStore(path) as store:
        for n in range(3):
            store.put(
                ("mind", "a-rather-long-agent-name-for-a-narrow-terminal"),
                f"belief/b_{n:032x}",
                {"content": f"東京 café {n} " + "the staging key differs from production " * 3},
            )
        store.put(("custom", "evil"), "k\x1b[2J", {"text": HOSTILE * 3})


def test_inspect_tables_fit_the_terminal(tmp_path: pathlib.Path) -> None:
    _wide_store(tmp_path / "m.db")
    for columns in (100, 60):
        result = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db", columns=columns)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert max(map(_columns, lines)) <= columns, result.stdout
        assert _raw_controls(result.stdout) == set()  # cut cells stay escaped
        assert "1970-01-01" not in result.stdout and " v1   20" in result.stdout  # dates whole
        assert "…" in result.stdout and "Mind entries (3)" in result.stdout
    # Piped with no COLUMNS: nothing is cut to a guessed width.
    piped = run_cli("inspect", "--store", f"sqlite:///{tmp_path}/m.db")
    assert "mind/a-rather-long-agent-name-for-a-narrow-terminal" in piped.stdout
    assert max(map(_columns, piped.stdout.splitlines())) > 100


def test_table_cuts_wide_letters_by_their_columns() -> None:
    from memstrata.cli import _table

    table = _table([["東京東京東京東京", "v1"], ["ascii text here", "v2"]], ["name", "ver"], 12)
    lines = table.splitlines()
    assert max(map(_columns, lines)) <= 12
    assert lines[2] == "東京東…  v1"  # 7 columns: three wide letters and the ellipsis
    assert lines[3] == "ascii …  v2"


def test_help_speaks_to_users() -> None:
    for command in ([], ["demo"], ["inspect"], ["mcp"], ["reindex"]):
        result = run_cli(*command, "--help")
        assert result.returncode == 0, result.stderr
        assert "make " not in result.stdout, result.stdout
    assert "demo-data/memstrata-demo.db" in run_cli("demo", "--help", columns=200).stdout


def test_mcp_refuses_a_schema_file_nested_too_deeply_with_a_clear_error(
    tmp_path: pathlib.Path,
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli("mcp", "--store", "memory://", "--agent", "a", "--schema", str(deep))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"--schema {deep} nests too deeply" in result.stderr


SECRET = "s3cr%zzet-XYZ"  # a password, with a "%" escape libpq cannot read


@pytest.mark.parametrize(
    ("args", "named"),
    [
        # The same URL twice: refused before connecting.
        (
            ["copy", "--from", "postgresql://u:S3CRET@127.0.0.1:1/db", "--to",
             "postgresql://u:S3CRET@127.0.0.1:1/db"],
            "name the same store (postgresql://u:***@127.0.0.1:1/db)",
        ),
        # A mistyped scheme, a libpq key/value string: the URL is quoted in the refusal.
        (["inspect", "--store", "postgresq://u:S3CRET@127.0.0.1:1/db"], "unknown store URL scheme"),
        (["inspect", "--store", "host=127.0.0.1 password=S3CRET"], "password=***"),
        (["copy", "--from", "memory://", "--to", "postgres://u@h/db?password=S3CRET&x"], "x"),
        # A password libpq cannot read: its error quotes the token.
        (["inspect", "--store", f"postgresql://u:{SECRET}@127.0.0.1:1/db"], "cannot be read"),
        (["copy", "--from", "memory://", "--to", f"postgresql://u:{SECRET}@127.0.0.1:1/db"],
         "cannot be read"),
        (["mcp", "--agent", "a", "--store", "host=127.0.0.1 port=1 password=S3C RET"],
         "password=***"),
        # A URL urlsplit cannot read (an unclosed IPv6 bracket).
        (["inspect", "--store", "postgresql://u:S3CRET@[::1/db"], "cannot be read"),
        (["copy", "--from", "memory://", "--to", "postgresql://u:S3CRET@[::1/db"],
         "cannot be read"),
        # No server there: one line at once, not a traceback after the pool's 30 s.
        (["inspect", "--store", "postgresql://u:S3CRET@127.0.0.1:1/db"], "Connection refused"),
        (["reindex", "--agent", "a", "--store", "postgresql://u:S3CRET@127.0.0.1:1/db"],
         "Connection refused"),
        (["copy", "--from", "postgresql://u:S3CRET@127.0.0.1:1/db", "--to", "memory://"],
         "Connection refused"),
    ],
)  # fmt: skip
def test_no_command_prints_a_store_password(args: list[str], named: str) -> None:
    started = time.monotonic()
    result = run_cli(*args)
    took = time.monotonic() - started
    shown = result.stdout + result.stderr
    assert result.returncode == 2, shown
    for secret in ("S3CRET", "S3C", "RET", SECRET, "zzet", "XYZ"):
        assert secret not in shown, shown
    assert "Traceback" not in shown and named in shown, shown
    assert result.stderr.count("\n") == 1, shown  # one line
    assert took < 15


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: pathlib.Path) -> None:
    """``memstrata inspect | head``: the reader goes away; the command stops without a
    BrokenPipeError traceback, with the exit code of a process SIGPIPE ended (141)."""
    assert MEMSTRATA is not None
    populate(tmp_path / "m.db")
    with SQLiteStore(tmp_path / "big.db") as big:  # more than a pipe's buffer holds
        for i in range(200):
            big.put(("notes",), f"k{i}", "x" * 1000)
    for db, args in (("m.db", []), ("big.db", ["--json"]), ("big.db", [])):
        command = [MEMSTRATA, "inspect", "--store", f"sqlite:///{tmp_path}/{db}", *args]
        reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert reader.stdout is not None and reader.stderr is not None
        reader.stdout.close()  # before the command writes: as head that has read its lines
        err = reader.stderr.read().decode()
        assert reader.wait(timeout=60) == 141, (db, args, err)
        assert err == "", (db, args, err)


def test_ctrl_c_ends_a_command_with_a_line_not_a_traceback(tmp_path: pathlib.Path) -> None:
    assert MEMSTRATA is not None
    command = [MEMSTRATA, "mcp", "--store", f"sqlite:///{tmp_path}/m.db", "--agent", "a"]
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    server.stdin.write(json.dumps(request).encode() + b"\n")
    server.stdin.flush()
    assert b'"id":0' in server.stdout.readline()  # serving
    server.send_signal(signal.SIGINT)
    _out, err = server.communicate(timeout=30)
    assert server.returncode == 130, err
    assert err.decode() == "memstrata: interrupted\n"


def test_read_commands_refuse_a_postgres_database_without_a_store(postgres_url: str) -> None:
    """As for a missing SQLite file: a mistyped database name must not get memstrata's tables
    created in it and be reported as holding nothing."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS not_a_store")
        admin.execute("CREATE DATABASE not_a_store")
    url = postgres_url.rsplit("/", 1)[0] + "/not_a_store"
    try:
        for args in (
            ["inspect", "--store", url],
            ["reindex", "--agent", "a", "--store", url],
            ["copy", "--from", url, "--to", "memory://"],
        ):
            result = run_cli(*args)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert result.stderr == (
                f"memstrata: no memstrata store in the PostgreSQL database {url}; check the URL: "
                "this command reads an existing store and does not create one\n"
            )
        with psycopg.connect(url) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'memstrata%'"
            ).fetchone()
        assert tables == (0,)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("DROP DATABASE not_a_store")


def test_mcp_refuses_a_schema_file_that_is_no_regular_file_or_too_large(
    tmp_path: pathlib.Path,
) -> None:
    """A FIFO no one writes to would block the server before it starts, forever; a device
    such as /dev/zero, or a huge file, would be read until memory runs out."""
    fifo = tmp_path / "schema.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as file:
        file.truncate(64 * 1024 * 1024)  # sparse: takes no disk
    for path, named in (
        (fifo, f"--schema {fifo} is not a regular file"),
        (pathlib.Path("/dev/zero"), "--schema /dev/zero is not a regular file"),
        (huge, f"--schema {huge} is larger than"),
    ):
        result = run_cli("mcp", "--store", "memory://", "--agent", "a", "--schema", str(path))
        assert result.returncode == 2, (path, result.stderr)
        assert result.stderr.startswith(f"memstrata: {named}"), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["mcp", "--agent", ""], "memstrata: --agent is empty: give it a name"),
        (["mcp", "--agent", "a", "--thread", ""], "memstrata: --thread is empty: give it a name"),
        (["mcp", "--agent", "a", "--resource", ""],
         "memstrata: --resource is empty: give it a name"),
        (["mcp", "--agent", "a", "--resource", "\udcff"],
         "memstrata: --resource is not valid Unicode: a lone surrogate"),
        (["reindex", "--agent", ""], "memstrata: --agent is empty: give it a name"),
        (["reindex", "--agent", "a", "--dim", "0"],
         "memstrata: dim must be an int between 1 and 65536, got 0"),
    ],
)  # fmt: skip
def test_a_careless_scope_or_dimension_is_refused_before_serving(
    tmp_path: pathlib.Path, args: list[str], said: str
) -> None:
    """An empty --thread served the default thread's memory, an empty --resource or --agent
    served every call an internal error (or a namespace error naming no option), and --dim 0
    re-embedded with the default dimension."""
    populate(tmp_path / "m.db")
    result = run_cli(*args, "--store", f"sqlite:///{tmp_path}/m.db")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(said) and result.stderr.count("\n") == 1, result.stderr


def test_demo_keeps_to_its_own_files_and_refuses_a_db_it_cannot_open(
    tmp_path: pathlib.Path,
) -> None:
    """``--db`` next to a project's own files: the demo's file-backed layers wrote into
    ``context/`` beside it (a TeamState's ``context/team/current_state.md`` overwritten); a
    ``--db`` that is a directory or not SQLite ended in a traceback."""
    mine = tmp_path / "context" / "team" / "current_state.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("the project's own team state\n")
    result = run_cli("demo", "--db", str(tmp_path / "agent.db"))
    assert result.returncode == 0, result.stderr
    assert mine.read_text() == "the project's own team state\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent-files", "agent.db", "context"]
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("not a database")
    for db in (tmp_path / "context", not_sqlite):
        refused = run_cli("demo", "--db", str(db))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(f"memstrata: cannot open the SQLite database {db}")
        assert refused.stderr.count("\n") == 1, refused.stderr


def test_read_commands_leave_another_programs_sqlite_database_alone(
    tmp_path: pathlib.Path,
) -> None:
    """A SQLite file that is not a memstrata store (another program's, or empty): inspect,
    reindex and copy's source created memstrata's tables in it, switched it to WAL mode for
    good, and reported nothing stored."""
    other = tmp_path / "crm.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    (tmp_path / "empty.db").touch()
    for db in (other, tmp_path / "empty.db"):
        for args in (
            ["inspect", "--store", f"sqlite:///{db}"],
            ["reindex", "--agent", "a", "--store", f"sqlite:///{db}"],
            ["copy", "--from", f"sqlite:///{db}", "--to", f"sqlite:///{tmp_path}/t.db"],
        ):
            result = run_cli(*args)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert result.stderr.startswith(f"memstrata: no memstrata store in {db} "), (
                result.stderr
            )
    with sqlite3.connect(other) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
        assert tables == ["customers"]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert (tmp_path / "empty.db").stat().st_size == 0
    assert not (tmp_path / "t.db").exists()
