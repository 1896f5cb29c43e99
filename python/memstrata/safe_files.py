"""Files the layers write for the model and for audit: safe names, private modes, atomic writes,
all through directory descriptors.

Tool results, checkpoints and the team state document are files named after ids a model (or a
caller) supplied, in directories something else might write into too. Every file is reached
the same way:

* :func:`open_dir` opens the configured directory (trusted: a symlink there is followed) and
  :func:`open_subdir` each directory below it, relative to its parent's descriptor with
  ``O_NOFOLLOW``: a symlink planted in place of a subdirectory is refused.
* Files are opened relative to that descriptor with ``O_NOFOLLOW | O_NONBLOCK`` (a planted
  symlink fails the open, a planted FIFO cannot block it), then the *descriptor* is checked with
  ``fstat``: a regular file, with one link unless the caller accepts more (a hard link planted
  to a file elsewhere has two). As a link count read from the descriptor can drop after the
  open (the planted link removed again), an ``lstat`` of the name must then show the same inode
  with one link: one system call sees both, so a file linked from elsewhere never passes (a
  name a writer renamed another file over meanwhile is opened and checked again). What is read
  or appended is what was checked.
* Writes go to a new temp file (``O_CREAT | O_EXCL``, its mode set with ``fchmod`` on the
  descriptor), fsynced, then renamed over the name: never ``O_TRUNC`` on an existing path, never
  ``chmod`` by path. A rename replaces the directory entry, so whatever was planted under the
  name (a symlink, a hard link) is replaced, never written through. A write killed before its
  rename leaves its temp file (a dot-file); each process's first write into a directory
  removes those over an hour old.

:func:`check_file_id` refuses any id that could leave its directory.

Windows has no ``O_NOFOLLOW``, ``O_NONBLOCK`` nor ``dir_fd``: there a :class:`Dir` holds the
path only, names are joined to it, and the ``lstat``/``fstat`` checks still refuse what is not a
regular file (best effort: the check and the open are two steps).

Directories these functions create for private files are private too (0700). A directory that
already exists keeps its mode: it is the caller's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from memstrata.exceptions import InvalidInputError

MAX_FILE_ID = 128
# The longest stem an id may make once each ':' is written as '%3A' (file_name): a file name
# holds 255 bytes, and the stem gets a suffix ('~1000.json') and, for its temp file, a dot in
# front and '.<12 hex>.tmp' behind.
MAX_FILE_STEM = 200
_FILE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"{port}{n}" for port in ("COM", "LPT") for n in range(1, 10)]
)
PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
# How long a rename over a file another process holds open is tried again (Windows).
RENAME_PATIENCE_S = 2.0
# A write killed between creating its temp file and renaming it (SIGKILL, a power cut) leaves
# the temp file behind. One older than this is no write in progress: the first write of each
# process into its directory removes it (see _sweep_stale_temps).
STALE_TEMP_S = 3600.0
_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")
# The directories this process has swept, by path.
_swept: set[str] = set()
_SWEPT_KEPT = 10_000
# Whether files can be opened relative to a directory descriptor here (not on Windows).
DIR_FDS = (
    _DIRECTORY != 0
    and {os.open, os.mkdir, os.stat, os.rename, os.unlink, os.link} <= os.supports_dir_fd
)


def check_file_id(file_id: object, *, what: str = "call_id") -> str:
    """Returns ``file_id`` if it is safe as a file name stem, else raises.

    Allowed: 1 to 128 characters of ``A-Z a-z 0-9 _ . : -``, starting with a letter or digit,
    without ``..``, at most 200 once each ``:`` counts three (its file name writes ``%3A``),
    and not a Windows device name (``NUL``, ``con.log``). Separators, NUL,
    whitespace and anything else are refused, so the name can never leave its directory nor
    hide as a dot-file.

    Raises:
        InvalidInputError: Naming what was wrong with the id.
    """
    if not isinstance(file_id, str):
        raise InvalidInputError(f"{what} must be a string, got {type(file_id).__name__}")
    if not file_id:
        raise InvalidInputError(f"{what} is empty")
    if len(file_id) > MAX_FILE_ID:
        raise InvalidInputError(f"{what} is {len(file_id)} characters; the limit is {MAX_FILE_ID}")
    if "\x00" in file_id:
        raise InvalidInputError(f"{what} contains a NUL byte")
    if "/" in file_id or "\\" in file_id:
        raise InvalidInputError(f"{what} {file_id!r} contains a path separator")
    if ".." in file_id:
        raise InvalidInputError(f"{what} {file_id!r} contains '..'")
    if not _FILE_ID.fullmatch(file_id):
        raise InvalidInputError(
            f"{what} {file_id!r} has characters outside A-Z a-z 0-9 _ . : - "
            "or does not start with a letter or digit"
        )
    stem = len(file_id) + 2 * file_id.count(":")
    if stem > MAX_FILE_STEM:
        # Refused whether or not the id goes to a file, so an id is valid in every mode.
        raise InvalidInputError(
            f"{what} {file_id[:40]!r}... is {stem} characters as a file name (each ':' is "
            f"written as '%3A'); the limit is {MAX_FILE_STEM}"
        )
    if re.split(r"[.:]", file_id, maxsplit=1)[0].upper() in _WINDOWS_DEVICES:
        # Refused everywhere, so an id valid on one system is valid on all.
        raise InvalidInputError(
            f"{what} {file_id!r} is a device name on Windows (CON, PRN, AUX, NUL, COM1-9, "
            "LPT1-9), whatever follows its first '.' or ':'"
        )
    return file_id


def file_name(file_id: str, suffix: str, *, what: str = "call_id") -> str:
    """``<file_id><suffix>`` after :func:`check_file_id`: a name that stays in its directory.

    A ``:`` (tool-call ids such as ``functions.search:0``) is written as ``%3A``: on NTFS
    ``a:b.txt`` names the data stream ``b.txt`` of the file ``a``, so two ids would share one
    hidden file, and FAT refuses it. ``%`` is not allowed in an id, so the names of two ids
    never meet, and the name is the same on every system."""
    return check_file_id(file_id, what=what).replace(":", "%3A") + suffix


def file_names(file_id: str, suffix: str, *, what: str = "call_id") -> list[str]:
    """The names ``file_id`` may have been written under, newest first: :func:`file_name`,
    then, where the system allows it, the name with ``:`` kept as it is, so results stored
    under that name stay readable."""
    name = file_name(file_id, suffix, what=what)
    if ":" in file_id and os.name != "nt":
        return [name, file_id + suffix]
    return [name]


def make_directory(directory: Path, *, private: bool = True) -> None:
    """Creates ``directory`` (and its parents) if missing; a new one is 0700 when ``private``.

    Raises:
        InvalidInputError: The path exists but is not a directory, or cannot be created.
    """
    try:
        directory.mkdir(mode=PRIVATE_DIR_MODE if private else 0o777, parents=True, exist_ok=True)
    except FileExistsError:
        raise InvalidInputError(f"{directory} exists and is not a directory") from None
    except NotADirectoryError:
        raise InvalidInputError(
            f"cannot create {directory}: a directory above it is a file"
        ) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot create {directory}: {exc.strerror}") from None


# Directories ----------------------------------------------------------------------------------


class Dir:
    """An open directory: its descriptor (``fd``) where the platform opens files relative to
    one, else None and only its ``path``. Close it (or use it as a context manager)."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> Dir:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def lstat(self, name: str) -> os.stat_result | None:
        """What is under ``name`` itself (a symlink is not followed), or None for nothing."""
        try:
            if self.fd is not None:
                return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return os.lstat(self.path / name)
        except FileNotFoundError:
            return None

    def unlink(self, name: str) -> None:
        """Removes the entry ``name`` (a symlink itself, never its target)."""
        if self.fd is not None:
            os.unlink(name, dir_fd=self.fd)
        else:
            os.unlink(self.path / name)

    def rename(self, name: str, new_name: str) -> None:
        """Renames the entry ``name`` to ``new_name`` in this directory, replacing the entry
        there (never writing through it).

        Windows refuses to replace a file another process holds open (PermissionError): a
        reader reading without the lock holds one for microseconds, so the rename is tried
        again for up to ``RENAME_PATIENCE_S``."""
        if self.fd is not None:
            os.replace(name, new_name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            return
        deadline = time.monotonic() + RENAME_PATIENCE_S
        pause = 0.001
        while True:
            try:
                os.replace(self.path / name, self.path / new_name)
                return
            except PermissionError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def link(self, name: str, target: Dir, new_name: str) -> None:
        """Hard-links the entry ``name`` (never a symlink's target) as ``new_name`` in
        ``target``; fails if ``new_name`` exists."""
        if self.fd is not None and target.fd is not None:
            os.link(name, new_name, src_dir_fd=self.fd, dst_dir_fd=target.fd, follow_symlinks=False)
        else:
            os.link(self.path / name, target.path / new_name)

    def names(self) -> list[str]:
        """The names of the entries in this directory."""
        if self.fd is not None and os.listdir in os.supports_fd:
            return os.listdir(self.fd)
        return os.listdir(self.path)  # names only: what is done with them goes through fd

    def rmdir(self, name: str) -> None:
        """Removes the empty directory ``name``."""
        if self.fd is not None:
            os.rmdir(name, dir_fd=self.fd)
        else:
            os.rmdir(self.path / name)

    def _open(self, name: str, flags: int, mode: int = 0o777) -> int:
        if self.fd is not None:
            return os.open(name, flags, mode, dir_fd=self.fd)
        return os.open(self.path / name, flags, mode)


def open_dir(path: str | os.PathLike[str], *, create: bool = False, private: bool = True) -> Dir:
    """Opens the directory ``path`` (created first when ``create``, 0700 when ``private``).

    ``path`` itself is the caller's and trusted: a symlink there is followed.

    Raises:
        FileNotFoundError: ``path`` does not exist (and ``create`` is False).
        InvalidInputError: ``path`` is not a directory, or cannot be created or opened.
    """
    directory = Path(path)
    if create:
        make_directory(directory, private=private)
    if not DIR_FDS:
        if not directory.is_dir():
            if not directory.exists():
                raise FileNotFoundError(errno.ENOENT, "no such directory", str(directory))
            raise InvalidInputError(f"{directory} is not a directory")
        return Dir(directory, None)
    try:
        fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except FileNotFoundError:
        raise
    except NotADirectoryError:
        raise InvalidInputError(f"{directory} is not a directory") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot open {directory}: {exc.strerror}") from None
    return Dir(directory, fd)


def open_subdir(parent: Dir, name: str, *, create: bool = True) -> Dir:
    """Opens the directory ``name`` inside ``parent`` (created 0700 when missing and
    ``create``), never through a symlink planted under ``name``.

    Raises:
        FileNotFoundError: Nothing is under ``name`` (and ``create`` is False).
        InvalidInputError: A symlink or something other than a directory is under ``name``.
    """
    path = parent.path / name
    if create:
        try:
            if parent.fd is not None:
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=parent.fd)
            else:
                os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        except OSError as exc:
            raise InvalidInputError(f"cannot create {path}: {exc.strerror}") from None
    info = parent.lstat(name)
    if info is None:
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidInputError(f"{path} is {_kind(info)}; refusing to use it as a directory")
    if parent.fd is None:
        return Dir(path, None)
    try:
        fd = parent._open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        # Swapped for a symlink (ELOOP) or something else (ENOTDIR) since the lstat.
        raise InvalidInputError(
            f"{path} is a symlink or not a directory; refusing to use it ({exc.strerror})"
        ) from None
    if not stat.S_ISDIR(os.fstat(fd).st_mode):  # pragma: no cover - O_DIRECTORY ensures it
        os.close(fd)
        raise InvalidInputError(f"{path} is not a directory; refusing to use it")
    return Dir(path, fd)


