"""LangGraph's ``BaseStore`` over any memstrata store: :class:`MemstrataStore`.

Imported from :mod:`memstrata.integrations.langgraph`, which also turns the layers into
LangChain tools. ``MemstrataStore`` puts any memstrata store (``memory://``, SQLite,
PostgreSQL) behind LangGraph's store interface, so
``graph.compile(store=MemstrataStore("sqlite:///agent.db"))`` and
``create_react_agent(..., store=...)`` get ``get``/``put``/``delete``, ``search`` (filters and
semantic queries), ``list_namespaces``, ``batch``/``abatch`` and TTLs in minutes::

    store = MemstrataStore("sqlite:///agent.db", index={"dims": 384, "fields": ["text"]})
    store.put(("memories", "u1"), "m1", {"text": "prefers dark mode"})
    store.search(("memories", "u1"), query="UI preferences", limit=3)

How the adapter maps LangGraph onto a memstrata store (it holds no memory logic: values, TTLs
and history live in the store; vectors are scored by the Rust ``VectorSet``):

* An item is stored as it is, at its namespace and key: code using the memstrata store directly
  reads what LangGraph wrote. ``created_at`` is kept on overwrite, as in LangGraph's PostgreSQL
  store (its ``InMemoryStore`` resets it).
* Its vectors are stored beside it at ``("langgraph", *namespace)`` (LangGraph reserves the root
  label ``langgraph``, so no user namespace can collide), with the item version they embed, so
  a new process on the same store searches without re-embedding; the namespaces the adapter
  wrote are listed at ``("langgraph",)``. Namespaces are therefore at most 15 labels deep.
  The item and its vectors are two store writes (a store transaction spans one namespace):
  the namespace is listed first, and a search that finds an item of a listed namespace with
  no vectors of its version (a put cut off by a crash between the two) embeds it again at the
  index's fields and stores the vectors (``asearch`` through the embedder's async form).
* Search reads an in-process copy of the namespaces under the prefix, brought up to date by
  the store's change tracking before every search, so writes from other processes are seen.
  The copies of the 1,024 namespaces last searched are kept (``SPACES_KEPT``): a server with a
  namespace per user holds the recent users', and a search of any other reads it whole again.
  Namespaces written without the adapter are found once, when the adapter first reads.
* ``abatch`` runs the ops on the event loop, as the stack's async forms do: no thread hop for a
  store call that need not wait, and a PostgreSQL store answers through its async connections.
  A cancelled ``abatch`` finishes its ops first, then raises the cancellation.
* TTLs are in minutes (LangGraph's unit) and become the store's TTL in seconds. Refreshing a
  TTL on read rewrites the item with the same value (the store has no way to move an expiry
  alone), so its ``updated_at`` moves too; a refresh that races with another write gives way.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from memstrata._bridge import TaskLock, run_sync, run_whole
from memstrata._core import VectorSet
from memstrata.embedders import Embedder, HashingEmbedder
from memstrata.exceptions import LimitExceededError, MemstrataError
from memstrata.stores import Store, codec, open_store
from memstrata.stores import base as store_base

__all__ = ["MemstrataStore"]

logger = logging.getLogger("memstrata.langgraph")

Vectors = npt.NDArray[np.float32]
# Vectors abatch made for the items its searches repair: (namespace, key, version) -> rows.
Repairs = dict[tuple[tuple[str, ...], str, int], Vectors]

# LangGraph refuses user namespaces under this root label; the adapter keeps its records there.
RESERVED = "langgraph"
REGISTRY: tuple[str, ...] = (RESERVED,)
DEFAULT_DIMS = 384
# A namespace's vectors live under ("langgraph", *namespace), which the store must take too.
MAX_DEPTH = store_base.MAX_NAMESPACE_DEPTH - 1
_PAGE = 1000
# Namespaces whose in-process copy (items, vectors) is kept between searches, the least
# recently searched dropped first: one per user must not pile up for the life of a server.
SPACES_KEPT = 1024

try:  # langgraph >= 0.6: labels of ops handed to batch() directly are checked too
    from langgraph.store.base import validate_op_namespace as _validate_op_namespace
except ImportError:  # pragma: no cover - older langgraph

    def _validate_op_namespace(op: Op) -> None:
        return None


class _DefaultIndex:
    """Marks ``index`` as not given: semantic search with a HashingEmbedder."""


_DEFAULT_INDEX = _DefaultIndex()


class _Embed:
    """One face for a memstrata Embedder, a LangChain Embeddings or an embedding function."""

    def __init__(self, embed: Any, dims: int) -> None:
        self.dims = dims
        self.memstrata: Embedder | None = embed if isinstance(embed, Embedder) else None
        self.langchain: Embeddings | None = (
            None if self.memstrata is not None else ensure_embeddings(embed)
        )
        if self.memstrata is not None:
            self.model = self.memstrata.model
        else:
            inner = getattr(self.langchain, "func", None) or getattr(self.langchain, "afunc", None)
            named = inner if inner is not None else self.langchain
            label = getattr(named, "model", None) or getattr(named, "__qualname__", None)
            self.model = str(label or type(named).__qualname__)

    def _array(self, rows: Any, count: int) -> Vectors:
        array = np.asarray(rows, dtype=np.float32)
        if array.shape != (count, self.dims):
            raise ValueError(
                f"the embedder returned vectors of shape {array.shape}; index dims is {self.dims}"
            )
        return array

    def documents(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        if self.memstrata is not None:
            return self._array(self.memstrata.embed(texts), len(texts))
        assert self.langchain is not None
        return self._array(self.langchain.embed_documents(texts), len(texts))

    async def adocuments(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        if self.memstrata is not None:
            return self._array(await self.memstrata.aembed(texts), len(texts))
        assert self.langchain is not None
        return self._array(await self.langchain.aembed_documents(texts), len(texts))

    def query(self, text: str) -> Vectors:
        if self.memstrata is not None:
            rows = self._array(self.memstrata.embed([text]), 1)
        else:
            assert self.langchain is not None
            rows = self._array([self.langchain.embed_query(text)], 1)
        return cast(Vectors, rows[0])

    async def aquery(self, text: str) -> Vectors:
        if self.memstrata is not None:
            rows = self._array(await self.memstrata.aembed([text]), 1)
        else:
            assert self.langchain is not None
            rows = self._array([await self.langchain.aembed_query(text)], 1)
        return cast(Vectors, rows[0])


@dataclass
class _Space:
    """The in-process copy of one namespace: items, and their vectors in a VectorSet."""

    items: dict[str, store_base.Item] = field(default_factory=dict)
    shadows: dict[str, Any] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    vectors: VectorSet | None = None
    item_mark: store_base.ChangeMark | None = None
    shadow_mark: store_base.ChangeMark | None = None
    # Live items of an adapter's namespace with no vectors of their version: the next search
    # embeds them again (see MemstrataStore._repair_lost).
    lost: set[str] = field(default_factory=set)


def _shadow_of(namespace: tuple[str, ...]) -> tuple[str, ...]:
    return (RESERVED, *namespace)


def _registry_key(namespace: tuple[str, ...]) -> str:
    return hashlib.sha256(orjson.dumps(list(namespace))).hexdigest()


def _check_vectors_fit(key: str, shadow: dict[str, Any]) -> None:
    """Raises LimitExceededError, naming the key and its texts, when the vectors of a put
    are past the store's limit for one value (``version`` is counted at its widest)."""
    widest = {**shadow, "version": 2**63 - 1}
    try:
        codec.dumps(widest, validated=True)
    except LimitExceededError as exc:
        raise LimitExceededError(
            f"the vectors of key {key!r} ({len(shadow['paths'])} indexed texts) are "
            f"{exc.size:,} bytes of JSON; the limit for one stored value is {exc.limit:,} "
            "(memstrata.stores.codec.MAX_VALUE_BYTES): index fewer texts (the index's fields, "
            "or the put's index=) or split the item",
            setting=exc.setting,
            size=exc.size,
            limit=exc.limit,
        ) from None


