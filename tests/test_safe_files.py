"""safe_files: the primitives every layer reaches files through (descriptors, no follow, no
block, one link, temp file + rename), on this platform and in the path-only fallback used where
there are no directory descriptors (Windows)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata import safe_files
from memstrata.exceptions import InvalidInputError
from memstrata.safe_files import (
    Dir,
    append_regular,
    open_dir,
    open_lock_file,
    open_subdir,
    read_regular,
    write_atomic,
    write_new,
)

OUTSIDE = b"outside bytes"
KINDS = ("symlink", "hardlink", "fifo", "directory")


@pytest.fixture(params=["descriptors", "paths"])
def directory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dir]:
    """The directory ``d`` opened by descriptor, and as the path-only fallback."""
    (tmp_path / "d").mkdir()
    if request.param == "descriptors":
        if not safe_files.DIR_FDS:
            pytest.skip("no dir_fd on this platform")
        with open_dir(tmp_path / "d") as opened:
            yield opened
    else:
        yield Dir(tmp_path / "d", None)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside.bin"
    path.write_bytes(OUTSIDE)
    path.chmod(0o640)
    return path


def _plant(path: Path, kind: str, outside: Path) -> None:
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "hardlink":
        os.link(outside, path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _untouched(outside: Path) -> None:
    assert outside.read_bytes() == OUTSIDE
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o640


def _returns(call, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    done: list[object] = []

    def target() -> None:
        try:
            done.append(call())
        except BaseException as exc:
            done.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert done, "the call hung"
    return done[0]


def test_the_module_imports_without_posix_flags() -> None:
    # What Windows lacks is looked up with getattr, never required.
    assert isinstance(safe_files.DIR_FDS, bool)
    for flag in ("_NOFOLLOW", "_NONBLOCK", "_DIRECTORY", "_CLOEXEC", "_BINARY"):
        assert isinstance(getattr(safe_files, flag), int)


def test_read_regular_reads_a_regular_file(directory: Dir) -> None:
    (directory.path / "f").write_bytes(b"data")
    data, info = read_regular(directory, "f")
    assert data == b"data" and info.st_nlink == 1
    with pytest.raises(FileNotFoundError):
        read_regular(directory, "missing")
    with pytest.raises(InvalidInputError, match="over 2 bytes"):
        read_regular(directory, "f", 2)


def replacing_at_fstat(
    monkeypatch: pytest.MonkeyPatch, directory: Dir, name: str, times: int
) -> list[bytes]:
    """Makes the next ``times`` opens of ``name`` see it replaced between the open and the
    check (a writer renaming a new file over it, as another process or thread does); returns
    what each replacement wrote."""
    real_fstat = os.fstat
    written: list[bytes] = []

    def fstat(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        current = directory.lstat(name)
        if len(written) < times and current is not None and current.st_ino == info.st_ino:
            written.append(f"version {len(written) + 2}".encode())
            write_atomic(directory, name, written[-1])
        return info

    monkeypatch.setattr(os, "fstat", fstat)
    return written


def test_read_regular_reads_the_file_a_writer_renamed_over_it_while_it_opened(
    directory: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not refused as planted: opened again, and read whole."""
    write_atomic(directory, "f", b"version 1")
    written = replacing_at_fstat(monkeypatch, directory, "f", times=2)
    assert read_regular(directory, "f")[0] == b"version 3"
    assert written == [b"version 2", b"version 3"]


