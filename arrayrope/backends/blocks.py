"""The row-block schedule shared by the blocked CPU kernels (NumPy, PyTorch).

A rotary application reads ``x`` as rows ``(prod(x.shape[:-1]), features)``; row ``i``
uses table row ``i % period`` when the tables' leading axes are the trailing axes
of ``x``'s (e.g. tables ``(S, h)`` against ``x`` of shape ``(B, H, S, d)``). Working
through blocks of rows that fit in cache lets a kernel make several passes over a
block while reading ``x`` from memory once. :func:`run` hands the blocks to the
calling thread and helper threads, each taking the next block when done with one.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["period", "row_blocks", "run"]


def period(lead: tuple[int, ...], table_lead: tuple[int, ...]) -> int | None:
    """Rows after which the tables repeat along flattened ``lead``, or None if they do not.

    The tables must equal ``lead``'s trailing axes and be 1 on all axes before them:
    row ``i`` of x then uses table row ``i % period``.

    >>> period((2, 8, 16), (16,)), period((2, 8, 16), (8, 1)), period((2, 8, 16), (2, 1, 16))
    (16, None, None)
    """
    tl = (1,) * (len(lead) - len(table_lead)) + tuple(table_lead)
    k = len(lead)
    while k > 0 and tl[k - 1] == lead[k - 1]:
        k -= 1
    if any(n != 1 for n in tl[:k]):
        return None
    return math.prod(lead[k:])


def row_blocks(n: int, period: int, step: int) -> tuple[int, bool, Iterator[tuple[int, int, int]]]:
    """The block schedule: ``(step, short, blocks)``.

    ``short`` when whole periods fit in a block (the tables then broadcast over
    ``(-1, period, ...)`` and ``step`` is rounded down to whole periods); ``blocks``
    yields ``(a, m, s0)``: rows ``a .. a+m-1`` use table rows ``s0 .. s0+m-1``.

    >>> step, short, blocks = row_blocks(10, 4, 3)
    >>> step, short, list(blocks)
    (3, False, [(0, 3, 0), (3, 1, 3), (4, 3, 0), (7, 1, 3), (8, 2, 0)])
    """
    short = period < step
    if short:
        step = (step // period) * period
    outer = step if short else period

    def blocks() -> Iterator[tuple[int, int, int]]:
        for p0 in range(0, n, outer):
            span = min(outer, n - p0)
            for s0 in range(0, span, step):
                yield p0 + s0, min(step, span - s0), s0

    return step, short, blocks()


class _Claims:
    """Blocks ``0..n-1`` handed out one at a time to whichever thread asks next."""

    def __init__(self, n: int, work: Callable[[int, dict[str, Any]], None]) -> None:
        self.n = n
        self.work = work
        self.claimed = 0
        self.left = n
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def __call__(self, enter: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> None:
        scratch: dict[str, Any] = {}
        with enter() if enter is not None else contextlib.nullcontext():
            while True:
                with self.lock:
                    i = self.claimed
                    self.claimed += 1
                if i >= self.n:
                    return
                try:
                    if self.error is None:
                        self.work(i, scratch)
                except BaseException as exc:  # re-raised by the calling thread
                    self.error = exc
                finally:
                    with self.lock:
                        self.left -= 1
                        if self.left == 0:
                            self.finished.set()


_helpers: tuple[int, ThreadPoolExecutor] | None = None
_helpers_lock = threading.Lock()


def _pool(n: int) -> ThreadPoolExecutor:
    """The shared pool of helper threads, replaced by a larger one when a call needs more."""
    global _helpers
    with _helpers_lock:
        if _helpers is None or _helpers[0] < n:
            from concurrent.futures import ThreadPoolExecutor

            _helpers = (n, ThreadPoolExecutor(n, thread_name_prefix="arrayrope"))
        return _helpers[1]


def _forget_pool() -> None:  # a forked child has none of the parent's threads
    global _helpers
    _helpers = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run(
    n: int,
    work: Callable[[int, dict[str, Any]], None],
    threads: int,
    enter: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> None:
    """Call ``work(i, scratch)`` for every block ``i < n`` on up to ``threads`` threads.

    The calling thread works too; helper threads claim blocks in turn, so a thread
    the system delays takes fewer blocks rather than holding the others at a
    barrier. ``scratch`` is a dict private to each thread (for buffers). ``enter``
    makes the context each helper thread runs in (thread-local library state).
    The first exception of any block is raised here after every claimed block is done.

    >>> done = []
    >>> run(5, lambda i, scratch: done.append(i), threads=2)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
    """
    if n <= 0:
        return
    if threads <= 1 or n == 1:  # the calling thread alone: no claims to hand out
        scratch: dict[str, Any] = {}
        for i in range(n):
            work(i, scratch)
        return
    claims = _Claims(n, work)
    pool = _pool(threads - 1)
    for _ in range(min(threads, n) - 1):
        pool.submit(claims, enter)
    claims()
    claims.finished.wait()
    if claims.error is not None:
        raise claims.error
