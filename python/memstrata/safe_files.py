"""Files the layers write for the model and for audit: safe names, private modes, atomic writes.

Tool results, checkpoints and the team state document are files named after ids a model (or a
caller) supplied. :func:`check_file_id` refuses any id that could leave its directory;
:func:`write_atomic` never leaves a half-written file behind (temp file in the same directory,
fsync, rename); :func:`write_private` creates a file readable by its owner only;
:func:`read_regular` reads a file only if it is a regular file, never through a symlink.

Directories these functions create for private files are private too (0700). A directory that
already exists keeps its mode: it is the caller's. Symlinks planted *inside* a directory are
never followed; the configured directory itself is trusted, symlink or not.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from memstrata.exceptions import InvalidInputError

MAX_FILE_ID = 128
_FILE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def check_file_id(file_id: object, *, what: str = "call_id") -> str:
    """Returns ``file_id`` if it is safe as a file name stem, else raises.

    Allowed: 1 to 128 characters of ``A-Z a-z 0-9 _ . : -``, starting with a letter or digit,
    without ``..``. Separators, NUL, whitespace and anything else are refused, so the name can
    never leave its directory nor hide as a dot-file.

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
    return file_id


def path_in(directory: Path, file_id: str, suffix: str, *, what: str = "call_id") -> Path:
    """``directory/<file_id><suffix>`` after :func:`check_file_id`, checked to stay inside."""
    check_file_id(file_id, what=what)
    path = directory / f"{file_id}{suffix}"
    # Belt and braces: the id check already makes escaping impossible.
    if path.parent.resolve() != directory.resolve():
        raise InvalidInputError(f"{what} {file_id!r} would leave {directory}")
    return path


def make_directory(directory: Path, *, private: bool = True) -> None:
    """Creates ``directory`` (and its parents) if missing; a new one is 0700 when ``private``.

    Raises:
        InvalidInputError: The path exists but is not a directory, or cannot be created.
    """
    try:
        directory.mkdir(mode=PRIVATE_DIR_MODE if private else 0o777, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInputError(f"{directory} exists and is not a directory") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot create {directory}: {exc.strerror}") from None


def real_subdirectory(directory: Path, name: str) -> Path:
    """``directory/name`` created private if missing, refused if it is a symlink or not a
    directory: a directory planted as a symlink would send writes elsewhere."""
    sub = directory / name
    make_directory(directory)
    try:
        os.mkdir(sub, PRIVATE_DIR_MODE)
    except FileExistsError:
        info = os.lstat(sub)
        if not stat.S_ISDIR(info.st_mode):
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
            raise InvalidInputError(f"{sub} is {kind}; refusing to write through it") from None
    return sub


def write_atomic(path: Path, data: bytes, *, mode: int = PRIVATE_MODE) -> None:
    """Writes ``data`` to ``path`` so readers see the old file or the new one, never a part.

    The temp file is created in the same directory with ``mode`` (so a private file is never
    briefly world-readable), fsynced, then renamed over ``path`` (a symlink planted at ``path``
    is replaced, never written through). A missing directory is created, private when the file
    is.
    """
    directory = path.parent
    make_directory(directory, private=not mode & 0o077)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` with mode 0600.

    ``os.open(..., O_CREAT, 0o600)`` makes a new file private from its first byte; the
    ``fchmod`` that follows repairs the mode of a file that already existed with a wider one.
    ``O_NOFOLLOW`` refuses a symlink planted at ``path``.
    """
    make_directory(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, PRIVATE_MODE)
    except OSError as exc:
        raise InvalidInputError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), PRIVATE_MODE)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (a symlink to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file, never through a symlink.

    ``O_NOFOLLOW`` refuses a symlink at ``path``; ``O_NONBLOCK`` keeps a FIFO planted there from
    blocking the open, and the ``fstat`` that follows refuses it, a directory or a device.

    Raises:
        FileNotFoundError: Nothing is at ``path``.
        InvalidInputError: Something other than a regular file is there.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        # ELOOP: a symlink; anything else (EACCES...) is refused the same way, by name.
        raise InvalidInputError(f"{path.name} cannot be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInputError(f"{path.name} is not a regular file; refusing to read it")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()
