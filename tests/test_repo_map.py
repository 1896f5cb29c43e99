"""repo_map: Python via ast, Rust and TypeScript via the scanner, excludes, binaries, budget."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from memstrata import estimate_tokens, repo_map
from memstrata.exceptions import InvalidInputError
from memstrata.repo_map import tree_sitter_available

PARSERS = ["scanner", "tree-sitter"]


@pytest.fixture(params=PARSERS)
def parser(request: pytest.FixtureRequest) -> str:
    if request.param == "tree-sitter" and not tree_sitter_available():
        pytest.fail("make test installs the repomap extra's tree-sitter grammars; they are missing")
    return str(request.param)


PY = '''\
"""Billing: invoices and payments.

More detail that the digest leaves out.
"""
import os
from decimal import Decimal

RATE = 3


def total(items: list[Decimal], *, tax: Decimal = Decimal("0.2")) -> Decimal:
    """Sums the items with tax."""
    secret_body_marker = 1
    return sum(items) * (1 + tax)


async def fetch(url: str) -> bytes:
    return b""


class Invoice(Base, metaclass=Meta):
    """An invoice sent to a customer."""

    def __init__(self, number: int) -> None:
        self.number = number

    @property
    def label(self) -> str:
        """Human label."""
        return f"#{self.number}"

    async def send(self, to: str, *args, **kwargs):
        pass
'''

RS = r"""//! Geometry kernels.
use std::fmt;

/// A point in the plane.
#[derive(Debug)]
pub struct Point {
    x: f64, // "not a brace {"
}

impl Point {
    /// Builds a point.
    pub fn new(x: f64) -> Self {
        let s = "}}}";
        let c = '}';
        Point { x }
    }

    fn private<'a>(&'a self,
                   other: &'a str) -> &'a str {
        other
    }
}

pub trait Area {
    fn area(&self) -> f64;
}

/* block comment with fn fake() { */
pub(crate) fn helper(n: usize) -> usize { n + 1 }
"""

TS = """/**
 * HTTP client helpers.
 */
import { Agent } from "undici";

/** Fetches JSON. */
export async function getJson<T>(url: string, opts?: { timeout: number }): Promise<T> {
  const s = "}";
  return {} as T;
}

export interface Options {
  retries: number;
  backoff(attempt: number): number;
}

export class Client {
  private base: string;
  constructor(base: string) { this.base = base; }
  /** Issues a GET. */
  async get(path: string): Promise<Response> {
    if (path) { return fetch(this.base + path); }
    return fetch(this.base);
  }
}