def remove_tree(parent: Dir, name: str) -> int:
    """Deletes ``name`` in ``parent``: a directory with everything below it, each level opened
    relative to the one above, so a symlink planted anywhere below is removed as the link it
    is, never followed (so is a Windows directory junction, which ``lstat`` shows as a
    directory). Returns how many entries other than directories it removed (0 when nothing is
    under ``name``).

    What changes meanwhile does not stop it: an entry another remover took first is passed
    over, and a directory a writer added to is listed again, up to ``_REMOVE_PASSES`` times;
    what is still being written after that stays (the caller removes it again later)."""
    info = parent.lstat(name)
    if info is None:
        return 0
    if not stat.S_ISDIR(info.st_mode) or _is_junction(info):
        try:
            parent.unlink(name)  # a junction too: Python removes the link, not its target
        except FileNotFoundError:
            return 0
        return 1
    removed = 0
    for _ in range(_REMOVE_PASSES):
        try:
            directory = open_subdir(parent, name, create=False)
        except FileNotFoundError:
            return removed
        with directory:
            try:
                names = directory.names()
            except FileNotFoundError:  # path-only: removed since it was opened
                names = []
            for entry in names:
                if not _still_there(directory, info):
                    break
                removed += remove_tree(directory, entry)
        try:
            parent.rmdir(name)
        except FileNotFoundError:
            return removed
        except NotADirectoryError:
            # Swapped for a symlink (or a file) since it was looked at: removed as what it is.
            return removed + remove_tree(parent, name)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            continue  # written to since it was listed
        return removed
    return removed


