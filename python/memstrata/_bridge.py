"""How the async methods run memstrata's sync code on the event loop, without a thread hop.

Layers are written once, as sync code that calls the store. An async method (``await
run.aprepare(...)``) runs that code on the event loop's thread, in a greenlet. When the code
reaches I/O that has to wait (a PostgreSQL round trip, an HTTP embedder, a locked SQLite file,
a file written and synced to disk), the greenlet is suspended and the coroutine that started it
awaits the store's async method (or a worker thread) instead, so the loop serves other tasks
meanwhile; the answer is handed back to the sync code, which goes on where it stopped. Work
that takes microseconds (an in-memory store, an SQLite statement that need not wait, the Rust
kernels) runs inline: no thread, no loop iteration.

* :func:`run_sync` is the coroutine that runs sync code this way (:func:`run_whole`, to its
  end even when cancelled);
* :func:`bridged` tells sync code it runs under :func:`run_sync`, and :func:`await_` awaits an
  awaitable from there; :func:`pinned` marks code that must not suspend;
* :func:`blocking` runs blocking file I/O (a write and its fsync) from such code in a worker
  thread;
* :class:`TaskLock` is a lock for state that such code and threads share.

``asyncio`` and ``greenlet`` are imported when an async method is first awaited, not with
memstrata (asyncio brings ``ssl`` along: tens of milliseconds that a sync caller never needs).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# Set by the first run_sync: until then nothing runs bridged, and greenlet is not imported.
_getcurrent: Callable[[], Any] | None = None
_worker_class: type[Any] | None = None
_running_loop: Callable[[], Any] | None = None
# Idle workers, per thread (a greenlet runs on the thread that made it). A worker is reused:
# a new greenlet's first deep call stack costs ~10 us to allocate, every time.
_idle = threading.local()
_IDLE_KEPT = 64
# What a worker hands its coroutine: an awaitable to await (to its end, for a store call), or
# the job's outcome.
_AWAIT, _FINISH, _RETURNED, _RAISED = range(4)


# Orders the first run_syncs of threads whose loops start together: each would otherwise make
# its own Worker class, and bridged() (a check of the type) would fail the other threads' code.
_setup = threading.Lock()


def _greenlets() -> tuple[Callable[[], Any], type[Any]]:
    if _worker_class is None:
        with _setup:
            _set_up()
    assert _getcurrent is not None and _worker_class is not None
    return _getcurrent, _worker_class


def _set_up() -> None:
    global _getcurrent, _worker_class, _running_loop
    if _worker_class is None:
        import asyncio

        import greenlet

        class Worker(greenlet.greenlet):  # type: ignore[misc]
            """A greenlet running sync code for a coroutine (see run_sync), job after job."""

            pins = 0  # pinned() blocks it is in

        # The class last: _greenlets() takes a class set to mean all three are.
        _getcurrent, _running_loop = greenlet.getcurrent, asyncio.get_running_loop
        _worker_class = Worker


def _work(job: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> None:
    """A worker's life: run a job, hand its outcome to the coroutine that gave it, wait for
    the next. Dropping an idle worker ends it (GreenletExit at its switch)."""
    import greenlet

    while True:
        fn, args, kwargs = job
        try:
            outcome = (_RETURNED, fn(*args, **kwargs))
        except greenlet.GreenletExit:
            raise
        except BaseException as exc:
            outcome = (_RAISED, exc)
        del fn, args, kwargs
        job = greenlet.getcurrent().parent.switch(outcome)


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Runs blocking work on a worker thread (a locked SQLite file, a store without native
    async methods)."""
    import asyncio

    return await asyncio.to_thread(fn, *args, **kwargs)