def test_read_regular_gives_up_on_a_name_replaced_at_every_open(
    directory: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_atomic(directory, "f", b"version 1")
    replacing_at_fstat(monkeypatch, directory, "f", times=100)
    with pytest.raises(InvalidInputError, match="replaced while being opened"):
        read_regular(directory, "f")


@pytest.mark.parametrize("kind", KINDS)
def test_read_regular_refuses_what_is_planted(directory: Dir, outside: Path, kind: str) -> None:
    _plant(directory.path / "f", kind, outside)
    raised = _returns(lambda: read_regular(directory, "f"))
    assert isinstance(raised, InvalidInputError), raised
    assert "refusing" in str(raised)
    _untouched(outside)


def test_read_regular_accepts_links_only_when_asked(directory: Dir, outside: Path) -> None:
    _plant(directory.path / "f", "hardlink", outside)
    assert read_regular(directory, "f", links=True)[0] == OUTSIDE


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
def test_write_atomic_replaces_what_is_planted_never_writes_through(
    directory: Dir, outside: Path, kind: str
) -> None:
    _plant(directory.path / "f", kind, outside)
    assert _returns(lambda: write_atomic(directory, "f", b"new", mode=0o600)) is None
    _untouched(outside)
    info = os.lstat(directory.path / "f")
    assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert (directory.path / "f").read_bytes() == b"new"
    assert sorted(p.name for p in directory.path.iterdir()) == ["f"]  # no temp file left


@pytest.mark.parametrize("kind", KINDS)
def test_write_new_takes_the_next_free_name_never_what_is_planted(
    directory: Dir, outside: Path, kind: str
) -> None:
    _plant(directory.path / "f", kind, outside)
    assert write_new(directory, ["f", "f~2", "f~3"], b"new", mode=0o600) == "f~2"
    _untouched(outside)
    info = os.lstat(directory.path / "f~2")
    assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert (directory.path / "f~2").read_bytes() == b"new"
    assert sorted(p.name for p in directory.path.iterdir()) == ["f", "f~2"]  # no temp left


def test_write_new_never_replaces_a_file(directory: Dir) -> None:
    assert write_new(directory, ["f", "f~2"], b"first") == "f"
    assert write_new(directory, ["f", "f~2"], b"second") == "f~2"
    assert write_new(directory, ["f", "f~2"], b"third") is None
    assert (directory.path / "f").read_bytes() == b"first"
    assert (directory.path / "f~2").read_bytes() == b"second"
    assert sorted(p.name for p in directory.path.iterdir()) == ["f", "f~2"]


def test_write_new_where_the_file_system_has_no_hard_links(
    directory: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: object, **kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    (directory.path / "f").write_bytes(b"first")
    assert write_new(directory, ["f", "f~2"], b"second", mode=0o600) == "f~2"
    assert (directory.path / "f").read_bytes() == b"first"
    assert (directory.path / "f~2").read_bytes() == b"second"
    assert stat.S_IMODE(os.lstat(directory.path / "f~2").st_mode) == 0o600
    assert sorted(p.name for p in directory.path.iterdir()) == ["f", "f~2"]


def test_write_atomic_never_truncates_the_old_file(directory: Dir) -> None:
    """A reader holding the old file keeps reading it whole: the name is renamed over, the old
    inode is never truncated."""
    (directory.path / "f").write_bytes(b"old contents")
    with open(directory.path / "f", "rb") as held:
        write_atomic(directory, "f", b"new")
        assert held.read() == b"old contents"
    assert (directory.path / "f").read_bytes() == b"new"


def test_write_atomic_sets_the_mode_whatever_the_umask(directory: Dir) -> None:
    old = os.umask(0o777)
    try:
        write_atomic(directory, "f", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(directory.path / "f").st_mode) == 0o644


@pytest.mark.parametrize("kind", KINDS)
def test_append_regular_refuses_what_is_planted(directory: Dir, outside: Path, kind: str) -> None:
    _plant(directory.path / "log", kind, outside)
    raised = _returns(lambda: append_regular(directory, "log", b"line\n"))
    assert isinstance(raised, InvalidInputError), raised
    _untouched(outside)


def test_append_regular_creates_then_appends(directory: Dir) -> None:
    append_regular(directory, "log", b"one\n")
    append_regular(directory, "log", b"two\n")
    assert (directory.path / "log").read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(os.lstat(directory.path / "log").st_mode) == 0o600


@pytest.mark.parametrize("kind", KINDS)
def test_open_lock_file_refuses_what_is_planted(directory: Dir, outside: Path, kind: str) -> None:
    _plant(directory.path / "lock", kind, outside)
    raised = _returns(lambda: open_lock_file(directory, "lock"))
    assert isinstance(raised, InvalidInputError), raised
    _untouched(outside)


def test_open_subdir_creates_private_and_refuses_a_symlink(directory: Dir, tmp_path: Path) -> None:
    with open_subdir(directory, "sub") as sub:
        write_atomic(sub, "f", b"x")
    assert stat.S_IMODE(os.lstat(directory.path / "sub").st_mode) == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (directory.path / "link").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InvalidInputError, match="symlink"):
        open_subdir(directory, "link")
    os.mkfifo(directory.path / "fifo")
    with pytest.raises(InvalidInputError, match="FIFO"):
        raise _returns(lambda: open_subdir(directory, "fifo"))
    with pytest.raises(FileNotFoundError):
        open_subdir(directory, "missing", create=False)
    assert list(elsewhere.iterdir()) == []


def test_open_dir_refuses_a_file_and_follows_the_configured_symlink(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="not a directory"):
        open_dir(tmp_path / "file")
    with pytest.raises(FileNotFoundError):
        open_dir(tmp_path / "missing")
    (tmp_path / "real").mkdir()
    (tmp_path / "configured").symlink_to(tmp_path / "real", target_is_directory=True)
    with open_dir(tmp_path / "configured") as opened:
        write_atomic(opened, "f", b"x")
    assert (tmp_path / "real" / "f").read_bytes() == b"x"


def test_a_directory_under_a_file_is_refused_naming_the_file_above(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InvalidInputError, match="a-file exists and is not a directory"):
        safe_files.make_directory(tmp_path / "a-file")
    with pytest.raises(InvalidInputError, match="sub: a directory above it is a file"):
        safe_files.make_directory(tmp_path / "a-file" / "sub")


def test_path_mode_write_waits_out_a_reader_holding_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows (the path-only mode) a rename over a file another process holds open fails
    with PermissionError until it closes it: readers of a team state read without the lock,
    for microseconds. The write tries again for a while instead of failing the record."""
    (tmp_path / "d").mkdir()
    directory = Dir(tmp_path / "d", None)
    write_atomic(directory, "state.json", b"old")
    real_replace = os.replace
    refusals = iter([True, True, True])

    def replace_while_held(src: Any, dst: Any, **kw: Any) -> None:
        if next(refusals, False):
            raise PermissionError(13, "The process cannot access the file")
        real_replace(src, dst, **kw)

    monkeypatch.setattr(safe_files.os, "replace", replace_while_held)
    write_atomic(directory, "state.json", b"new")
    assert (tmp_path / "d" / "state.json").read_bytes() == b"new"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["state.json"]  # no temp file left

    def always_held(src: Any, dst: Any, **kw: Any) -> None:
        raise PermissionError(13, "The process cannot access the file")

    monkeypatch.setattr(safe_files.os, "replace", always_held)
    monkeypatch.setattr(safe_files, "RENAME_PATIENCE_S", 0.05)
    with pytest.raises(InvalidInputError, match=r"cannot write .*state\.json"):
        write_atomic(directory, "state.json", b"newer")
    assert (tmp_path / "d" / "state.json").read_bytes() == b"new"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["state.json"]


def test_the_directories_swept_are_not_all_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server writing into a directory per thread, for ever more threads, must not keep one
    entry per directory it ever swept."""
    monkeypatch.setattr(safe_files, "_swept", set())
    monkeypatch.setattr(safe_files, "_SWEPT_KEPT", 3)
    for i in range(10):
        (tmp_path / f"d{i}").mkdir()
        with open_dir(tmp_path / f"d{i}") as directory:
            write_atomic(directory, "f", b"x")
        assert len(safe_files._swept) <= 3


def test_remove_tree_takes_what_changes_while_it_removes(
    directory: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server erasing the same user removes entries after they were listed, and a run
    still writing adds some: neither stops the removal nor raises (ENOENT, ENOTEMPTY)."""
    tree = directory.path / "user"
    (tree / "a").mkdir(parents=True)
    for name in ("x", "y", "z"):
        (tree / "a" / name).write_text(name)
    (tree / "b").write_text("b")
    listed = Dir.names
    raced = []

    def racing(self: Dir) -> list[str]:
        names = listed(self)
        if self.path == tree / "a" and not raced:
            raced.append(True)
            (self.path / "x").unlink()  # erased by the other server once listed
            (self.path / "new").write_text("written by a run meanwhile")
            (tree / "late").write_text("written by a run meanwhile")
        return names

    monkeypatch.setattr(Dir, "names", racing)

    assert safe_files.remove_tree(directory, "user") == 5  # y, z, new, b, late
    assert not tree.exists()
    assert safe_files.remove_tree(directory, "user") == 0


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_remove_tree_removes_a_junction_without_entering_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows, lstat shows a directory junction (which needs no privilege to create) as a
    directory, with its reparse tag: the path-only removal must remove the junction, never what
    it points to. Simulated with a symlink that lstat reports as Windows does."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the library's")
    (tmp_path / "d" / "user").mkdir(parents=True)
    (tmp_path / "d" / "user" / "junction").symlink_to(outside, target_is_directory=True)
    real_lstat = Dir.lstat

    class AsWindowsShowsAJunction:
        st_mode = stat.S_IFDIR | 0o777
        st_reparse_tag = 0xA0000003  # IO_REPARSE_TAG_MOUNT_POINT

    def lstat(self: Dir, name: str) -> Any:
        info = real_lstat(self, name)
        if info is not None and stat.S_ISLNK(info.st_mode):
            return AsWindowsShowsAJunction()
        return info

    monkeypatch.setattr(Dir, "lstat", lstat)

    assert safe_files.remove_tree(Dir(tmp_path / "d", None), "user") == 1
    assert (outside / "keep.txt").read_text() == "not the library's"
    assert not (tmp_path / "d" / "user").exists()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_remove_tree_never_follows_a_directory_swapped_for_a_symlink(
    directory: Dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory below swapped for a symlink to elsewhere after it was looked at: what the
    link points to is untouched (in the path-only mode too, where names are joined to paths),
    the link is removed, and the removal does not raise."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the library's")
    tree = directory.path / "user"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "f").write_text("the user's")
    listed = Dir.names

    def swapped_first(self: Dir) -> list[str]:
        if self.path == tree / "a" and not (tmp_path / "moved").exists():
            os.rename(tree / "a", tmp_path / "moved")
            (tree / "a").symlink_to(outside, target_is_directory=True)
        return listed(self)

    monkeypatch.setattr(Dir, "names", swapped_first)

    safe_files.remove_tree(directory, "user")

    assert (outside / "keep.txt").read_text() == "not the library's"
    assert not tree.exists()
