"""The row-block schedule of the blocked kernels (``backends/blocks.py``).

Oracles: the table row each row of ``x`` reads, found by broadcasting an array of
table-row indices against ``x``'s leading axes with NumPy; and, for the schedule,
the rows it covers, counted one by one.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from arrayrope.backends.blocks import period, row_blocks


def table_rows(lead: tuple[int, ...], table_lead: tuple[int, ...]) -> np.ndarray:
    """The table row that each row of x (flattened ``lead``) reads when the tables broadcast against x."""
    index = np.arange(math.prod(table_lead)).reshape(table_lead)
    return np.broadcast_to(index, lead).reshape(-1)


@st.composite
def broadcast_shapes(draw):
    """x's leading axes, and table leading axes that broadcast against them (some axes 1, some left out)."""
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    keep = draw(st.integers(0, len(lead)))
    table = tuple(n if draw(st.booleans()) else 1 for n in lead[len(lead) - keep :])
    return lead, table


@given(broadcast_shapes())
def test_period_is_the_repeat_of_the_table_rows(shapes):
    lead, table = shapes
    rows = table_rows(lead, table)
    n = len(rows)
    p = period(lead, table)
    if p is not None:
        assert n % p == 0
        np.testing.assert_array_equal(rows, np.arange(n) % p)
    else:
        # no period: the table rows are not ``i % p`` for any p
        assert not any(np.array_equal(rows, np.arange(n) % q) for q in range(1, n + 1))


def test_period_by_hand():
    assert period((2, 8, 16), (16,)) == 16  # (S,) tables against (B, H, S)
    assert period((2, 8, 16), (1, 16)) == 16
    assert period((2, 8, 16), (8, 16)) == 128
    assert period((2, 8, 16), (2, 8, 16)) == 256
    assert period((4, 1, 1), (1,)) == 1  # one decode position for everything
    assert period((2, 8, 16), (8, 1)) is None  # (S, 1) against (B, S, H)
    assert period((2, 8, 16), (2, 1, 16)) is None  # per-batch tables


@given(
    p=st.integers(1, 40),
    periods=st.integers(0, 12),
    step=st.integers(1, 64),
)
def test_schedule_covers_every_row_once_with_its_table_row(p, periods, step):
    """Rows a .. a+m-1 read table rows s0 .. s0+m-1 (long periods), or whole periods of them (short ones)."""
    n = p * periods  # the kernels' rows: whole periods of the tables
    used_step, short, blocks = row_blocks(n, p, step)
    assert short == (p < step)
    if short:
        assert used_step % p == 0 and p <= used_step <= step
    else:
        assert used_step == step
    covered = np.zeros(n, dtype=int)
    for a, m, s0 in blocks:
        assert 1 <= m <= used_step and a >= 0 and a + m <= n
        rows = np.arange(a, a + m)
        covered[rows] += 1
        if short:  # the tables broadcast over (-1, p, features): whole periods, from a period's start
            assert s0 == 0 and a % p == 0 and m % p == 0
            read = (rows - a) % p
        else:
            assert s0 >= 0 and s0 + m <= p
            read = s0 + (rows - a)
        np.testing.assert_array_equal(read, rows % p)
    np.testing.assert_array_equal(covered, np.ones(n, dtype=int))


def test_schedule_by_hand():
    step, short, blocks = row_blocks(10, 4, 3)  # 4 does not fit in a block of 3: each period is cut
    assert (step, short, list(blocks)) == (3, False, [(0, 3, 0), (3, 1, 3), (4, 3, 0), (7, 1, 3), (8, 2, 0)])
    step, short, blocks = row_blocks(12, 2, 5)  # periods of 2 fit: blocks of 4 rows, two periods each
    assert (step, short, list(blocks)) == (4, True, [(0, 4, 0), (4, 4, 0), (8, 4, 0)])
    assert list(row_blocks(0, 3, 8)[2]) == []
