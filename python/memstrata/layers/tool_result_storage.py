"""Where :class:`~memstrata.layers.tool_results.ToolResults` keeps results: in a store, or as
files in a directory. Both keep each text once per content hash and map a call_id to it; the layer
decides what is stored under which id, a backend only how.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from memstrata._bridge import blocking
from memstrata.exceptions import InvalidInputError
from memstrata.safe_files import (
    Dir,
    check_file_id,
    file_name,
    file_names,
    open_dir,
    open_subdir,
    read_regular,
    write_atomic,
)
from memstrata.stores import Store

_HASH_DIR = "by-hash"
_CHUNK_CHARS = 1 << 20  # characters per stored chunk: far below a store's per-value limit


class _Backend(Protocol):
    def lookup(self, call_id: str) -> tuple[str, list[str]] | None:
        """The SHA-256 of the text stored under ``call_id`` and its ``earlier`` ids."""

    def write(self, call_id: str, text: str, digest_hex: str, *, earlier: list[str]) -> None:
        """Stores ``text`` under ``call_id`` (replacing what was there)."""

    def alias(self, call_id: str, digest_hex: str) -> None:
        """Makes the already stored text ``digest_hex`` readable under ``call_id`` too."""

    def read(self, call_id: str, offset: int, chars: int) -> tuple[str, int, list[str]] | None:
        """Up to ``chars`` characters from ``offset``, the total length and ``earlier``."""


class _StoreBackend:
    """Results in a store: ``calls`` maps a call_id to a content hash, ``texts`` holds each
    text once (in chunks, so one result may pass a store's per-value limit), both under the
    run's scope and with the layer's TTL (renewed at every store)."""

    def __init__(self, store: Store, namespace: tuple[str, ...], ttl: float | None) -> None:
        self.store = store
        self.calls = (*namespace, "calls")
        self.texts = (*namespace, "texts")
        self.ttl = ttl

    def lookup(self, call_id: str) -> tuple[str, list[str]] | None:
        item = self.store.get(self.calls, call_id)
        if item is None or not isinstance(item.value, dict):
            return None
        return item.value["sha256"], list(item.value.get("earlier", []))

    def write(self, call_id: str, text: str, digest_hex: str, *, earlier: list[str]) -> None:
        chunks = [text[i : i + _CHUNK_CHARS] for i in range(0, len(text), _CHUNK_CHARS)] or [""]
        # Chunks first, then the record that makes them visible, then the pointer: a reader
        # never finds a pointer to a text not wholly written.
        for i, chunk in enumerate(chunks):
            self.store.put(self.texts, f"{digest_hex}.{i}", chunk, ttl=self.ttl)
        self.store.put(
            self.texts, digest_hex, {"chars": len(text), "chunks": len(chunks)}, ttl=self.ttl
        )
        self.store.put(
            self.calls, call_id, {"sha256": digest_hex, "earlier": earlier}, ttl=self.ttl
        )

    def alias(self, call_id: str, digest_hex: str) -> None:
        self.store.put(self.calls, call_id, {"sha256": digest_hex, "earlier": []}, ttl=self.ttl)

    def read(self, call_id: str, offset: int, chars: int) -> tuple[str, int, list[str]] | None:
        found = self.lookup(call_id)
        if found is None:
            return None
        digest_hex, earlier = found
        meta = self.store.get(self.texts, digest_hex)
        if meta is None:
            return None
        total = int(meta.value["chars"])
        first = offset // _CHUNK_CHARS
        last = min((offset + chars) // _CHUNK_CHARS, int(meta.value["chunks"]) - 1)
        parts = []
        for i in range(first, last + 1):
            item = self.store.get(self.texts, f"{digest_hex}.{i}")
            if item is None:
                return None
            parts.append(item.value)
        start = offset - first * _CHUNK_CHARS
        return "".join(parts)[start : start + chars], total, earlier


class _FileBackend:
    """Results as files: ``<call_id>.txt`` is a hard link to ``by-hash/<sha256>.txt`` (a copy
    where the file system has no hard links); ``<call_id>.earlier`` lists older ids.

    Every file is reached through directory descriptors (:mod:`memstrata.safe_files`), opened
    from the configured directory down, never through a symlink planted below it. A result is
    read from a regular file (never a symlink, a FIFO or a directory) and returned only if its
    bytes hash to a blob stored in ``by-hash``: a hard link planted to a file elsewhere is
    refused, even if it is swapped in and out while being read."""

    def __init__(self, directory: Path, base: Path) -> None:
        self.directory = directory
        self.base = base

    def _open(self, *, create: bool) -> Dir | None:
        """The results directory, each level opened relative to the one above; None when it
        does not exist (and not ``create``)."""
        parts = () if self.directory == self.base else self.directory.relative_to(self.base).parts
        try:
            current = open_dir(self.base, create=create)
        except FileNotFoundError:
            return None
        try:
            for part in parts:
                sub = open_subdir(current, part, create=create)
                current.close()
                current = sub
        except FileNotFoundError:
            current.close()
            return None
        except BaseException:
            current.close()
            raise
        return current

    def _writable(self) -> Dir:
        directory = self._open(create=True)
        assert directory is not None
        return directory

    def _result(self, directory: Dir, call_id: str) -> bytes | None:
        """The bytes of ``<call_id>.txt``, or None when there is none."""
        for name in file_names(call_id, ".txt"):
            try:
                data, _ = read_regular(directory, name, links=True)
                break
            except FileNotFoundError:
                continue
        else:
            return None
        # Results are content-addressed: whatever the link count said when it was looked at (a
        # link planted and removed again in between), bytes are returned only if they are a
        # text stored in this directory's by-hash.
        if not _is_stored(directory, hashlib.sha256(data).hexdigest()):
            raise InvalidInputError(
                f"{name} is not a stored result (a file linked in from elsewhere?); refusing "
                "to read it"
            )
        return data

    def lookup(self, call_id: str) -> tuple[str, list[str]] | None:
        directory = self._open(create=False)
        if directory is None:
            return None
        with directory:
            data = self._result(directory, call_id)
            if data is None:
                return None
            return hashlib.sha256(data).hexdigest(), self._earlier(directory, call_id)

    def _earlier(self, directory: Dir, call_id: str) -> list[str]:
        for name in file_names(call_id, ".earlier"):
            try:
                data, _ = read_regular(directory, name)
            except FileNotFoundError:
                continue
            return [line for line in data.decode().splitlines() if line]
        return []

    # A write fsyncs its files and their directories: from an async run, in a worker thread.

    def write(self, call_id: str, text: str, digest_hex: str, *, earlier: list[str]) -> None:
        blocking(_again_if_erased, lambda: self._write(call_id, text, digest_hex, earlier=earlier))

    def _write(self, call_id: str, text: str, digest_hex: str, *, earlier: list[str]) -> None:
        name = file_name(call_id, ".txt")
        data = text.encode("utf-8", "surrogatepass")
        with self._writable() as directory, open_subdir(directory, _HASH_DIR) as blobs:
            blob = f"{digest_hex}.txt"
            if not _holds(blobs, blob, digest_hex):
                write_atomic(blobs, blob, data)
            if earlier:
                write_atomic(directory, file_name(call_id, ".earlier"), "\n".join(earlier).encode())
            info = directory.lstat(name)
            if info is not None:
                if not stat.S_ISREG(info.st_mode):
                    raise InvalidInputError(
                        f"{name} is a symlink or not a regular file; refusing to use it"
                    )
                if _same_file(blobs.lstat(blob), info):
                    return
            # A regular file (a hard link planted to a file elsewhere too) is replaced by the
            # rename, never written through.
            _link_or_copy(blobs, blob, directory, name)

    def alias(self, call_id: str, digest_hex: str) -> None:
        blocking(_again_if_erased, lambda: self._alias(call_id, digest_hex))

    def _alias(self, call_id: str, digest_hex: str) -> None:
        name = file_name(call_id, ".txt")
        with self._writable() as directory, open_subdir(directory, _HASH_DIR) as blobs:
            _link_or_copy(blobs, f"{digest_hex}.txt", directory, name)

    def read(self, call_id: str, offset: int, chars: int) -> tuple[str, int, list[str]] | None:
        check_file_id(call_id)
        directory = self._open(create=False)
        if directory is None:
            return None
        with directory:
            data = self._result(directory, call_id)
            if data is None:
                return None
            text = data.decode("utf-8", "surrogatepass")
            return text[offset : offset + chars], len(text), self._earlier(directory, call_id)


def _again_if_erased(write: Callable[[], None]) -> None:
    """Runs ``write``, once more if it failed as a directory it had opened went away: the
    scope's results were erased (``ToolResults.forget``) while a run of it wrote, and the
    run's result is stored after the erasure, as a record put after one is in a store. A
    failure of another kind fails the second try the same way."""
    try:
        write()
    except (FileNotFoundError, InvalidInputError):
        write()


def _same_file(a: os.stat_result | None, b: os.stat_result) -> bool:
    return a is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _is_stored(directory: Dir, digest_hex: str) -> bool:
    """Whether ``by-hash/<digest_hex>.txt`` is a regular file: the text hashing to it was
    stored here."""
    try:
        with open_subdir(directory, _HASH_DIR, create=False) as blobs:
            info = blobs.lstat(f"{digest_hex}.txt")
    except (FileNotFoundError, InvalidInputError):
        return False
    return info is not None and stat.S_ISREG(info.st_mode)


def _holds(blobs: Dir, blob: str, digest_hex: str) -> bool:
    """Whether ``blob`` is a regular file holding the text ``digest_hex`` names."""
    try:
        data, _ = read_regular(blobs, blob, links=True)
    except (FileNotFoundError, InvalidInputError):
        return False
    return hashlib.sha256(data).hexdigest() == digest_hex


def _link_or_copy(blobs: Dir, blob: str, directory: Dir, name: str) -> None:
    """``name`` in ``directory`` becomes a hard link to ``blob`` (a private atomic copy where
    the file system has no hard links), replacing what was there atomically."""
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    try:
        blobs.link(blob, directory, tmp)
    except OSError:
        data, _ = read_regular(blobs, blob, links=True)
        write_atomic(directory, name, data)
        return
    try:
        directory.rename(tmp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        raise