def _check_storable(op: PutOp) -> None:
    """Refuses, before any op of its batch runs, a put whose value or TTL the store would
    refuse: the ops before it would be written and those after it not. The error is the
    store's, naming the item."""
    try:
        if op.ttl is not None:
            store_base.validate_ttl(op.ttl)
        codec.dumps(op.value)
    except (MemstrataError, TypeError, ValueError) as exc:
        named = copy.copy(exc)
        named.args = (f"the put of {op.key!r} in {op.namespace!r}: {exc}; no op of the batch ran",)
        raise named from None


def _texts_at(value: Any, paths: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(text, path) for every text ``value`` holds at ``paths``: ``path.n`` for the texts of a
    list."""
    out = []
    for path, tokens in paths:
        found = get_text_at_path(value, tokens)
        if len(found) == 1:
            out.append((found[0], path))
        else:
            out.extend((text, f"{path}.{n}") for n, text in enumerate(found))
    return out


def _lost(item: store_base.Item, shadow: Any) -> bool:
    """Whether ``item`` has no vectors of its version or a later one in ``shadow``."""
    if not isinstance(shadow, dict):
        return True
    version = shadow.get("version")
    return type(version) is not int or version < item.version


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _as_item(item: store_base.Item, *, copy: bool) -> Item:
    return Item(
        value=_copy(item.value) if copy else item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=_when(item.created_at),
        updated_at=_when(item.updated_at),
    )


def _live(item: store_base.Item, now: float) -> bool:
    return item.expires_at is None or item.expires_at > now


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    window = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    if not path:
        return True
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or p == label for p, label in zip(path, window))


def _compare(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: exact match, nested dicts, and $eq/$ne/$gt/$gte/$lt/$lte."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        if not isinstance(value, dict):
            return False
        return all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_compare(v, w) for v, w in zip(value, wanted))
        )
    return bool(value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            left, right = float(value), float(operand)
        except (TypeError, ValueError):
            return False  # a missing or non-numeric field matches no comparison
        if op == "$gt":
            return left > right
        if op == "$gte":
            return left >= right
        if op == "$lt":
            return left < right
        return left <= right
    raise ValueError(f"Unsupported operator: {op}")


def _passes(value: Any, flt: Mapping[str, Any] | None) -> bool:
    if not flt:
        return True
    if not isinstance(value, dict):
        return False
    return all(_compare(value.get(k), v) for k, v in flt.items())


class MemstrataStore(BaseStore):
    """A LangGraph store over a memstrata store.

    Args:
        store: A memstrata :class:`~memstrata.stores.Store`, or a URL for
            :func:`~memstrata.stores.open_store` (the adapter then closes it on ``close``).
        index: LangGraph's ``IndexConfig``: ``dims``, ``embed`` (a memstrata Embedder, a
            LangChain ``Embeddings``, a sync or async function of a list of texts, or a
            provider string) and ``fields`` (JSON paths, ``["$"]`` by default). Not given:
            a :class:`~memstrata.HashingEmbedder` of 384 dimensions over the whole value, so
            ``search(query=...)`` works offline. ``None``: no vectors, and a search's query is
            ignored, as in LangGraph's stores without an index.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` in minutes for puts that give none,
            ``refresh_on_read`` (default True). ``sweep_interval_minutes`` is not acted on:
            expired items are never returned, and :meth:`sweep_ttl` deletes them.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store | str,
        *,
        index: IndexConfig | _DefaultIndex | None = _DEFAULT_INDEX,
        ttl: TTLConfig | None = None,
    ) -> None:
        self._owns_store = isinstance(store, str)
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.ttl_config = ttl
        if isinstance(index, _DefaultIndex):
            index = IndexConfig(dims=DEFAULT_DIMS, embed=HashingEmbedder(dim=DEFAULT_DIMS))  # type: ignore[typeddict-item]
        self.index_config: IndexConfig | None = IndexConfig(**index) if index else None
        self._embed: _Embed | None = None
        self._fields: list[tuple[str, Any]] = []
        if self.index_config is not None:
            dims = int(self.index_config.get("dims") or 0)
            if dims < 1:
                raise ValueError(f"index dims must be a positive int, got {dims!r}")
            embed = self.index_config.get("embed")
            self._embed = _Embed(embed if embed is not None else HashingEmbedder(dim=dims), dims)
            self._fields = [
                (p, p if p == "$" else tokenize_path(p))
                for p in (self.index_config.get("fields") or ["$"])
            ]
        # Held across store calls, which under abatch may suspend the ops while other tasks on
        # the loop's thread run: a TaskLock tells those tasks apart, as it does threads.
        self._lock = TaskLock()
        self._spaces: OrderedDict[tuple[str, ...], _Space] = OrderedDict()
        self._known: set[tuple[str, ...]] = set()
        # Namespaces listed at REGISTRY: written through an adapter, so each live item there
        # has vectors of its version, or lost them to a put cut off between its writes.
        self._registered: set[tuple[str, ...]] = set()
        self._registry_mark: store_base.ChangeMark | None = None
        self._scanned = False

    # BaseStore --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = self._checked(ops)
        texts = self._texts(ops)
        queries = self._queries(ops)
        put_vectors = self._embed.documents([t for t, _ in texts]) if self._embed else None
        query_vectors = {q: self._embed.query(q) for q in queries} if self._embed else {}
        return self._execute(ops, texts, put_vectors, query_vectors, None)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = self._checked(ops)
        if self._embed is not None:
            # The puts' values are taken before the embedder is awaited: the caller's other
            # tasks run meanwhile, and a value changed then would be stored beside vectors of
            # its earlier text.
            ops = [
                op._replace(value=copy.deepcopy(op.value))
                if isinstance(op, PutOp) and op.value is not None
                else op
                for op in ops
            ]
        texts = self._texts(ops)
        queries = self._queries(ops)
        put_vectors = None
        query_vectors: dict[str, Vectors] = {}
        if self._embed is not None:
            put_vectors = await self._embed.adocuments([t for t, _ in texts])
            found = await asyncio.gather(*(self._embed.aquery(q) for q in queries))
            query_vectors = dict(zip(queries, found))
        repairs = await self._arepairs(ops)
        # A cancellation waits for the ops: a put cut off between its writes would leave an
        # item without its vectors or its namespace's registry entry.
        return await run_whole(self._execute, ops, texts, put_vectors, query_vectors, repairs)

    async def _arepairs(self, ops: list[Op]) -> Repairs:
        """Vectors of the items the searches among ``ops`` will repair (see _repair_lost),
        made through the async embedder: abatch never calls a sync one, which would hold up
        the event loop (or fail, for an embedder that is async only)."""
        prefixes = [
            tuple(op.namespace_prefix)
            for op in ops
            if isinstance(op, SearchOp)
            and not (op.namespace_prefix and op.namespace_prefix[0] == RESERVED)
        ]
        if self._embed is None or not prefixes:
            return {}
        lost = await run_sync(self._lost_items, prefixes)
        if not lost:
            return {}
        groups = [[text for text, _ in _texts_at(item.value, self._fields)] for _, item in lost]
        try:
            rows = await self._embed.adocuments([text for group in groups for text in group])
        except Exception:
            logger.warning(
                "could not embed %d items again; they stay unsearchable", len(lost), exc_info=True
            )
            return {}
        repairs: Repairs = {}
        start = 0
        for (namespace, item), group in zip(lost, groups):
            repairs[(namespace, item.key, item.version)] = rows[start : start + len(group)]
            start += len(group)
        return repairs

    def _lost_items(
        self, prefixes: list[tuple[str, ...]]
    ) -> list[tuple[tuple[str, ...], store_base.Item]]:
        """The items without vectors of their version a search under ``prefixes`` would find."""
        with self._lock:
            found: dict[tuple[tuple[str, ...], str], store_base.Item] = {}
            for prefix in prefixes:
                for namespace in self._namespaces(prefix):
                    space = self._sync(namespace)
                    for key in sorted(space.lost):
                        found[(namespace, key)] = space.items[key]
            return [(namespace, item) for (namespace, _), item in found.items()]

    def sweep_ttl(self) -> int:
        """Deletes expired items (and their vectors); returns how many rows went."""
        return self.store.purge_expired()

    async def asweep_ttl(self) -> int:
        return await run_sync(self.sweep_ttl)

    def close(self) -> None:
        """Closes the memstrata store if the adapter opened it from a URL."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> MemstrataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Preparation: everything that does not touch the store, so abatch can await it -----------

    def _checked(self, ops: Iterable[Op]) -> list[Op]:
        out = list(ops)
        for op in out:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
            _validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if op.namespace[0] == RESERVED:
                    raise InvalidNamespaceError(
                        f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
                    )
                if len(op.namespace) > MAX_DEPTH:
                    # Refused here, not by the store: the item would be written before its
                    # vectors' namespace, one label deeper, was refused.
                    raise InvalidNamespaceError(
                        f"namespace has {len(op.namespace)} labels; the limit is {MAX_DEPTH} "
                        f'(its vectors are kept one label deeper, under "{RESERVED}")'
                    )
                if op.value is not None and not isinstance(op.value, Mapping):
                    raise ValueError(f"a PutOp value must be a mapping, got {type(op.value)}")
                # The store's own checks, before the namespace's registry entry is written.
                store_base.validate_namespace(op.namespace)
                store_base.validate_key(op.key)
                if op.value is not None:
                    _check_storable(op)
        return out

    def _texts(self, ops: list[Op]) -> list[tuple[str, tuple[int, str]]]:
        """(text, (op index, path)) for every text the puts index."""
        if self._embed is None:
            return []
        out: list[tuple[str, tuple[int, str]]] = []
        for i, op in enumerate(ops):
            if not isinstance(op, PutOp) or op.value is None or op.index is False:
                continue
            paths = (
                self._fields
                if op.index is None
                else [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
            )
            out.extend((text, (i, path)) for text, path in _texts_at(op.value, paths))
        return out

    def _queries(self, ops: list[Op]) -> list[str]:
        if self._embed is None:
            return []
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    # Execution --------------------------------------------------------------------------------

    def _execute(
        self,
        ops: list[Op],
        texts: list[tuple[str, tuple[int, str]]],
        put_vectors: Vectors | None,
        query_vectors: Mapping[str, Vectors],
        repairs: Repairs | None,
    ) -> list[Result]:
        per_put: dict[int, tuple[list[str], list[Vectors]]] = {}
        if put_vectors is not None:
            for row, (_, (i, path)) in zip(put_vectors, texts):
                paths, rows = per_put.setdefault(i, ([], []))
                paths.append(path)
                rows.append(row)
        results: list[Result] = []
        with self._lock:
            for i, op in enumerate(ops):
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, PutOp):
                    self._put(op, per_put.get(i, ([], [])))
                    results.append(None)
                elif isinstance(op, SearchOp):
                    vector = query_vectors.get(op.query) if op.query else None
                    results.append(self._search(op, vector, repairs))
                else:
                    results.append(self._list_namespaces(op))
        return results

    def _get(self, op: GetOp) -> Item | None:
        if not op.namespace or op.namespace[0] == RESERVED:
            return None
        found = self.store.get(op.namespace, op.key)
        if found is None:
            return None
        if op.refresh_ttl:
            self._refresh(found)
        return _as_item(found, copy=False)  # the store decoded a fresh copy already

    def _put(self, op: PutOp, embedded: tuple[list[str], list[Vectors]]) -> None:
        namespace, key, shadow_ns = tuple(op.namespace), op.key, _shadow_of(tuple(op.namespace))
        space = self._spaces.get(namespace)
        if op.value is None:
            self.store.delete(namespace, key)
            self.store.delete(shadow_ns, key)
            if space is not None:
                self._forget(space, key)
            return
        seconds = op.ttl * 60.0 if op.ttl is not None else None
        value = dict(op.value)
        shadow = None
        if self._embed is not None:
            paths, rows = embedded
            block = np.ascontiguousarray(rows, dtype=np.float32) if rows else None
            shadow = {
                "version": 0,  # the item's, once it is written
                "model": self._embed.model,
                "dims": self._embed.dims,
                "paths": paths,
                "vectors": base64.b64encode(block.tobytes()).decode() if block is not None else "",
            }
            # Checked before the item is written: vectors refused after it would leave the
            # item stored without them, unsearchable.
            _check_vectors_fit(key, shadow)
        # The store writes one namespace per transaction: the item and its vectors are two.
        # The registry goes first, so an item whose vectors a crash between them lost is in a
        # namespace a search repairs (see _repair).
        if namespace not in self._registered:
            self.store.put(REGISTRY, _registry_key(namespace), list(namespace))
            self._known.add(namespace)
            self._registered.add(namespace)
        item = self.store.put(namespace, key, value, ttl=seconds)
        if shadow is not None:
            shadow["version"] = item.version
            self.store.put(shadow_ns, key, shadow, ttl=seconds)
        else:
            self.store.delete(shadow_ns, key)
        if space is not None:
            space.items[key] = item
            if shadow is None:
                space.shadows.pop(key, None)
            else:
                space.shadows[key] = shadow
            self._reindex(space, key)

    def _refresh(self, item: store_base.Item) -> None:
        """Moves a TTL'd item's expiry on by its TTL, with its vectors; gives way to a write,
        and to a delete: the vectors are rewritten only over the stored ones they were read
        as, so a delete by another process since leaves nothing behind."""
        if item.expires_at is None:
            return
        seconds = max(item.expires_at - item.updated_at, 1e-3)
        new = self.store.put_if_version(
            item.namespace, item.key, item.value, expected_version=item.version, ttl=seconds
        )
        if new is None:
            return
        shadow_ns = _shadow_of(item.namespace)
        space = self._spaces.get(item.namespace)
        stored = self.store.get(shadow_ns, item.key)
        shadow = stored.value if stored is not None else None
        if (
            stored is not None
            and isinstance(shadow, dict)
            and shadow.get("version") == item.version
        ):
            shadow = {**shadow, "version": new.version}
            carried = self.store.put_if_version(
                shadow_ns, item.key, shadow, expected_version=stored.version, ttl=seconds
            )
            if carried is not None and self.store.stamp(item.namespace, item.key) is None:
                # Deleted between the two reads (see _repair): the vectors go with it.
                self.store.delete_if_version(shadow_ns, item.key, expected_version=carried.version)
                if space is not None:
                    self._forget(space, item.key)
                return
            if space is not None and carried is not None:
                space.shadows[item.key] = shadow
        if space is not None:
            space.items[item.key] = new
            self._reindex(space, item.key)

    # The in-process copy ----------------------------------------------------------------------

    def _sync_registry(self) -> None:
        changes = self.store.changes(REGISTRY, self._registry_mark)
        for entry in changes.items:
            if isinstance(entry.value, list) and entry.value:
                namespace = tuple(str(label) for label in entry.value)
                self._known.add(namespace)
                self._registered.add(namespace)
        self._registry_mark = changes.mark
        if not self._scanned:
            # Namespaces written without the adapter (a memstrata store used directly) are
            # found by one pass over the store.
            offset = 0
            while True:
                page = self.store.list((), limit=_PAGE, offset=offset)
                self._known.update(f.namespace for f in page if f.namespace[0] != RESERVED)
                if len(page) < _PAGE:
                    break
                offset += _PAGE
            self._scanned = True

    def _sync(self, namespace: tuple[str, ...]) -> _Space:
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = _Space()
            # A namespace dropped here is read whole by its next search (no mark): a caller
            # still holding its copy uses it to the end of the op, as it would any other.
            while len(self._spaces) > SPACES_KEPT:
                self._spaces.popitem(last=False)
        else:
            self._spaces.move_to_end(namespace)
        changed: set[str] = set()
        items = self.store.changes(namespace, space.item_mark)
        if items.complete:
            changed.update(space.items)
            space.items = {}
        for item in items.items:
            space.items[item.key] = item
            changed.add(item.key)
        for key in items.removed:
            space.items.pop(key, None)
            changed.add(key)
        space.item_mark = items.mark
        if self._embed is not None:
            shadows = self.store.changes(_shadow_of(namespace), space.shadow_mark)
            if shadows.complete:
                changed.update(space.shadows)
                space.shadows = {}
            for item in shadows.items:
                space.shadows[item.key] = item.value
                changed.add(item.key)
            for key in shadows.removed:
                space.shadows.pop(key, None)
                changed.add(key)
            space.shadow_mark = shadows.mark
            if namespace in self._registered:
                now = time.time()
                for key in changed:
                    held = space.items.get(key)
                    if (
                        held is not None
                        and _live(held, now)
                        and _lost(held, space.shadows.get(key))
                    ):
                        space.lost.add(key)
                    else:
                        space.lost.discard(key)
            for key in changed:
                self._reindex(space, key)
        return space

    def _repair_lost(
        self, namespace: tuple[str, ...], space: _Space, repairs: Repairs | None
    ) -> None:
        """Repairs the space's lost items (see _repair): with the vectors ``repairs`` holds for
        their version (abatch made them), or, without ``repairs``, embedding them now. One
        abatch has no vectors for is left for the next search."""
        now = time.time()
        for key in sorted(space.lost):
            item = space.items.get(key)
            if item is None or not _live(item, now) or not _lost(item, space.shadows.get(key)):
                space.lost.discard(key)
                continue
            rows = None if repairs is None else repairs.get((namespace, key, item.version))
            if repairs is not None and rows is None:
                continue
            space.lost.discard(key)  # tried once: a failing embedder is not called every search
            self._repair(namespace, space, item, rows)
            self._reindex(space, key)

    def _repair(
        self,
        namespace: tuple[str, ...],
        space: _Space,
        item: store_base.Item,
        rows: Vectors | None = None,
    ) -> None:
        """Embeds an item of an adapter's namespace that has no vectors of its version (a put
        cut off between writing it and its vectors, or an item written past the adapter) at
        the index's fields (``rows``: its vectors, already made), and stores them, so it is
        searchable again. Vectors of a version as new, written meanwhile, are kept; those of
        an item deleted meanwhile are removed, not left behind without it. An embedder that
        fails leaves the item as it was, logged: a search never fails for it."""
        assert self._embed is not None
        try:
            found = _texts_at(item.value, self._fields)
            if rows is None:
                rows = self._embed.documents([text for text, _ in found])
            shadow = {
                "version": item.version,
                "model": self._embed.model,
                "dims": self._embed.dims,
                "paths": [path for _, path in found],
                "vectors": base64.b64encode(np.ascontiguousarray(rows).tobytes()).decode(),
            }
            _check_vectors_fit(item.key, shadow)
        except Exception:
            logger.warning(
                "could not embed %r again; it stays unsearchable", item.key, exc_info=True
            )
            return

        wrote = [False]

        def write(current: Any) -> Any:
            wrote[0] = _lost(item, current)
            return shadow if wrote[0] else current

        seconds = None if item.expires_at is None else max(item.expires_at - time.time(), 1e-3)
        stored = self.store.update(_shadow_of(namespace), item.key, write, ttl=seconds)
        if wrote[0] and self.store.stamp(namespace, item.key) is None:
            # Deleted meanwhile (another process): its delete of the vectors may have come
            # before this write, which would leave them behind with no item. They go now,
            # unless a put since has replaced them with its own.
            self.store.delete_if_version(
                _shadow_of(namespace), item.key, expected_version=stored.version
            )
            self._forget(space, item.key)
            return
        space.shadows[item.key] = stored.value
        logger.info("vectors of %r in %r were missing: embedded again", item.key, namespace)

    def _forget(self, space: _Space, key: str) -> None:
        space.items.pop(key, None)
        space.shadows.pop(key, None)
        self._reindex(space, key)

    def _reindex(self, space: _Space, key: str) -> None:
        """Puts the key's vectors in the space's VectorSet if they embed its current version."""
        old = space.ids.pop(key, None)
        if old and space.vectors is not None:
            space.vectors.remove(old)
        if self._embed is None:
            return
        item, shadow = space.items.get(key), space.shadows.get(key)
        if (
            item is None
            or not isinstance(shadow, dict)
            or shadow.get("version") != item.version
            or shadow.get("model") != self._embed.model
            or shadow.get("dims") != self._embed.dims
            or not shadow.get("paths")
        ):
            return
        dims = self._embed.dims
        rows = np.frombuffer(base64.b64decode(shadow["vectors"]), dtype=np.float32)
        rows = rows.reshape(-1, dims)
        # A text without tokens embeds to zeros: such a path has no direction to score.
        usable = np.isfinite(rows).all(axis=1) & (np.abs(rows).sum(axis=1) > 0)
        ids = [f"{key}\x00{n}" for n, ok in enumerate(usable) if ok]
        if not ids:
            return
        if space.vectors is None:
            space.vectors = VectorSet(dims)
        space.vectors.add(ids, rows[usable])
        space.ids[key] = ids

    def _namespaces(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        self._sync_registry()
        n = len(prefix)
        return sorted(ns for ns in self._known if ns[:n] == prefix and ns[0] != RESERVED)

    # Reads --------------------------------------------------------------------------------------

    def _search(
        self, op: SearchOp, query: Vectors | None, repairs: Repairs | None
    ) -> list[SearchItem]:
        if op.namespace_prefix and op.namespace_prefix[0] == RESERVED:
            return []
        now = time.time()
        spaces = [(ns, self._sync(ns)) for ns in self._namespaces(tuple(op.namespace_prefix))]
        for ns, space in spaces:
            if space.lost:
                self._repair_lost(ns, space, repairs)
        flt = op.filter

        def wanted(space: _Space, key: str) -> store_base.Item | None:
            found = space.items.get(key)
            if found is None or not _live(found, now) or not _passes(found.value, flt):
                return None
            return found

        kept: list[tuple[float | None, store_base.Item]] = []
        if query is None:
            matching = (
                found
                for _, space in spaces
                for key in sorted(space.items)
                if (found := wanted(space, key)) is not None
            )
            stop = op.offset + op.limit
            for n, found in enumerate(matching):
                if n >= stop:
                    break
                if n >= op.offset:
                    kept.append((None, found))
        else:
            need = op.offset + op.limit
            scored: list[tuple[float, store_base.Item]] = []
            scoreless: list[store_base.Item] = []
            for _, space in spaces:
                scored.extend(self._ranked(space, query, need, wanted))
                scoreless.extend(
                    found
                    for key in sorted(space.items)
                    if key not in space.ids and (found := wanted(space, key)) is not None
                )
            scored.sort(key=lambda pair: -pair[0])
            kept.extend(scored[op.offset : need])
            if scoreless and len(kept) < op.limit:
                # As LangGraph's InMemoryStore: items without vectors fill what is left.
                kept.extend((None, found) for found in scoreless[: op.limit - len(kept)])
        results = []
        for score, found in kept:
            if op.refresh_ttl:
                self._refresh(found)
            results.append(
                SearchItem(
                    namespace=found.namespace,
                    key=found.key,
                    value=_copy(found.value),
                    created_at=_when(found.created_at),
                    updated_at=_when(found.updated_at),
                    score=score,
                )
            )
        return results

    def _ranked(
        self,
        space: _Space,
        query: Vectors,
        need: int,
        wanted: Callable[[_Space, str], store_base.Item | None],
    ) -> list[tuple[float, store_base.Item]]:
        """The space's best ``need`` items by their best path's cosine (max pooling)."""
        if space.vectors is None or not len(space.vectors) or need < 1:
            return []
        total = len(space.vectors)
        k = min(total, max(need * 2, 16))
        while True:
            best: dict[str, tuple[float, store_base.Item]] = {}
            for vid, score in space.vectors.top_k(query, k):
                key = vid.rsplit("\x00", 1)[0]
                if key in best:
                    continue
                found = wanted(space, key)
                if found is not None:
                    best[key] = (float(score), found)
                    if len(best) == need:
                        return list(best.values())
            if k >= total:
                return list(best.values())
            k = min(total, k * 4)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        now = time.time()
        found = []
        for ns in self._namespaces(()):
            if op.match_conditions and not all(_matches(c, ns) for c in op.match_conditions):
                continue
            space = self._sync(ns)
            if any(_live(item, now) for item in space.items.values()):
                found.append(ns)
        if op.max_depth is not None:
            found = sorted({ns[: op.max_depth] for ns in found})
        return found[op.offset : op.offset + op.limit]
