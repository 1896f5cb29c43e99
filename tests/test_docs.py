"""Every Python code block in README.md and docs/*.md runs, as written.

A file's ```python blocks run in order in one namespace (a block may use what an earlier block
of the same file defined), with a fresh temporary directory as the working directory, so SQLite
files and other files the examples write land there. Shell blocks are not run.

Two HTML comments, on the line right before a block's opening fence, change that:

* ``<!-- not run: <reason> -->`` skips the block (it needs an API key, a network service, a
  PostgreSQL server...). Keep these few: ``test_blocks_not_run_are_few`` counts them.
* ``<!-- needs: fastapi, httpx -->`` runs the block only when those modules import (they come
  with an optional extra), and skips the rest of the file otherwise.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC_FILES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
MAX_NOT_RUN = 8

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\s]*)[^`]*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->$")
_NEEDS = re.compile(r"^<!--\s*needs:\s*(?P<modules>[\w., ]+?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: pathlib.Path
    line: int  # of the opening fence, 1-based
    info: str  # the fence's language tag
    code: str
    not_run: str | None  # the reason given, if it is marked not to run
    needs: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: pathlib.Path) -> list[Block]:
    """The fenced blocks of ``path``, with the marker on the line before each, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: unclosed code block")
        before = lines[start - 1].strip() if start else ""
        not_run = _NOT_RUN.match(before)
        needs = _NEEDS.match(before)
        indent = len(opening.group("indent"))
        body = [line[indent:] for line in lines[start + 1 : end]]
        found.append(
            Block(
                path,
                start + 1,
                opening.group("info").lower(),
                "\n".join(body) + "\n",
                not_run.group("reason") if not_run else None,
                tuple(m.strip() for m in needs.group("modules").split(",")) if needs else (),
            )
        )
        index = end + 1
    return found


def python_blocks(path: pathlib.Path) -> list[Block]:
    return [b for b in blocks_of(path) if b.info == "python"]


def _id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", DOC_FILES, ids=_id)
def test_python_blocks_run(
    path: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs the file's Python blocks in order, in one namespace, in a temporary directory."""
    monkeypatch.chdir(tmp_path)
    # The examples rely on the documented default store (a SQLite file in the working directory).
    monkeypatch.delenv("MEMSTRATA_STORE", raising=False)
    # A block may register model windows (process-wide); later tests must not see them.
    from memstrata import model_windows

    monkeypatch.setattr(model_windows, "_user_windows", dict(model_windows._user_windows))
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in python_blocks(path):
        if block.not_run is not None:
            compile(block.code, block.where, "exec")  # still valid Python
            continue
        missing = [m for m in block.needs if importlib.util.find_spec(m) is None]
        if missing:
            pytest.skip(f"{block.where} needs {', '.join(missing)}")
        try:
            exec(compile(block.code, block.where, "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the block at {block.where} failed: {exc!r}") from exc


def test_every_code_block_is_tagged_with_its_language() -> None:
    """An untagged or ```py block would silently escape the run above."""
    allowed = {"python", "sh", "bash", "console", "text", "json", "toml", "yaml", "sql"}
    for path in DOC_FILES:
        for block in blocks_of(path):
            assert block.info in allowed, f"{block.where}: code block tagged {block.info!r}"


def test_markers_sit_right_before_a_python_block() -> None:
    """A marker separated from its block by a blank line would be ignored: refuse it."""
    for path in DOC_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if _NOT_RUN.match(line.strip()) or _NEEDS.match(line.strip()):
                following = lines[number] if number < len(lines) else ""
                assert following.startswith("```python"), (
                    f"{_id(path)}:{number}: a marker must be followed by a ```python fence"
                )


def test_blocks_not_run_are_few() -> None:
    not_run = [b.where for p in DOC_FILES for b in python_blocks(p) if b.not_run is not None]
    assert len(not_run) <= MAX_NOT_RUN, not_run
    assert sum(len(python_blocks(p)) for p in DOC_FILES) > 3 * len(not_run)


def test_links_to_files_resolve() -> None:
    """Relative links in the docs point at files that exist."""
    link = re.compile(r"\]\((?!https?://|mailto:|#)(?P<target>[^)\s#]+)(?:#[^)]*)?\)")
    for path in DOC_FILES:
        for match in link.finditer(path.read_text(encoding="utf-8")):
            target = (path.parent / match.group("target")).resolve()
            assert target.exists(), f"{_id(path)}: broken link to {match.group('target')}"


def test_docs_name_the_systems_and_keep_no_history() -> None:
    """The docs speak of the project as it is: systems by name, no paths outside the repo, no
    development diary."""
    banned = re.compile(
        r"\.\./shared|\bseed(?:'s|s)?\b|\bstop \d+\b|\bround \d+\b"
        r"|tried and dropped|\b[0-9a-f]{7,40}\b(?= \()",
        re.IGNORECASE,
    )
    for path in [*DOC_FILES, ROOT / "SECURITY.md"]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = banned.search(line)
            assert found is None, f"{_id(path)}:{number}: {found.group(0)!r} in {line.strip()!r}"


def test_readme_is_the_package_description() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^readme = "README.md"$', pyproject, re.MULTILINE)
