"""The ``memstrata`` command.

    memstrata demo [--db PATH]                        a scripted conversation, no model needed
    memstrata inspect --store URL [NAMESPACE ...]     what is stored, as readable tables
    memstrata inspect --store URL --json [...]        the same as JSON, for scripts
    memstrata mcp --store URL --agent NAME [--thread ID] [--resource ID]
                                                      the stack's tools over MCP (stdio)
    memstrata reindex --store URL --agent NAME [--embedder hashing|openai] [--model M] [--dim N]
                                                      re-embed a mind with a progress bar
    memstrata copy --from URL --to URL [--json] [NAMESPACE ...]
                                                      copy a memory into another store (SQLite
                                                      to PostgreSQL, say), overwriting nothing

A NAMESPACE is a prefix written with slashes: ``working-memory/thread``, ``mind/my-agent``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sqlite3
import stat
import sys
import time
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from memstrata._console import escape_what_output_cannot_encode, writes_unicode
from memstrata._core import __version__
from memstrata.embedders import Embedder, HashingEmbedder, OpenAIEmbedder
from memstrata.exceptions import CopyConflictError, InvalidInputError, MemstrataError
from memstrata.layers import AgentMind, SharedMemory, WorkingMemory
from memstrata.layers.wm_stored import ARCHIVE_KEY, JOURNAL_KEY, STATE_KEY, read_state
from memstrata.stack import MemoryStack, checked_scope_id
from memstrata.stores import Item, Store, open_store
from memstrata.stores.base import validate_namespace
from memstrata.stores.urls import redacted_url, without_secrets

PAGE = 1000

# How inspect groups what it finds: the first namespace label each layer writes under.
SECTIONS = (
    ("working-memory", "Working memories"),
    ("mind", "Mind entries"),
    ("shared-memory", "Shared memory entries"),
)


# What a terminal may act on rather than show: C0/C1 controls (escape sequences: OSC 52
# clipboard writes, screen clears, title changes), format characters (bidi overrides, zero
# widths), line and paragraph separators, surrogates, private-use and unassigned code points.
# Stored text is model-written; inspect shows these escaped. Spaces and letters stay as they are.
_UNSHOWN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def _unshown(char: str) -> bool:
    return unicodedata.category(char) in _UNSHOWN


def shown_text(text: str) -> str:
    """``text`` with every character a terminal could act on written as an escape (``\\x1b``,
    ``\\u202e``); line breaks included, so a table cell stays on its line."""
    if text.isprintable():  # no control, format or separator character: the common case
        return text
    return "".join(_escape(c, json_form=False) if _unshown(c) else c for c in text)


def shown_json(text: str) -> str:
    """JSON text with those characters (which can only be inside its strings) as JSON ``\\u``
    escapes: still valid JSON that reads back as the same values; the newlines of its
    indentation are kept."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.isprintable():
            lines[i] = "".join(_escape(c, json_form=True) if _unshown(c) else c for c in line)
    return "\n".join(lines)


def _escape(char: str, *, json_form: bool) -> str:
    point = ord(char)
    if point > 0xFFFF:
        if json_form:  # a UTF-16 surrogate pair, as JSON writes one
            point -= 0x10000
            return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"
        return f"\\U{point:08x}"
    if point < 0x100 and not json_form:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}"


def _items(store: Store, prefix: tuple[str, ...]) -> Iterator[Item]:
    offset = 0
    while True:
        page = store.list(prefix, limit=PAGE, offset=offset)
        yield from page
        if len(page) < PAGE:
            return
        offset += PAGE


# Fields that say what an entry is, in the order inspect prefers them, and a qualifier to add.
_READABLE_FIELDS = ("content", "description", "title")
_QUALIFIERS = ("confidence", "status", "kind")


