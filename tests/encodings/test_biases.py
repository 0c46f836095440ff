"""ALiBi and T5 biases against the published recursion, the formula in exact decimal
arithmetic, and attention-bias loops written out element by element."""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal, localcontext

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function

import arrayrope
from arrayrope import alibi_bias, alibi_slopes, t5_relative_bias, t5_relative_buckets
from arrayrope.testing import assert_close, to_numpy
from helpers import check_like, float_dtypes, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(alibi_bias)
lazy_xp_function(alibi_slopes)
lazy_xp_function(t5_relative_bias)
lazy_xp_function(t5_relative_buckets)


def paper_slopes(n: int) -> list[float]:
    """The recursion of the ALiBi authors' code."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + paper_slopes(2 * p)[0::2][: n - p]


def bucket_formula(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's bucket from its formula, the logarithms in 60-digit decimal arithmetic."""
    out = 0
    if bidirectional:
        num_buckets //= 2
        out = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    exact = num_buckets // 2
    if n < exact:
        return out + n
    with localcontext() as ctx:
        ctx.prec = 60
        value = (Decimal(n) / exact).ln() / (Decimal(max_distance) / exact).ln() * (num_buckets - exact)
        value = value.quantize(Decimal("1e-40"))  # 3.999...9 (60 digits) is 4
        large = exact + int(value.to_integral_value(rounding=ROUND_FLOOR))
    return out + min(large, num_buckets - 1)


# -- ALiBi --------------------------------------------------------------------------------------


def test_slopes_equal_the_paper_recursion_for_1_to_128():
    for n in range(1, 129):
        np.testing.assert_allclose(arrayrope.alibi_slopes(n, dtype="float64"), paper_slopes(n), rtol=1e-14, atol=0)


def test_slopes_on_every_backend(xp, backend):
    for dtype in float_dtypes(backend):
        s = alibi_slopes(12, xp=backend.xp, dtype=dtype, device=backend.device)
        xp_assert_close(s, np.array(paper_slopes(12)), backend, dtype)


def alibi_reference(num_heads, q_len, k_len, offset, causal):
    slopes = paper_slopes(num_heads)
    out = np.empty((num_heads, q_len, k_len))
    for h in range(num_heads):
        for i in range(q_len):
            for j in range(k_len):
                d = offset + i - j
                out[h, i, j] = -math.inf if causal and d < 0 else -slopes[h] * abs(d)
    return out


@pytest.mark.parametrize("q_len,k_len,offset", [(5, 5, None), (1, 9, None), (4, 2, 3)])
def test_alibi_bias_matches_loops(xp, backend, q_len, k_len, offset):
    expected_offset = k_len - q_len if offset is None else offset
    for causal in (True, False):
        for dtype in float_dtypes(backend):
            b = alibi_bias(
                6, q_len, k_len, causal=causal, offset=offset, xp=backend.xp, dtype=dtype, device=backend.device
            )
            check_like(b, backend, dtype, (6, q_len, k_len))
            got, ref = to_numpy(b).astype(np.float64), alibi_reference(6, q_len, k_len, expected_offset, causal)
            np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))  # the causal mask
            finite = np.isfinite(ref)
            assert_close(
                got[finite], ref[finite], rtol=4 * np.finfo(dtype).eps, atol=0, check_namespace=False, check_dtype=False
            )


def test_alibi_softmax_matches_key_position_form():
    """Adding slope * j (the key position alone) gives the same attention weights."""
    scores = np.random.default_rng(0).standard_normal((4, 6, 6))
    b = arrayrope.alibi_bias(4, 6, 6, dtype="float64")
    keyonly = np.array(paper_slopes(4))[:, None, None] * np.arange(6) + np.where(np.tri(6) > 0, 0, -np.inf)

    def softmax(a):
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    np.testing.assert_allclose(softmax(scores + b), softmax(scores + keyonly), rtol=1e-12)


# -- T5 -----------------------------------------------------------------------------------------