# Listings of one directory remove_tree makes while writers keep adding to it.
_REMOVE_PASSES = 3
# What Windows' lstat reports as a directory junction's reparse tag.
_JUNCTION_TAG = getattr(stat, "IO_REPARSE_TAG_MOUNT_POINT", 0xA0000003)


def _is_junction(info: os.stat_result) -> bool:
    return getattr(info, "st_reparse_tag", 0) == _JUNCTION_TAG


def _still_there(directory: Dir, info: os.stat_result) -> bool:
    """Whether the path-only ``directory`` is still the directory ``info`` described, not a
    symlink or junction swapped in since (whose target the names joined to its path would
    reach). Narrows that window, cannot close it: the check and each use are two steps. A
    directory opened by descriptor is always the one that was opened."""
    if directory.fd is not None:
        return True
    try:
        now = os.lstat(directory.path)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(now.st_mode)
        and not _is_junction(now)
        and (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)
    )


# Files ----------------------------------------------------------------------------------------


def _kind(info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISREG(mode) and info.st_nlink > 1:
        return f"a regular file with {info.st_nlink} hard links"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def _refused(name: str, info: os.stat_result) -> InvalidInputError:
    if stat.S_ISREG(info.st_mode):
        what = f"is a regular file with {info.st_nlink} hard links (one was planted)"
    else:
        what = f"is {_kind(info)}, not a regular file"
    return InvalidInputError(f"{name} {what}; refusing to use it")


class _Replaced(InvalidInputError):
    """The name was given another file (or removed) between its open and its check."""


# Opens of a name that a writer's rename keeps replacing between the open and the check.
_OPENS = 3


def _checked_fd(directory: Dir, name: str, flags: int, mode: int, *, links: bool) -> int:
    """``name`` opened with ``flags | O_NOFOLLOW | O_NONBLOCK``, its descriptor checked to be a
    regular file (with one link unless ``links``).

    A name replaced between the open and the check is opened (and checked) again, up to
    ``_OPENS`` times: a writer renaming a new file over it (another process's, or a worker
    thread's in this one) is no planted file, and the reader gets the new one."""
    for _ in range(_OPENS - 1):
        with contextlib.suppress(_Replaced):
            return _checked_fd_once(directory, name, flags, mode, links=links)
    return _checked_fd_once(directory, name, flags, mode, links=links)


def _checked_fd_once(directory: Dir, name: str, flags: int, mode: int, *, links: bool) -> int:
    if directory.fd is None:
        # No O_NOFOLLOW here: refuse a symlink (or anything not regular) by lstat first.
        info = directory.lstat(name)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise _refused(name, info)
    try:
        fd = directory._open(name, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        # ELOOP: a symlink; ENXIO: a FIFO without a reader; EISDIR: a directory...
        info = directory.lstat(name)
        if info is None or stat.S_ISREG(info.st_mode):
            # Gone, or swapped back since the open failed: say why the open failed.
            raise InvalidInputError(f"{name} cannot be opened: {exc.strerror}") from None
        raise _refused(name, info) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_nlink > 1 and not links):
            raise _refused(name, info)
        if not links:
            # The fstat's link count can drop after the open (a planted hard link removed
            # again): one lstat sees the name and its inode's link count at the same instant.
            # The name must still be this file, and its one link.
            now = directory.lstat(name)
            if now is None or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                raise _Replaced(f"{name} was replaced while being opened; refusing it")
            if now.st_nlink > 1:
                raise _refused(name, now)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    directory: Dir, name: str, limit: int | None = None, *, links: bool = False
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``name`` in ``directory`` and its ``fstat``, never through
    a symlink, a FIFO, a directory or (unless ``links``) a file with more than one hard link.

    Raises:
        FileNotFoundError: Nothing is under ``name``.
        InvalidInputError: Something else than an acceptable regular file is there, or it holds
            more than ``limit`` bytes.
    """
    fd = _checked_fd(directory, name, os.O_RDONLY, 0, links=links)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if limit is None:
            return fh.read(), info
        data = fh.read(limit + 1)
        if len(data) > limit:
            raise InvalidInputError(f"{name} holds over {limit:,} bytes; refusing to read it")
        return data, info


def write_atomic(
    directory: Dir,
    name: str,
    data: bytes,
    *,
    mode: int = PRIVATE_MODE,
) -> None:
    """Writes ``data`` as ``name`` in ``directory``: readers see the old file or the new one,
    never a part.

    A new temp file (``O_CREAT | O_EXCL | O_NOFOLLOW``) gets ``mode`` by ``fchmod`` before any
    byte is written, is fsynced, then renamed over ``name``: whatever was there is replaced,
    never written through nor chmodded (:func:`write_new` never replaces).

    Raises:
        InvalidInputError: The rename failed (a directory is there).
    """
    tmp = _written_temp(directory, name, data, mode)
    try:
        try:
            directory.rename(tmp, name)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot write {directory.path / name}: {exc.strerror}"
            ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        raise
    if directory.fd is not None:
        with contextlib.suppress(OSError):
            os.fsync(directory.fd)
    with contextlib.suppress(OSError):
        _sweep_stale_temps(directory)


def write_new(
    directory: Dir, names: Iterable[str], data: bytes, *, mode: int = PRIVATE_MODE
) -> str | None:
    """Writes ``data`` under the first of ``names`` that nothing is under, and returns that
    name (None when every one is taken, for the caller to say which names those were): a
    file already there (another writer's, or anything planted) is never replaced nor written
    through. Readers see the whole file or none.

    Written whole to a temp file, then hard-linked under the name, which fails if the name is
    taken; where the file system has no hard links, the name is created with ``O_EXCL`` and
    written (a crash meanwhile may leave it partly written).

    Raises:
        InvalidInputError: The file cannot be written.
    """
    tmp = _written_temp(directory, "new", data, mode)
    try:
        for name in names:
            try:
                directory.link(tmp, directory, name)
                return name
            except FileExistsError:
                continue
            except OSError:
                if _create_new(directory, name, data, mode):
                    return name
        return None
    finally:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        if directory.fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(directory.fd)
        with contextlib.suppress(OSError):
            _sweep_stale_temps(directory)


def _create_new(directory: Dir, name: str, data: bytes, mode: int) -> bool:
    """Creates ``name`` (``O_EXCL``) holding ``data``; False when the name is taken."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    try:
        fd = directory._open(name, flags, mode)
    except FileExistsError:
        return False
    except OSError as exc:
        raise InvalidInputError(f"cannot write {directory.path / name}: {exc.strerror}") from None
    _fill(fd, data, mode)
    return True


def _fill(fd: int, data: bytes, mode: int) -> None:
    """Gives the new file ``fd`` its ``mode`` before any byte is written, writes ``data``,
    fsyncs and closes it."""
    with os.fdopen(fd, "wb") as fh:
        if hasattr(os, "fchmod"):
            os.fchmod(fh.fileno(), mode)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _written_temp(directory: Dir, name: str, data: bytes, mode: int) -> str:
    """A new temp file for ``name`` (``O_CREAT | O_EXCL | O_NOFOLLOW``, its mode set before
    any byte is written) holding ``data``, fsynced; returns its name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    for _ in range(100):
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = directory._open(tmp, flags, mode)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise InvalidInputError(f"cannot create a temp file in {directory.path}")
    try:
        _fill(fd, data, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        raise
    return tmp


def _sweep_stale_temps(directory: Dir) -> None:
    """Removes the temp files killed writes left in ``directory`` (named as the writes here
    name them, regular files, last changed over STALE_TEMP_S ago), once per directory per
    process: one listing, so a directory of many files costs it once."""
    # By path, not by the directory's inode: a stat for every write would cost more than the
    # sweep saves, and a directory made again under the path has no old temp files.
    key = os.path.abspath(directory.path)
    if key in _swept:
        return
    if len(_swept) >= _SWEPT_KEPT:
        # A server writing results for ever more threads must not remember every directory:
        # forgetting costs the next write into each one listing more.
        _swept.clear()
    _swept.add(key)
    cutoff = time.time() - STALE_TEMP_S
    for name in directory.names():
        if not _TEMP_NAME.fullmatch(name):
            continue
        found = directory.lstat(name)
        if found is not None and stat.S_ISREG(found.st_mode) and found.st_mtime < cutoff:
            with contextlib.suppress(OSError):
                directory.unlink(name)


def append_regular(directory: Dir, name: str, data: bytes, *, mode: int = PRIVATE_MODE) -> None:
    """Appends ``data`` to the regular file ``name`` in ``directory`` (created with ``mode``
    when missing) in one ``O_APPEND`` write, so concurrent appenders do not interleave.

    Never through a symlink, a FIFO, a directory or a file with more than one hard link: the
    opened descriptor is checked before the write.

    Raises:
        InvalidInputError: Something else than a regular file with one link is under ``name``.
    """
    fd = _checked_fd(directory, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode, links=False)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise InvalidInputError(
                f"{name}: only {written} of {len(data)} bytes could be appended"
            )
    finally:
        os.close(fd)


def open_lock_file(directory: Dir, name: str, *, mode: int = 0o644) -> int:
    """A descriptor of the regular file ``name`` (created when missing) to take a lock on,
    checked like :func:`append_regular`'s. The caller closes it."""
    return _checked_fd(directory, name, os.O_RDWR | os.O_CREAT, mode, links=False)