export const retry = async (fn: () => Promise<void>, n: number): Promise<void> => {
  for (let i = 0; i < n; i++) { await fn(); }
};
"""


def make_repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "billing.py").write_text(PY)
    (root / "src").mkdir()
    (root / "src" / "geo.rs").write_text(RS)
    (root / "web").mkdir()
    (root / "web" / "client.ts").write_text(TS)
    (root / "README.md").write_text("# readme\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / ".gitignore").write_text("*.log\n/build_out/\nsecret*\n!secret_ok.txt\n")
    (root / "debug.log").write_text("ignored\n")
    (root / "build_out").mkdir()
    (root / "build_out" / "gen.py").write_text("def generated(): pass\n")
    (root / "secret_keys.txt").write_text("ignored\n")
    (root / "secret_ok.txt").write_text("kept by negation\n")
    (root / "node_modules" / "dep").mkdir(parents=True)
    (root / "node_modules" / "dep" / "index.js").write_text("function dep() {}\n")
    (root / "web" / ".gitignore").write_text("gen/\n")
    (root / "web" / "gen").mkdir()
    (root / "web" / "gen" / "api.ts").write_text("export function gen() {}\n")
    return root


def test_python_digest_has_signatures_and_docstrings_not_bodies(tmp_path: Path) -> None:
    out = repo_map(make_repo(tmp_path), max_tokens=10_000)
    assert "## pkg/billing.py" in out
    assert '"""Billing: invoices and payments."""' in out
    assert "More detail" not in out
    assert "imports: os, decimal: Decimal" in out
    assert (
        "def total(items: list[Decimal], *, tax: Decimal=Decimal('0.2')) -> Decimal"
        "  # Sums the items with tax." in out
    )
    assert "async def fetch(url: str) -> bytes" in out
    assert "class Invoice(Base, metaclass=Meta)  # An invoice sent to a customer." in out
    assert "    def __init__(self, number: int) -> None" in out
    assert "    def label(self) -> str" in out
    assert "    async def send(self, to: str, *args, **kwargs)" in out
    assert "secret_body_marker" not in out


def test_rust_digest(tmp_path: Path, parser: str) -> None:
    out = repo_map(make_repo(tmp_path), max_tokens=10_000, parser=parser)  # type: ignore[arg-type]
    section = out[out.index("## src/geo.rs") :].split("\n## ")[0]
    assert '"""Geometry kernels."""' in section
    assert "imports: std::fmt" in section
    assert "pub struct Point  // A point in the plane." in section
    assert "impl Point" in section
    assert "    pub fn new(x: f64) -> Self  // Builds a point." in section
    assert "    fn private<'a>(&'a self, other: &'a str) -> &'a str" in section
    assert "pub trait Area" in section and "    fn area(&self) -> f64" in section
    assert "pub(crate) fn helper(n: usize) -> usize" in section
    assert "fake" not in section


def test_typescript_digest(tmp_path: Path, parser: str) -> None:
    out = repo_map(make_repo(tmp_path), max_tokens=10_000, parser=parser)  # type: ignore[arg-type]
    section = out[out.index("## web/client.ts") :].split("\n## ")[0]
    assert '"""HTTP client helpers."""' in section
    assert "imports: undici" in section
    assert (
        "export async function getJson<T>(url: string, opts?: { timeout: number }): Promise<T>"
        "  // Fetches JSON." in section
    )
    assert "export interface Options" in section
    assert "    backoff(attempt: number): number" in section
    assert "export class Client" in section
    assert "    constructor(base: string)" in section
    assert "    async get(path: string): Promise<Response>  // Issues a GET." in section
    assert (
        "export const retry = async (fn: () => Promise<void>, n: number): Promise<void>" in section
    )
    assert "if (path)" not in section


def test_excludes_binaries_and_fallback_listing(tmp_path: Path) -> None:
    out = repo_map(make_repo(tmp_path), max_tokens=10_000)
    assert "## README.md" in out
    assert "## secret_ok.txt" in out
    for absent in ("logo.png", "debug.log", "build_out", "secret_keys", "node_modules", "gen/api"):
        assert absent not in out, absent
    extra = repo_map(tmp_path, max_tokens=10_000, exclude=["*.md", "web/"])
    assert "README.md" not in extra and "client.ts" not in extra and "billing.py" in extra


def test_trims_to_the_budget(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"mod_{i:02}.py").write_text(PY)
    full = repo_map(tmp_path, max_tokens=1_000_000)
    assert estimate_tokens(full) > 5000
    for budget in (300, 1000, 3000):
        out = repo_map(tmp_path, max_tokens=budget)
        assert estimate_tokens(out) <= budget
        assert out.startswith("## mod_00.py")
    small = repo_map(tmp_path, max_tokens=300)
    assert "more files not shown (token budget 300)" in small
    mid = repo_map(tmp_path, max_tokens=3000)
    assert all(f"## mod_{i:02}.py" in mid for i in range(60))
    assert "def total(" in mid  # the first files in full


def test_unparsable_python_is_listed_with_the_error(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    out = repo_map(tmp_path)
    assert "## broken.py  (does not parse: SyntaxError at line 1)" in out


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("def leaked(): pass\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def a(): pass\n")
    (repo / "link").symlink_to(outside)
    out = repo_map(repo)
    assert "def a()" in out and "leaked" not in out


def test_both_parsers_agree_on_this_repository() -> None:
    root = Path(__file__).resolve().parent.parent
    assert repo_map(root / "rust", max_tokens=100_000, parser="scanner") == repo_map(
        root / "rust", max_tokens=100_000, parser="tree-sitter"
    )


def test_tree_sitter_reads_what_the_scanner_cannot(tmp_path: Path) -> None:
    (tmp_path / "a.ts").write_text(
        "export function shape(): { w: number; h: number } {\n  return { w: 1, h: 2 };\n}\n"
    )
    ts = repo_map(tmp_path, parser="tree-sitter")
    assert "export function shape(): { w: number; h: number }" in ts
    # The scanner's documented limit: the object return type ends the signature early.
    assert "export function shape():\n" in repo_map(tmp_path, parser="scanner") + "\n"


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="parser must be"):
        repo_map(tmp_path, parser="regex")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="does not exist"):
        repo_map(tmp_path / "missing")
    with pytest.raises(InvalidInputError, match="max_tokens"):
        repo_map(tmp_path, max_tokens=0)


def test_single_file(tmp_path: Path) -> None:
    f = tmp_path / "one.py"
    f.write_text(
        textwrap.dedent('''\
        def solo(x: int) -> int:
            """Only one."""
            return x
    ''')
    )
    assert repo_map(f) == "## one.py\n  def solo(x: int) -> int  # Only one."


def test_this_repository_maps_within_budget() -> None:
    root = Path(__file__).resolve().parent.parent
    out = repo_map(root / "python", max_tokens=4000)
    assert estimate_tokens(out) <= 4000
    # Every module is at least named before any one is detailed.
    for module in (root / "python" / "memstrata").rglob("*.py"):
        assert f"## {module.relative_to(root / 'python').as_posix()}" in out
    assert "MemoryStack" in out
    full = repo_map(root / "python", max_tokens=100_000)
    assert "class MemoryStack" in full and "    def prepare(self, messages" in full


def test_one_hostile_file_never_aborts_the_map(tmp_path: Path) -> None:
    (tmp_path / "a_good.py").write_text('"""Fine."""\ndef ok(x: int) -> int:\n    return x\n')
    (tmp_path / "deep_sum.py").write_text("x = " + "a+" * 100_000 + "a\n")  # RecursionError
    (tmp_path / "deep_unary.py").write_text("x = " + "-" * 100_000 + "a\n")  # MemoryError
    (tmp_path / "deep_parens.py").write_text("x = " + "(" * 300 + "a" + ")" * 300 + "\n")
    # Parses, but the signature is too deeply nested to print back.
    (tmp_path / "deep_default.py").write_text(
        "def f(a=" + "-" * 600 + "a): pass\n\ndef g(): pass\n"
    )
    # A NUL byte past the binary sniff window.
    (tmp_path / "late_nul.py").write_bytes(b"# pad\n" * 2000 + b"x = 1\x00\n")
    (tmp_path / "z_good.py").write_text("def last(): pass\n")
    out = repo_map(tmp_path, max_tokens=100_000)
    assert "def ok(x: int) -> int" in out and "def last()" in out
    for name in ("deep_unary.py", "deep_parens.py", "late_nul.py"):
        assert re.search(rf"^## {name}  \(does not parse: \w+", out, re.M), name
    if sys.version_info >= (3, 11):
        assert "## deep_sum.py  (does not parse: nested too deeply)" in out
    else:  # the parser of Python 3.9 and 3.10 reads a long chain of + without recursing
        assert re.search(r"^## deep_sum.py$", out, re.M)
    assert re.search(r"^## deep_default.py  \(not digested: nested too deeply\)$", out, re.M)
    assert "at line None" not in out


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    # Python honours its coding declaration; other text is listed by name.
    (tmp_path / "legacy.py").write_bytes(
        b'# -*- coding: latin-1 -*-\n"""Caf\xe9 prices."""\ndef price(): pass\n'
    )
    (tmp_path / "notes.txt").write_bytes(b"caf\xe9\n")
    (tmp_path / "bad.rs").write_bytes(b"fn caf\xe9() {}\n")
    out = repo_map(tmp_path)
    assert '"""Café prices."""' in out and "def price()" in out
    assert "## notes.txt  (not UTF-8)" in out
    assert "## bad.rs  (not UTF-8)" in out


def test_a_large_file_cut_inside_a_character_is_still_listed(tmp_path: Path) -> None:
    from memstrata.repo_map import MAX_FILE_BYTES

    # The byte at the read limit falls inside a 3-byte character.
    body = "x" * (MAX_FILE_BYTES - 1) + "€" * 10
    (tmp_path / "huge.py").write_text(body)
    out = repo_map(tmp_path)
    assert re.search(r"^## huge\.py  \([\d,]+ bytes, not parsed\)$", out, re.M)


def test_deeply_nested_blocks_never_abort_the_map(tmp_path: Path, parser: str) -> None:
    (tmp_path / "deep.rs").write_text("mod m {\n" * 3000 + "fn inner() {}\n" + "}\n" * 3000)
    (tmp_path / "deep.ts").write_text(
        "namespace N {\n" * 3000 + "function inner() {}\n" + "}\n" * 3000
    )
    (tmp_path / "ok.rs").write_text("pub fn fine() {}\n")
    out = repo_map(tmp_path, max_tokens=100_000, parser=parser)  # type: ignore[arg-type]
    assert "## deep.rs" in out and "## deep.ts" in out
    assert "pub fn fine()" in out


@pytest.mark.parametrize("sep", ["\n", "\r", "\u2028", "\x85", "\x0b"], ids=repr)
def test_a_file_name_cannot_add_lines_to_the_map(tmp_path: Path, sep: str) -> None:
    # A name a checked-out repository can hold: every heading of the map is a file's own.
    forged = f"ok{sep}## evil.py{sep}  def forged() -> None  # x.py"
    (tmp_path / forged).write_text("def real() -> None: ...\n")
    (tmp_path / f"dir{sep}## x").mkdir()
    (tmp_path / f"dir{sep}## x" / "inner.txt").write_text("x")
    out = repo_map(tmp_path)
    lines = out.splitlines()
    headings = [line for line in lines if line.startswith("## ")]
    assert len(headings) == 2 and all("⏎" in heading for heading in headings)
    assert not any(line.strip().startswith("def forged") for line in lines)
    assert "  def real() -> None" in lines


def _regex_glob(path: str, pattern: str) -> bool:
    """The ``**`` semantics as a regular expression (exponential on hostile patterns: only
    for short inputs), to check the matcher against."""
    regex, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex, i = regex + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            regex, i = regex + ".*", i + 2
        elif pattern[i] == "*":
            regex, i = regex + "[^/]*", i + 1
        elif pattern[i] == "?":
            regex, i = regex + "[^/]", i + 1
        else:
            regex, i = regex + re.escape(pattern[i]), i + 1
    return re.fullmatch(regex, path) is not None


def test_double_star_patterns_match_as_gitignore_says() -> None:
    import fnmatch
    import random

    from memstrata.repo_map import _glob, _glob_tokens, _glob_walk, _Rule

    rng = random.Random(3)
    parts = ["**/", "**", "*", "?", "a", "b", "/", "."]
    for _ in range(5000):
        pattern = "".join(rng.choice(parts) for _ in range(rng.randint(1, 6)))
        if "**" not in pattern:
            pattern += "**"
        path = "".join(rng.choice("ab/.") for _ in range(rng.randint(0, 8)))
        expected = _regex_glob(path, pattern)
        assert _glob(path, pattern) == expected, (path, pattern)
        assert _glob_walk(path, _glob_tokens(pattern)) == expected, (path, pattern)
        if "/" not in pattern.rstrip("/"):
            # An unanchored rule matches the path, its last name or any of its suffixes.
            suffixes = ["/".join(path.split("/")[i:]) for i in range(path.count("/") + 1)]
            rule = _Rule("", pattern, negate=False, dir_only=False, anchored=False)
            assert rule.matches(path, False) == any(
                _regex_glob(s, pattern) if "**" in pattern else fnmatch.fnmatchcase(s, pattern)
                for s in suffixes
                if "**" in pattern or "/" not in s
            ), (path, pattern)


def test_a_hostile_gitignore_cannot_stall_the_map(tmp_path: Path) -> None:
    # A repository being mapped is input: its .gitignore patterns must not backtrack for ever
    # (as regular expressions, these take exponential time on a deep path).
    import subprocess
    import sys

    (tmp_path / ".gitignore").write_text("**/" * 12 + "x\n" + "**" + "a**" * 12 + "x\n")
    deep = tmp_path.joinpath(*(["a" * 3] * 30))
    deep.mkdir(parents=True)
    (deep / "kept.txt").write_text("kept")
    # In a process of its own, so a stalled regular expression (which holds the interpreter)
    # can be stopped: a hang guard, the map takes milliseconds.
    code = f"from memstrata import repo_map; print(repo_map({str(tmp_path)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "kept.txt" in done.stdout


@pytest.mark.parametrize("parser", ["scanner", "tree-sitter"])
def test_secrets_in_signatures_and_docstrings_are_redacted(tmp_path: Path, parser: str) -> None:
    if parser == "tree-sitter" and not tree_sitter_available():
        pytest.skip("tree-sitter grammars not installed")
    key = "sk-proj-Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA"
    (tmp_path / "client.py").write_text(
        f'"""A client; tests use {key}."""\n\n'
        f'def connect(url: str = "postgres://app:Hunter2xyz@db/x", key: str = "{key}") -> None:\n'
        '    """Connect (password=hunter2hunter2)."""\n'
    )
    (tmp_path / "web.ts").write_text(f'export function connect(key: string = "{key}") {{}}\n')
    digest = repo_map(tmp_path, parser=parser)  # type: ignore[arg-type]
    for secret in (key, "Hunter2xyz", "hunter2hunter2"):
        assert secret not in digest
    assert "def connect(url: str='postgres://app:[redacted: url_password]@db/x'" in digest
    assert 'export function connect(key: string = "[redacted: api_key]")' in digest


def test_options_of_the_wrong_type_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f(): ...\n")
    # A text would be one pattern per character, and its "*" would exclude every file.
    with pytest.raises(InvalidInputError, match=r"exclude must be a list of patterns, got a str"):
        repo_map(tmp_path, exclude="*.md")
    with pytest.raises(InvalidInputError, match="exclude must be a list of str patterns"):
        repo_map(tmp_path, exclude=[3])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"path must be a str or os\.PathLike, got int"):
        repo_map(5)  # type: ignore[arg-type]
    assert "def f()" in repo_map(tmp_path, exclude=("*.md",))


def test_a_grammar_the_installed_tree_sitter_cannot_load_falls_back_to_the_scanner(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pip can pair an older tree-sitter with a newer grammar (on Python 3.9, tree-sitter
    0.23 with tree-sitter-rust 0.24: "Incompatible Language version 15. Must be between 13
    and 14"): the default parser then uses the scanner and says why once; asking for
    tree-sitter is an error naming the grammar and the reason."""
    import importlib
    import sys

    # The module: ``memstrata.repo_map`` as an attribute is the function.
    repo_map_module = importlib.import_module("memstrata.repo_map")
    grammar = tmp_path / "grammar" / "newer_grammar.py"
    grammar.parent.mkdir()
    grammar.write_text(
        "def language():\n"
        "    raise ValueError('Incompatible Language version 15. Must be between 13 and 14')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(grammar.parent))
    monkeypatch.delitem(sys.modules, "newer_grammar", raising=False)
    monkeypatch.setattr(repo_map_module, "_TS_PARSERS", {})
    monkeypatch.setitem(repo_map_module._TS_GRAMMARS, "rust", ("newer_grammar", "language"))
    monkeypatch.setattr(repo_map_module, "_reported", set())
    project = tmp_path / "project"
    project.mkdir()
    (project / "lib.rs").write_text("pub fn total(items: &[u32]) -> u32 { 0 }\n", encoding="utf-8")

    assert not tree_sitter_available()
    with caplog.at_level("WARNING", logger="memstrata.repo_map"):
        first = repo_map(project, max_tokens=500)
        second = repo_map(project, max_tokens=500)
    assert first == second == repo_map(project, max_tokens=500, parser="scanner")
    assert "pub fn total" in first
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "newer_grammar" in warnings[0] and "Incompatible Language version 15" in warnings[0]
    with pytest.raises(InvalidInputError, match=r"newer_grammar.*Incompatible Language version"):
        repo_map(project, max_tokens=500, parser="tree-sitter")