CONFIGS = [
    (32, 128, True),  # T5
    (32, 128, False),
    (64, 256, True),
    (9, 128, False),  # a float64 formula lands one bucket low at n = 64 (exactly 4.0)
    (18, 128, True),
    (216, 200, False),  # a float32 formula lands one bucket low at n = 119
    (4, 3, True),
    (2, 2, False),
]


@pytest.mark.parametrize("num_buckets,max_distance,bidirectional", CONFIGS)
def test_t5_buckets_equal_formula_up_to_4_max_distance(num_buckets, max_distance, bidirectional):
    rel = np.arange(-4 * max_distance, 4 * max_distance + 1)
    got = arrayrope.t5_relative_buckets(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    expected = [bucket_formula(int(r), bidirectional, num_buckets, max_distance) for r in rel]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == rel.dtype


def test_t5_buckets_equal_the_float_formula_for_t5_settings():
    """For 32 buckets and distance 128 the usual float32 formula gives the same buckets."""
    rel = np.arange(-1000, 1001)
    for bidirectional in (True, False):
        nb, n = (16, np.abs(rel)) if bidirectional else (32, np.maximum(-rel, 0))
        exact = nb // 2
        with np.errstate(divide="ignore", invalid="ignore"):
            large = exact + (
                np.log(n.astype(np.float32) / np.float32(exact))
                / np.float32(math.log(128 / exact))
                * np.float32(nb - exact)
            ).astype(np.int64)
        expected = np.where(n < exact, n, np.minimum(large, nb - 1)) + (nb * (rel > 0) if bidirectional else 0)
        np.testing.assert_array_equal(arrayrope.t5_relative_buckets(rel, bidirectional=bidirectional), expected)


def test_t5_buckets_on_every_backend(xp, backend):
    rel64 = np.arange(-301, 301).reshape(2, 301)
    rel = backend.xp.asarray(rel64, device=backend.device)
    for bidirectional in (True, False):
        got = t5_relative_buckets(rel, bidirectional=bidirectional)
        check_like(got, backend, str(rel.dtype).split(".")[-1], (2, 301))
        assert got.dtype == rel.dtype
        expected = [[bucket_formula(int(r), bidirectional, 32, 128) for r in row] for row in rel64]
        np.testing.assert_array_equal(to_numpy(got), expected)


def t5_bias_reference(table, q_len, k_len, offset, bidirectional, max_distance):
    nb, heads = table.shape
    out = np.empty((heads, q_len, k_len))
    for i in range(q_len):
        for j in range(k_len):
            out[:, i, j] = table[bucket_formula(j - (offset + i), bidirectional, nb, max_distance)]
    return out


@pytest.mark.parametrize("q_len,k_len,offset", [(1, 40, None), (3, 5, 0)])
def test_t5_bias_matches_loops(xp, backend, q_len, k_len, offset):
    table64 = np.random.default_rng(1).standard_normal((32, 3))
    expected_offset = k_len - q_len if offset is None else offset
    for dtype in float_dtypes(backend):
        table = backend.asarray(table64, dtype=dtype)
        for bidirectional in (True, False):
            b = t5_relative_bias(table, q_len, k_len, bidirectional=bidirectional, max_distance=20, offset=offset)
            table64 = to_numpy(table).astype(np.float64)
            ref = t5_bias_reference(table64, q_len, k_len, expected_offset, bidirectional, 20)
            check_like(b, backend, dtype, ref.shape)
            assert_close(b, ref, rtol=0, atol=0, check_namespace=False, check_dtype=False)


def test_t5_bias_trains_the_table_with_torch_autograd():
    torch = pytest.importorskip("torch")
    table = torch.zeros((32, 2), dtype=torch.float64, requires_grad=True)
    weights = np.random.default_rng(2).standard_normal((2, 5, 7))
    b = arrayrope.t5_relative_bias(table, 5, 7)
    (b * torch.tensor(weights)).sum().backward()
    expected = np.zeros((32, 2))  # d/d table[bucket, h] = sum of the weights of the cells using it
    for i in range(5):
        for j in range(7):
            expected[bucket_formula(j - (2 + i), True, 32, 128)] += weights[:, i, j]
    np.testing.assert_allclose(table.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: arrayrope.alibi_slopes(0), ValueError, "num_heads must be positive, got 0"),
        (lambda: arrayrope.alibi_slopes(2.0), TypeError, "num_heads must be an int"),
        (lambda: arrayrope.alibi_bias(-1, 2, 2), ValueError, "num_heads must be positive, got -1"),
        (lambda: arrayrope.alibi_bias(2, 0, 2), ValueError, "q_len must be positive"),
        (lambda: arrayrope.alibi_bias(2, 2, 2, offset=1.5), TypeError, "offset must be an int"),
        (lambda: arrayrope.alibi_bias(2, 2, 2, causal="yes"), TypeError, "causal must be True or False"),
        (lambda: arrayrope.alibi_bias(2, 2, 2, dtype="int32"), TypeError, "dtype must be a real floating"),
        (lambda: arrayrope.t5_relative_buckets(np.arange(3), num_buckets=1), ValueError, "num_buckets must be >= 2"),
        (
            lambda: arrayrope.t5_relative_buckets(np.arange(3), num_buckets=3),
            ValueError,
            "num_buckets must be >= 4 for bidirectional",
        ),
        (
            lambda: arrayrope.t5_relative_buckets(np.arange(3), max_distance=8),
            ValueError,
            "max_distance must exceed the 8",
        ),
        (
            lambda: arrayrope.t5_relative_buckets(np.arange(3.0)),
            TypeError,
            "relative_position must have an integer dtype",
        ),
        (lambda: arrayrope.t5_relative_buckets([1, 2]), TypeError, "relative_position must be an array"),
        (
            lambda: arrayrope.t5_relative_bias(np.zeros(32), 2, 2),
            ValueError,
            r"table must have shape \(num_buckets, num_heads\)",
        ),
    ],
)
def test_bias_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_lazy_backends_neither_compute_nor_break_under_jit(xp, backend):
    """Dask builds the buckets without computing anything, JAX traces them (so do the bias tests above)."""
    rel = xp.asarray(np.arange(-40, 40), device=backend.device)
    got = t5_relative_buckets(rel)
    check_like(got, backend, str(rel.dtype).split(".")[-1], (80,))
    np.testing.assert_array_equal(to_numpy(got), [bucket_formula(int(r), True, 32, 128) for r in range(-40, 40)])


