"""The row-block schedule shared by the blocked CPU kernels (NumPy, PyTorch).

A rotary application reads ``x`` as rows ``(prod(x.shape[:-1]), features)``; row ``i``
uses table row ``i % period`` when the tables' leading axes are the trailing axes
of ``x``'s (e.g. tables ``(S, h)`` against ``x`` of shape ``(B, H, S, d)``). Working
through blocks of rows that fit in cache lets a kernel make several passes over a
block while reading ``x`` from memory once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = ["period", "row_blocks"]


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