def _summary(value: Any, width: int = 60) -> str:
    """One readable line: a mind entry's content, a shared entry's title, else compact JSON
    (vectors left out)."""
    if isinstance(value, dict):
        readable = next((value[f] for f in _READABLE_FIELDS if isinstance(value.get(f), str)), None)
        if readable is not None:
            qualifier = next((value[q] for q in _QUALIFIERS if isinstance(value.get(q), str)), None)
            value = f"{readable} [{qualifier}]" if qualifier else readable
        else:
            value = {k: v for k, v in value.items() if k != "embedding"}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = shown_text(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell_width(char: str) -> int:
    """Terminal columns ``char`` takes: 2 for East Asian wide letters, 0 for combining marks."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _text_width(text: str) -> int:
    return len(text) if text.isascii() else sum(_cell_width(c) for c in text)


def _cut(text: str, width: int) -> str:
    """``text`` within ``width`` columns, its end replaced by ``…`` when cut."""
    if _text_width(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        used += _cell_width(char)
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def _fit(widths: list[int], room: int, fixed: frozenset[int]) -> list[int]:
    """Column widths within ``room``: the ``fixed`` columns and the narrow ones keep their
    width, the widest share what is left (at least 3 each: a tiny terminal overflows)."""
    fitted = list(widths)
    left = room - sum(widths[i] for i in fixed)
    order = sorted((i for i in range(len(widths)) if i not in fixed), key=lambda i: widths[i])
    for n, i in enumerate(order):
        fitted[i] = min(widths[i], max(3, left // (len(order) - n)))
        left -= fitted[i]
    return fitted


def terminal_width() -> int | None:
    """Columns to fit tables in: the terminal's, or ``$COLUMNS``; None (no limit) when the
    output goes to a file or a pipe and ``$COLUMNS`` is not set."""
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str],
    width: int | None = None,
    fixed: frozenset[int] = frozenset(),
) -> str:
    """A fixed-width table; with ``width``, its widest columns (not those ``fixed``, by index)
    are cut to fit, ending in ``…``. Cells are escaped first (:func:`shown_text`), so a cut
    never lets a control character through."""
    rows = [[shown_text(cell) for cell in row] for row in rows]
    widths = [max(_text_width(h), *(_text_width(r[i]) for r in rows)) for i, h in enumerate(header)]
    if width is not None:
        widths = _fit(widths, width - 2 * (len(header) - 1), fixed)

    def line(cells: Sequence[str]) -> str:
        cut = [_cut(c, w) for c, w in zip(cells, widths)]
        return "  ".join(c + " " * (w - _text_width(c)) for c, w in zip(cut, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _fold_working_memories(store: Store, items: list[Item]) -> list[Item]:
    """Older memstrata stored a large working memory as a snapshot and a journal (and an
    archive) of the updates since (see ``memstrata.layers.wm_stored``): inspect shows them as
    the one state a run loads."""
    journals = {
        i.namespace: i for i in items if i.namespace[0] == "working-memory" and i.key == JOURNAL_KEY
    }
    merged: dict[tuple[str, ...], tuple[Any, int]] = {}
    for namespace in {i.namespace for i in items if i.namespace in journals and i.key == STATE_KEY}:
        try:
            current = read_state(store, namespace)
        except InvalidInputError:
            continue  # a broken journal: shown as it is stored, for whoever looks into it
        if current is not None:
            merged[namespace] = current
    folded = []
    for item in items:
        if item.namespace in merged:
            if item.key in (JOURNAL_KEY, ARCHIVE_KEY):
                continue
            if item.key == STATE_KEY:
                value, version = merged[item.namespace]
                updated_at = journals[item.namespace].updated_at
                item = replace(item, value=value, version=version, updated_at=updated_at)
        folded.append(item)
    return folded


_STORE_HELP = "the store: sqlite:///agent.db (a file), postgresql://... or memory://"

ITEM_HEADER = ("namespace", "key", "ver", "updated (UTC)", "value")


def inspect(
    store: Store,
    prefixes: Sequence[tuple[str, ...]],
    as_json: bool,
    width: int | None = None,
    *,
    ascii_json: bool = False,
) -> str:
    """What ``memstrata inspect`` prints: tables (cut to ``width`` columns when given) or
    JSON (``ascii_json``: every other character as a ``\\u`` escape)."""
    items = [item for prefix in prefixes or [()] for item in _items(store, prefix)]
    items = _fold_working_memories(store, items)
    if as_json:
        return shown_json(
            json.dumps(
                [
                    {
                        "namespace": list(i.namespace),
                        "key": i.key,
                        "value": i.value,
                        "version": i.version,
                        "created_at": i.created_at,
                        "updated_at": i.updated_at,
                        "expires_at": i.expires_at,
                    }
                    for i in items
                ],
                ensure_ascii=ascii_json,
                indent=2,
            )
        )
    if not items:
        return "nothing stored" + (" under those namespaces" if prefixes else "")
    namespaces = sorted({i.namespace for i in items})
    out = [
        f"{len(items)} item(s) in {len(namespaces)} namespace(s)",
        "",
        _table(
            [["/".join(ns), str(sum(1 for i in items if i.namespace == ns))] for ns in namespaces],
            ["namespace", "items"],
            width,
            fixed=frozenset({1}),
        ),
    ]
    known = {label for label, _ in SECTIONS}
    groups = [(title, [i for i in items if i.namespace[0] == label]) for label, title in SECTIONS]
    groups.append(("Other items", [i for i in items if i.namespace[0] not in known]))
    for title, group in groups:
        if not group:
            continue
        rows = [
            [
                "/".join(i.namespace),
                i.key,
                f"v{i.version}",
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(i.updated_at)),
                _summary(i.value),
            ]
            for i in group
        ]
        out += [
            "",
            f"{title} ({len(group)})",
            _table(rows, ITEM_HEADER, width, fixed=frozenset({2, 3})),
        ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; its exit code. Ctrl-C ends any command with a line saying so (130,
    as a shell reports SIGINT; ``copy`` says what the target holds), and a reader that goes
    away (``memstrata inspect | head``) ends it quietly (141, as SIGPIPE would)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # output that fit the pipe's buffer meets a reader gone only here
    except KeyboardInterrupt:
        print("memstrata: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The rest of the output has no reader: standard output goes to the null device, so
        # that the interpreter's own flush at exit does not fail on it again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def _main(argv: Sequence[str] | None) -> int:
    escape_what_output_cannot_encode()
    parser = argparse.ArgumentParser(
        prog="memstrata",
        description="Memory layers for LLM agents: look into a store, serve it over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"memstrata {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="walk through a scripted agent conversation (no model or API key needed)",
        description="Replays a recorded agent conversation through every memory layer and "
        "prints what the model sees each turn; the second half runs in a new process, to show "
        "the memory surviving a restart.",
    )
    demo.add_argument(
        "--db",
        default=None,
        help="SQLite file for the demo's memory (default: demo-data/memstrata-demo.db)",
    )
    look = commands.add_parser(
        "inspect",
        help="show what a store holds",
        description="Prints what a store holds, as tables that fit the terminal, or in full "
        "as JSON. Only reads: a SQLite file that does not exist, or a PostgreSQL database "
        "without memstrata's tables, is an error.",
    )
    look.add_argument("--store", required=True, metavar="URL", help=_STORE_HELP)
    look.add_argument(
        "namespace",
        nargs="*",
        help="show only these namespaces, e.g. mind/my-agent or working-memory/thread",
    )
    look.add_argument("--json", action="store_true", help="print every item in full, as JSON")
    serve = commands.add_parser(
        "mcp",
        help="serve an agent's memory tools over MCP (stdio)",
        description="Serves a working memory, the agent's mind and its shared memory to an MCP "
        "client over stdio. Needs the mcp extra: pip install 'memstrata[mcp]'.",
    )
    serve.add_argument(
        "--store",
        required=True,
        metavar="URL",
        help=_STORE_HELP + " (a SQLite file is created if missing)",
    )
    serve.add_argument(
        "--agent", required=True, help="the agent's name; its memory is kept under it"
    )
    serve.add_argument(
        "--thread", default=None, help="conversation id for the working memory (default: mcp-AGENT)"
    )
    serve.add_argument(
        "--resource",
        default=None,
        help="user id: one working memory per user, across conversations",
    )
    serve.add_argument(
        "--schema",
        default=None,
        metavar="FILE",
        help="a JSON Schema file for the working memory (default: any JSON object)",
    )
    reindex = commands.add_parser(
        "reindex",
        help="re-embed a mind's entries with another embedder",
        description="Re-embeds the entries of an agent's mind that were embedded by another "
        "model or dimension, with a progress bar; entries already embedded are left alone.",
    )
    reindex.add_argument("--store", required=True, metavar="URL", help=_STORE_HELP)
    reindex.add_argument("--agent", required=True, help="the agent whose mind to re-embed")
    reindex.add_argument(
        "--embedder",
        choices=["hashing", "openai"],
        default="hashing",
        help="hashing: built in, offline (default); openai: an OpenAI-compatible embeddings "
        "API, with the key from $OPENAI_API_KEY",
    )
    reindex.add_argument(
        "--model",
        default="text-embedding-3-small",
        help="the embedding model, for --embedder openai (default: text-embedding-3-small)",
    )
    reindex.add_argument(
        "--base-url",
        default="https://api.openai.com/v1",
        metavar="URL",
        help="the API root, for --embedder openai (default: https://api.openai.com/v1)",
    )
    reindex.add_argument(
        "--dim",
        type=int,
        default=None,
        help="vector dimension (default: 384 for hashing, the model's own for openai)",
    )
    copy = commands.add_parser(
        "copy",
        help="copy a memory into another store (e.g. SQLite to PostgreSQL)",
        description="Copies every record (or those under the NAMESPACE prefixes) into another "
        "store exactly: values, versions, times and expiry. Overwrites nothing: refuses, "
        "writing nothing, if the target holds other records under the same keys; a copy "
        "stopped part way can be run again to finish. Checks the target against the source "
        "at the end. Stop the servers using the source first.",
    )
    copy.add_argument(
        "--from", dest="source", required=True, metavar="URL", help="the store to copy from"
    )
    copy.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="the store to copy into (a SQLite file is created if missing)",
    )
    copy.add_argument(
        "namespace",
        nargs="*",
        help="copy only these namespaces, e.g. mind/my-agent or working-memory",
    )
    copy.add_argument(
        "--json", action="store_true", help="print a JSON summary (per top-level namespace)"
    )
    args = parser.parse_args(argv)

    if args.command == "demo":
        from memstrata import demo as demo_module

        return demo_module.main([] if args.db is None else ["--db", args.db])
    if args.command == "copy":
        return _copy(args)
    try:
        if args.command != "mcp":
            _require_sqlite_file(args.store)
        store = _open(args.store, existing=args.command != "mcp")
    except _store_errors() as exc:  # a file that is not a SQLite database, a server down
        return _failed(exc, args.store)
    if args.command == "mcp":
        return _serve_mcp(store, args)
    if args.command == "reindex":
        return _reindex(store, args)
    try:
        prefixes = [tuple(p.strip("/").split("/")) for p in args.namespace]
        ascii_json = not writes_unicode(sys.stdout)
        print(inspect(store, prefixes, args.json, terminal_width(), ascii_json=ascii_json))
    except _store_errors() as exc:
        return _failed(exc, args.store)
    finally:
        store.close()
    return 0


def _require_sqlite_file(url: str) -> None:
    """Commands that read a store never create one: opening a mistyped ``sqlite:///`` path
    would create an empty database (and its directories) and report nothing stored; opening
    another program's SQLite database would add memstrata's tables to it (and switch it to
    WAL mode for good)."""
    parts = _split(url)
    if parts is None or parts.scheme != "sqlite" or parts.netloc:
        return  # other schemes, and a malformed sqlite URL, get open_store's own error
    # Read the way open_store reads it: sqlite:///x.db relative, sqlite:////x.db absolute.
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path or path == ":memory:":
        return
    if not os.path.isfile(path):
        raise InvalidInputError(
            f"no SQLite database at {os.path.abspath(path)} (from {url}); check the path:"
            " this command reads an existing store and does not create one"
        )
    if not _holds_memstrata_tables(path):
        raise InvalidInputError(
            f"no memstrata store in {os.path.abspath(path)} (from {url}): a SQLite database "
            "without memstrata's tables; check the path: this command reads an existing "
            "store and does not create one"
        )


def _holds_memstrata_tables(path: str) -> bool:
    """Whether the SQLite file has memstrata's schema table (every version of the store
    creates it first), read without writing; True when it cannot be read so (not a
    database, locked): the store then says what is wrong."""
    try:
        uri = pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memstrata_schema'"
            ).fetchone()
    except sqlite3.Error:
        return True
    return found is not None


def mcp_stack(
    store: Store, agent: str, *, per_user: bool, schema: dict[str, Any] | None = None
) -> MemoryStack:
    """The layers an MCP client gets: a structured working memory (``schema``, or any JSON
    object), the agent's mind (offline hashing embedder) and the agent's shared memory."""
    return MemoryStack(
        [
            WorkingMemory(
                schema=schema if schema is not None else {"type": "object"},
                scope="resource" if per_user else "thread",
            ),
            AgentMind(),
            SharedMemory(store=store, namespace=("shared-memory", agent)),
        ],
        store=store,
    )


class ProgressBar:
    """``[######......]  120/300`` on stderr, redrawn in place."""

    def __init__(self, label: str, width: int = 30) -> None:
        self.label, self.width = label, width

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if done >= total else ""
        print(f"\r{self.label} [{bar}] {done}/{total}", end=end, file=sys.stderr, flush=True)


def _reindex(store: Store, args: argparse.Namespace) -> int:
    """Re-embeds every entry of a mind whose stored vector is not from the chosen embedder."""
    try:
        _scope("--agent", args.agent)
        if args.embedder == "hashing":
            embedder: Embedder = HashingEmbedder(dim=384 if args.dim is None else args.dim)
        else:
            embedder = OpenAIEmbedder(
                model=args.model,
                base_url=args.base_url,
                api_key=os.environ.get("OPENAI_API_KEY"),
                dim=args.dim,
            )
        mind = AgentMind(embedder=embedder, on_progress=ProgressBar("re-embedding"))
        with mind.session(store, agent=args.agent) as handle:
            index = handle.index()
            count = len(index.beliefs) + len(index.reflections)
        print(f"{count} mind entries indexed with {embedder.model} (dim {embedder.dim})")
    except _store_errors() as exc:
        return _failed(exc, args.store)
    finally:
        store.close()
    return 0


def _failed(exc: BaseException, *urls: str, then: str = "") -> int:
    """Reports ``exc`` on one line of stderr (``then`` added after it), without the passwords
    of the store ``urls`` (a driver's message may quote them), its control characters escaped;
    returns exit code 2."""
    text = str(exc) or type(exc).__name__
    for url in urls:
        text = without_secrets(text, url)
    text = " ".join(text.split())
    print(f"memstrata: {shown_text(text)}{f' ({then})' if then else ''}", file=sys.stderr)
    return 2


# How long the connection that looks for memstrata's tables may take (libpq's connect_timeout).
_CONNECT_TIMEOUT = 10


def _open(url: str, *, existing: bool = False) -> Store:
    """``open_store(url)``. ``existing``: a database without memstrata's tables is refused, not
    given them (as :func:`_require_sqlite_file` refuses a missing file); for a PostgreSQL URL
    that takes one connection made directly, before the store's migration would create them.
    A server that is down or refuses the login is reported by the store itself, at once."""
    if existing and url.partition("://")[0] in ("postgresql", "postgres"):
        try:
            import psycopg
        except ImportError:
            pass  # open_store says what to install
        else:
            # A URL libpq cannot read is left to open_store, which says so, its password hidden.
            with contextlib.suppress(psycopg.ProgrammingError):
                # The URL's own connect_timeout, if it has one, is kept.
                given = psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout")
                conninfo = psycopg.conninfo.make_conninfo(
                    url, connect_timeout=_CONNECT_TIMEOUT if given is None else given
                )
                with psycopg.connect(conninfo) as conn:
                    found = conn.execute("SELECT to_regclass('memstrata_schema')").fetchone()
                if found == (None,):
                    raise InvalidInputError(
                        f"no memstrata store in the PostgreSQL database {redacted_url(url)}; "
                        "check the URL: this command reads an existing store and does not "
                        "create one"
                    )
    return open_store(url)


def _store_errors(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """The errors a store raises that the command reports in a line: memstrata's, SQLite's
    (a file that is not a database) and psycopg's (a server that cannot be reached); and
    ``more``."""
    errors: tuple[type[BaseException], ...] = (MemstrataError, sqlite3.Error, *more)
    if "psycopg" in sys.modules:
        errors += (sys.modules["psycopg"].Error,)
    return errors


def _copy(args: argparse.Namespace) -> int:
    """``memstrata copy``: progress on stderr, the summary (or ``--json``) on stdout; exit 2
    when nothing could be done (a bad URL or namespace, a refusal), 1 when the copy wrote but
    the target differs from the source at the end."""
    from memstrata.stores import copy_store

    stores: list[Store] = []
    drawn = _Bars()
    try:
        if _same_url(args.source, args.target):
            raise InvalidInputError(
                f"--from and --to name the same store ({redacted_url(args.source)}): copy into "
                "another store"
            )
        _require_sqlite_file(args.source)
        prefixes = [_prefix(p) for p in args.namespace]
        stores.append(_open(args.source, existing=True))
        if _in_process(args.target):
            raise InvalidInputError(
                f"--to {args.target} is a store in this command's own memory, gone when it "
                "ends: copy into a SQLite file or a PostgreSQL database"
            )
        stores.append(_open(args.target))
        bars = {stage: ProgressBar(stage) for stage in ("copying", "verifying")}
        result = copy_store(stores[0], stores[1], prefixes, progress=drawn.draw(bars))
    except CopyConflictError as exc:
        drawn.end_line()
        _failed(exc, args.source, args.target)
        return 1 if exc.copied else 2
    except _store_errors(OSError) as exc:  # OSError: a full disk, a file's permissions
        drawn.end_line()
        return _failed(exc, args.source, args.target, then=drawn.where())
    except KeyboardInterrupt:
        drawn.end_line()
        where = drawn.where() or "before the first page of records was done"
        print(f"memstrata: interrupted: {where}", file=sys.stderr)
        return 130
    finally:
        for store in stores:
            store.close()
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
        return 0
    labels = sorted(set(result.copied) | set(result.already))
    rows = [
        [label, str(result.copied.get(label, 0)), str(result.already.get(label, 0))]
        for label in labels
    ]
    print(
        f"copied {sum(result.copied.values())} record(s) in {result.seconds:.1f} s; the target "
        f"holds all {result.records} of the source's, checked"
    )
    if rows:
        print(_table(rows, ["namespace", "copied", "already there"], terminal_width()))
    if result.target_only:
        print(f"{result.target_only} record(s) of the target's own were left as they are")
    return 0


class _Bars:
    """The copy's progress bars, whether one was left part drawn (an error then starts on a
    line of its own), and how far the copy got."""

    def __init__(self) -> None:
        self.open = False
        self.stage: str | None = None
        self.done = self.total = 0

    def draw(self, bars: dict[str, ProgressBar]) -> Any:
        def progress(stage: str, done: int, total: int) -> None:
            bars[stage](done, total)
            self.open = done < total
            self.stage, self.done, self.total = stage, done, total

        return progress

    def where(self) -> str:
        """What the target holds, for a copy stopped part way ("" before any page was done):
        each page is written in one transaction, so the page being written when it stopped is
        there whole or not at all, and running the copy again finishes it."""
        if self.stage == "copying":
            return (
                f"the target holds at least {self.done} of the {self.total} records, in whole "
                "pages; run the same command again to finish"
            )
        if self.stage == "verifying":
            return (
                f"every record was written, the check against the source stopped at {self.done}"
                f" of {self.total}; run the same command again to check"
            )
        return ""

    def end_line(self) -> None:
        if self.open:
            print(file=sys.stderr)
            self.open = False


def _prefix(text: str) -> tuple[str, ...]:
    """A NAMESPACE argument (``mind/my-agent``) as a prefix, or InvalidInputError naming it."""
    prefix = tuple(text.strip("/").split("/"))
    try:
        return validate_namespace(prefix)
    except InvalidInputError as exc:
        raise InvalidInputError(f"namespace {text!r}: {exc}") from None


def _split(url: str) -> SplitResult | None:
    """``url``'s parts; None for a URL urlsplit cannot read (an unclosed IPv6 bracket), which
    open_store then refuses, saying so."""
    try:
        return urlsplit(url)
    except ValueError:
        return None


def _in_process(url: str) -> bool:
    """Whether ``url`` names a store that lives in this process only: ``memory://``, or
    SQLite's ``:memory:``."""
    parts = _split(url)
    if parts is None:
        return False
    if parts.scheme == "memory":
        return True
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return parts.scheme == "sqlite" and not parts.netloc and unquote(path) == ":memory:"


def _same_url(a: str, b: str) -> bool:
    """Two URLs naming one store as written: the same SQLite file (resolved), or the same
    URL. (copy_store also compares the stores it opened: another spelling of one database.)"""
    if a == b:
        return not a.startswith("memory:")
    pa, pb = _split(a), _split(b)
    if pa is None or pb is None:
        return False
    if pa.scheme == pb.scheme == "sqlite" and not pa.netloc and not pb.netloc:
        path_a = unquote(pa.path[1:] if pa.path.startswith("/") else pa.path)
        path_b = unquote(pb.path[1:] if pb.path.startswith("/") else pb.path)
        return bool(path_a) and os.path.realpath(path_a) == os.path.realpath(path_b)
    return False


# The largest --schema file read: a JSON Schema of a working memory is a few kilobytes.
MAX_SCHEMA_BYTES = 4 * 1024 * 1024


def _schema_file(path: str) -> dict[str, Any]:
    try:
        # Non-blocking, then checked: opening a FIFO no one writes to would wait forever, and
        # a device (/dev/zero) or a huge file would be read until memory runs out.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InvalidInputError(f"--schema {path} is not a regular file")
            text = file.read(MAX_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise InvalidInputError(f"--schema {path}: {exc.strerror or exc}") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise InvalidInputError(
            f"--schema {path} is larger than {MAX_SCHEMA_BYTES:,} bytes: not a JSON Schema"
        )
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"--schema {path} is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInputError(
            f"--schema {path} nests too deeply to read (a JSON Schema needs a few levels)"
        ) from None
    if not isinstance(schema, dict):
        raise InvalidInputError(f"--schema {path} must hold a JSON object (a JSON Schema)")
    return schema


def _scope(flag: str, value: str | None) -> str | None:
    """An --agent, --thread or --resource value checked as a run checks it, the error naming
    the option: checked before serving, or every call would fail (or an empty --thread serve
    the default thread)."""
    if value == "":
        raise InvalidInputError(f"{flag} is empty: give it a name")
    return checked_scope_id(flag, value)


def _serve_mcp(store: Store, args: argparse.Namespace) -> int:
    from memstrata.mcp_server import serve

    try:
        for flag in ("agent", "thread", "resource"):
            _scope(f"--{flag}", getattr(args, flag))
        schema = None if args.schema is None else _schema_file(args.schema)
        stack = mcp_stack(store, args.agent, per_user=args.resource is not None, schema=schema)
        serve(
            stack,
            thread_id=args.thread or f"mcp-{args.agent}",
            resource_id=args.resource,
            agent=args.agent,
        )
    except MemstrataError as exc:
        return _failed(exc, args.store)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