async def _to_its_end(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, awaited to its end even when the caller is cancelled meanwhile
    (the cancellation is raised once it is done): a store call cut off in the middle of a
    PostgreSQL transaction would leave its connection holding the transaction's locks, as a
    sync call cannot be cut off either. Only a cancellation of the store call itself (the loop
    shutting down) ends it early."""
    import asyncio

    task = asyncio.ensure_future(awaitable)
    cancelled: BaseException | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))  # unlike a plain await, a cancellation here stays here
        except asyncio.CancelledError as exc:
            cancelled = exc
            anyio = sys.modules.get("anyio")  # loaded if the host uses its cancel scopes
            if anyio is not None:
                # anyio delivers a cancelled scope's cancellation again at every turn of the
                # loop: waited through unshielded, the loop would spin until the call ends,
                # starving the worker thread that runs it.
                with anyio.CancelScope(shield=True):
                    await asyncio.wait((task,))
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # seen: the caller gets the cancellation, not the call's outcome
        raise cancelled
    return task.result()


async def run_sync(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run on this thread; each awaitable it passes to :func:`await_` is
    awaited here, with ``fn`` suspended until the answer comes back.

    ``fn`` sees the caller's context variables. A cancellation (or any exception) of an await
    is raised inside ``fn`` at its :func:`await_`, so its ``finally`` blocks and rollbacks run;
    a cancellation waits for a store call in flight (``await_(..., finish=True)``) to finish
    first, and cuts off any other wait (an embedder's request, a lock) at once.
    """
    getcurrent, worker_class = _greenlets()
    idle: list[Any] = _idle.__dict__.setdefault("workers", [])
    worker = idle.pop() if idle else worker_class(_work)
    worker.parent = getcurrent()
    worker.gr_context = contextvars.copy_context()
    kind, value = worker.switch((fn, args, kwargs))
    try:
        while kind <= _FINISH:
            try:
                answer = await (_to_its_end(value) if kind == _FINISH else value)
            except BaseException as exc:
                kind, value = worker.throw(exc)
            else:
                kind, value = worker.switch(answer)
    finally:
        if kind > _FINISH and len(idle) < _IDLE_KEPT:
            worker.gr_context = None
            idle.append(worker)
    if kind == _RAISED:
        raise value
    result: T = value
    return result


async def run_whole(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """:func:`run_sync`, finished even when the caller is cancelled meanwhile (the
    cancellation is raised once it is done), as a call run in a thread would be: for sync code
    whose store writes belong together (a batch's put writes an item, its vectors and its
    namespace's entry), which a cancellation between two of them would leave half-written."""
    return await _to_its_end(run_sync(fn, *args, **kwargs))


def bridged() -> bool:
    """Whether the calling sync code runs under :func:`run_sync`, outside :func:`pinned`
    blocks (so it may :func:`await_`)."""
    getcurrent = _getcurrent
    if getcurrent is None:
        return False
    current = getcurrent()
    return type(current) is _worker_class and not current.pins


@contextlib.contextmanager
def pinned() -> Iterator[None]:
    """A block of sync code that must not suspend: :func:`bridged` is False in it, so what it
    calls waits in place. A store runs a caller's callback (an update's ``fn``) in one while
    it holds its lock and transaction: another task let in there would write into them."""
    current: Any = _getcurrent() if _getcurrent is not None else None
    if type(current) is not _worker_class:
        yield
        return
    current.pins += 1
    try:
        yield
    finally:
        current.pins -= 1


def await_(awaitable: Awaitable[T], *, finish: bool = False) -> T:
    """The result of ``awaitable``, awaited by the coroutine running this sync code; only
    under :func:`run_sync` (see :func:`bridged`). With ``finish``, a cancellation meanwhile
    is raised only once ``awaitable`` is done (a store call: see :func:`_to_its_end`);
    without, at once, so that a timeout fires on time."""
    if not bridged():
        raise RuntimeError("await_ is for sync code run by run_sync")
    assert _getcurrent is not None
    result: T = _getcurrent().parent.switch((_FINISH if finish else _AWAIT, awaitable))
    return result


def blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, for sync code that blocks on the file system (writes a file and
    fsyncs it, renames, removes): under :func:`run_sync`, in a worker thread, awaited to its
    end even when the caller is cancelled meanwhile, as a store call is (the cancellation is
    raised once the files are whole); elsewhere (a sync caller, a :func:`pinned` block), in
    place. An fsync takes milliseconds, for which the event loop would serve no other task;
    a thread hop costs tens of microseconds, so ``fn`` should be the whole of one write, not
    each of its calls."""
    if bridged():
        return await_(in_thread(fn, *args, **kwargs), finish=True)
    return fn(*args, **kwargs)


def _holder() -> object:
    current = _getcurrent() if _getcurrent is not None else None
    return current if type(current) is _worker_class else threading.get_ident()


# (holder, its thread, the event loop that runs it: None for a thread), as a TaskLock keeps it.
_Held = tuple[object, int, Any]


def _suspended_here(held: _Held | None) -> bool:
    """Whether ``held`` (a TaskLock's holder) is code that run_sync suspended on this thread:
    code here that blocks waiting for it never lets it resume."""
    if held is None:
        return False
    who, thread, _loop = held
    return type(who) is _worker_class and thread == threading.get_ident() and who is not _holder()


def _abandoned(held: _Held | None) -> bool:
    """Whether ``held`` is code suspended in a task of an event loop that has closed: nothing
    resumes it, so it never leaves the lock."""
    return held is not None and held[2] is not None and held[2].is_closed()


def _wake(future: Any) -> None:
    if not future.done():
        future.set_result(None)


# How often a waiter looks again whether the holder's event loop has closed meanwhile.
_RECHECK = 0.25

logger = logging.getLogger("memstrata.bridge")


class TaskLock:
    """A re-entrant lock whose holder is a thread or, under :func:`run_sync`, the greenlet
    running the code: two coroutines' sync code on one loop's thread exclude each other as two
    threads do (a ``threading.RLock`` lets the second in: same thread). Waiting for it under
    :func:`run_sync` suspends the code instead of blocking the loop.

    For state held across a store call, which may suspend the code holding the lock.

    A holder suspended in a task of an event loop that is then closed without the task ending
    (a hand-managed loop closed with tasks pending) can never leave the lock: the next caller,
    from any loop or thread, takes it over, with a warning, as if it had been released. The
    abandoned code's work stops where it was suspended: a store call it was waiting for is in
    the store whole or not at all, as for a cancellation. Code that would wait, on the same
    thread, for a holder suspended in another loop that is not running raises ``RuntimeError``
    instead: that loop cannot run again until the waiter is done.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: object = None
        # Set in one assignment: read without the lock by a would-be waiter (see
        # _suspended_here, _abandoned).
        self._held_by: _Held | None = None
        self._depth = 0
        # (loop, future) of suspended waiters, woken when the lock is released; the guard
        # orders adding one against a release on another thread, and a take-over against both.
        self._waiters: list[tuple[Any, Any]] = []
        self._guard = threading.Lock()

    def __enter__(self) -> TaskLock:
        me = _holder()
        if self._depth and self._holder == me:
            self._depth += 1
            return self
        if bridged():
            assert _running_loop is not None
            loop = _running_loop()
            while not self._lock.acquire(blocking=False):
                if self._took_over(me, loop):
                    return self
                held = self._held_by
                if _suspended_here(held) and held is not None and not held[2].is_running():
                    raise RuntimeError(
                        "this lock is held by a task suspended in another event loop on this "
                        "thread, which is not running: it cannot resume before this call ends. "
                        "Run that loop until the task is done, or close it (a lock its closed "
                        "loop's task held is taken over)"
                    )
                await_(self._released())
        else:
            loop = None
            if not self._lock.acquire(blocking=False):
                if self._took_over(me, loop):
                    return self
                if _suspended_here(self._held_by):
                    raise RuntimeError(
                        "this lock is held by an async call suspended on this thread's event "
                        "loop; sync code run directly on the loop (a sync method called from a "
                        "coroutine) would wait for it for ever: await the async form (e.g. "
                        "run.acall_tool) instead, or call the sync one from a worker thread"
                    )
                while not self._lock.acquire(timeout=_RECHECK):
                    if self._took_over(me, loop):
                        return self
        self._holder, self._depth = me, 1
        self._held_by = (me, threading.get_ident(), loop)
        return self

    def _took_over(self, me: object, loop: Any) -> bool:
        """Takes the lock from a holder whose event loop closed (see the class docstring)."""
        with self._guard:
            held = self._held_by
            if not _abandoned(held):
                return False
            self._holder, self._depth = me, 1
            self._held_by = (me, threading.get_ident(), loop)
        logger.warning(
            "a lock held by a task of an event loop that was closed while the task was "
            "suspended was taken over; that task's remaining work never runs"
        )
        return True

    async def _released(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        waiter = (loop, loop.create_future())
        with self._guard:
            self._waiters.append(waiter)  # before the check: a release from now on wakes it
            held = self._lock.locked()
        try:
            if held:
                # Not for ever: the holder's loop may close meanwhile (see _abandoned).
                await asyncio.wait((waiter[1],), timeout=_RECHECK)
        finally:
            with self._guard:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            if self._holder != _holder():
                return  # taken over: this holder's loop closed while it held the lock
            self._depth -= 1
            if self._depth:
                return
            self._holder = self._held_by = None
            self._lock.release()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_wake, future)