def test_t5_buckets_cost_what_the_output_does():
    """Many buckets and huge distances need no table as long as max_distance: exact all the same."""
    import tracemalloc

    rel = np.array([-(2**40), -(2**33) - 1, -70000, -4097, -4096, -5, 0, 7, 4095, 4096, 2**20, 2**40 - 1])
    for num_buckets, max_distance in ((16384, 2**20), (32, 2**40), (2**17, 2**40), (300, 10**12 + 7)):
        tracemalloc.start()
        try:
            got = arrayrope.t5_relative_buckets(rel, num_buckets=num_buckets, max_distance=max_distance)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20, (num_buckets, max_distance, peak)  # 8 TiB before, for 2**40
        expected = [bucket_formula(int(r), True, num_buckets, max_distance) for r in rel]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_t5_buckets_at_the_extremes_of_every_dtype(dtype):
    info = np.iinfo(dtype)
    rel = np.array([info.min, info.min + 1, -1, 0, 1, info.max], dtype=dtype)
    for bidirectional in (True, False):
        got = arrayrope.t5_relative_buckets(rel, bidirectional=bidirectional)
        assert got.dtype == rel.dtype
        np.testing.assert_array_equal(got, [bucket_formula(int(r), bidirectional, 32, 128) for r in rel])
    with pytest.raises(ValueError, match=r"num_buckets=256 does not fit the dtype of relative_position \(int8"):
        arrayrope.t5_relative_buckets(np.zeros(2, np.int8), num_buckets=256)
    with pytest.raises(ValueError, match=r"max_distance must be at most 2\*\*40"):
        arrayrope.t5_relative_buckets(np.zeros(2, np.int64), max_distance=2**41)
