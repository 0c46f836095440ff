"""float16 and bfloat16 on every path, beside float32 and float64: the dtype matrix.

Paths: ``apply_rotary`` (leading and trailing, partial, both layouts, ``out=``), ``RotaryEmbedding``
(prefill, ``positions=`` of shape (S,) and (B, S), int, 0-d and per-row offsets, bshd, partial interleaved,
trailing, ``q_out=``/``k_out=``), ``rope_tables(dtype=...)`` and the encodings that take a dtype. Modes:
eager on every installed backend (the ``backend`` fixture: NumPy, PyTorch, CuPy, JAX, Dask,
array_api_strict, each with the dtypes it has), ``torch.compile(fullgraph=True)`` with ``dynamic`` False
and True, ``torch.export`` strict and non-strict, ``jax.jit`` with traced offsets. ONNX graphs in float16
and bfloat16 are in ``tests/export/test_model.py``.

The promise, and the oracle. A rotation is computed in float32 (float64 for float64 inputs) from tables
within ``T`` of the exact cos and sin, and rounded once to the input's dtype. The exact rotation ``z`` of
a pair ``(a, b)`` is ``a cos - b sin`` in float64 with float64 cos/sin (NumPy, independent of arrayrope);
the float32 computation is within ``e = (|a| + |b|) (T + 3 * 2**-24)`` of it (the tables' error and the
rounding of two products and a sum; the float64 angle of the oracle adds ``|p theta| 2**-52``). So:

* float32 and float64 results are within ``e`` of ``z``;
* float16 and bfloat16 results lie between ``round(z - e)`` and ``round(z + e)``, rounding to nearest-even in
  the result's dtype (exactly, :func:`round_to`): the correctly rounded rotation itself, except where ``z`` is
  within ``e`` of a point halfway between two neighbours of the dtype. A computation in the narrow dtype
  (tables cast to bfloat16, products rounded to bfloat16) misses this bound in about a third of the
  elements (:func:`test_rounding_figures`).

``T`` is ``2**-25`` for tables rounded once from float64 (eager, on devices with float64), ``2.5 * 2**-23``
for the exact float32 method (traced graphs, and devices without float64; ``tests/_lib/test_digits.py``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import arrayrope
from arrayrope.testing import to_numpy
from helpers import exact_cos_sin, inv_freq_formula

D, HQ, HK, S = 16, 4, 2, 6
LOW = ("float16", "bfloat16")
ALL = ("float16", "bfloat16", "float32", "float64")
EAGER = 2.0**-25  # tables rounded once from float64
TRACED = 2.5 * 2.0**-23  # the exact float32 method
FAR = 2**20 - 6  # positions up to 2**20 - 1
#: the partial frequencies apply_rotary takes in :func:`every_call`: 12 of 16 features rotate
PARTIAL = 12


def round_to(z: np.ndarray, dtype: str) -> np.ndarray:
    """``z`` (float64) rounded to nearest-even in ``dtype``, returned as float64: exactly, with no double rounding.

    NumPy converts float64 to float16 and float32 directly; bfloat16 (8 significant bits) is rounded here on
    the significand from ``frexp``, which ``np.round`` rounds half to even.
    """
    z = np.asarray(z, dtype=np.float64)
    if dtype in ("float16", "float32"):
        return z.astype(dtype).astype(np.float64)
    if dtype == "float64":
        return z
    m, e = np.frexp(z)
    return np.ldexp(np.round(np.ldexp(m, 8)), e - 8)


def ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype``'s values at ``x`` (float64 values of that dtype): ``2**(e - bits)`` for
    ``|x|`` in ``[2**(e-1), 2**e)``, and the subnormal spacing below the normal range."""
    bits, smallest = {"bfloat16": (8, 2.0**-133), "float16": (11, 2.0**-24), "float32": (24, 2.0**-149)}[dtype]
    _, e = np.frexp(np.abs(np.asarray(x, dtype=np.float64)))
    return np.maximum(np.ldexp(1.0, e - bits), smallest)


def exact_rotation(
    x, positions, rotary_dim=D, layout="half", trailing=False, table=EAGER, base=10000.0, arith=3 * 2.0**-24
):
    """``(z, e)``: ``x`` (B, H, S, D) rotated at ``positions`` ((S,) or (B, S)) in float64, and the bound ``e``
    on the error of a computation in ``arith``'s precision per element (0 where features pass through). The
    angle's own error (``|p theta| 2**-50``) covers the float64 product and frequencies a few ulps from
    arrayrope's."""
    x = np.asarray(x, dtype=np.float64)
    b_, _, s_, d_ = x.shape
    inv = inv_freq_formula(rotary_dim, base)
    angles = np.broadcast_to(np.asarray(positions, dtype=np.float64), (b_, s_))[:, None, :, None] * inv
    cos, sin = np.cos(angles), np.sin(angles)
    lo = d_ - rotary_dim if trailing else 0
    part = x[..., lo : lo + rotary_dim]
    h = rotary_dim // 2
    ia, ib = (
        (np.arange(h), np.arange(h) + h)
        if layout == "half"
        else (np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2))
    )
    a, b = part[..., ia], part[..., ib]
    size = np.abs(a) + np.abs(b)
    err = size * (table + arith + np.abs(angles) * 2.0**-50)
    z, e = x.copy(), np.zeros_like(x)
    z[..., lo + ia], z[..., lo + ib] = a * cos - b * sin, b * cos + a * sin
    e[..., lo + ia] = e[..., lo + ib] = err
    return z, e


def check_rotation(y, x, positions, rotary_dim=D, layout="half", trailing=False, table=EAGER, name="", base=10000.0):
    """``y`` (any backend) is ``x`` rotated and rounded once, as the module docstring states."""
    dtype = str(x.dtype).rsplit(".", 1)[-1]
    assert str(y.dtype).rsplit(".", 1)[-1] == dtype and tuple(y.shape) == tuple(x.shape), (name, y.dtype, y.shape)
    got = np.asarray(to_numpy(y), dtype=np.float64)
    if dtype == "float64":  # float64 tables and arithmetic
        table, arith = 2.0**-52, 3 * 2.0**-53
    else:
        arith = 3 * 2.0**-24
    z, e = exact_rotation(to_numpy(x), positions, rotary_dim, layout, trailing, table, base, arith)
    if dtype in LOW:
        low, high = round_to(z - e, dtype), round_to(z + e, dtype)
        bad = (got < low) | (got > high)
    else:
        bad = np.abs(got - z) > e
    assert not bad.any(), (name, dtype, int(bad.sum()), float(np.abs(got - z)[bad].max()))


# -- the calls ----------------------------------------------------------------------------------------------------


class Ropes:
    """The RotaryEmbedding configurations a model uses."""

    def __init__(self):
        self.plain = arrayrope.RotaryEmbedding(D)
        self.partial = arrayrope.RotaryEmbedding(D, rotary_dim=D // 2, layout="interleaved")
        self.bshd = arrayrope.RotaryEmbedding(D, axes="bshd")
        self.trailing = arrayrope.RotaryEmbedding(D, rotary_dim=D // 2, rotary_features="trailing")
        self.freqs = arrayrope.rope_frequencies(D, rotary_dim=PARTIAL)


def every_call(ropes, q, k, steps, rows, offset, offset0, offsets):
    """Every call of the matrix without ``out=``: a dict of name -> results (q's and k's, or x's)."""
    xp = arrayrope.backends.namespace(q)
    wide = q.dtype == xp.float64  # float64 inputs take float64 tables; all others float32 ones (the default)
    cos, sin = arrayrope.rope_tables(ropes.freqs, steps, dtype=xp.float64 if wide else None)
    bshd = ropes.bshd(xp.permute_dims(q, (0, 2, 1, 3)), xp.permute_dims(k, (0, 2, 1, 3)), offset=offset)
    return {
        "apply_rotary": (arrayrope.apply_rotary(q, cos, sin),),
        "apply_rotary, interleaved trailing": (
            arrayrope.apply_rotary(q, cos, sin, layout="interleaved", rotary_features="trailing"),
        ),
        "prefill": ropes.plain(q, k),
        "positions": ropes.plain(q, k, positions=steps + 70_000),
        "positions per row": ropes.plain(q, k, positions=rows),
        "int offset": ropes.plain(q, k, offset=offset),
        "0-d offset": ropes.plain(q, k, offset=offset0),
        "offset per row": ropes.plain(q, k, offset=offsets),
        "partial, interleaved": ropes.partial(q, k, offset=offset),
        "bshd": tuple(xp.permute_dims(t, (0, 2, 1, 3)) for t in bshd),
        "trailing": ropes.trailing(q, k, offset=offset),
    }


def expected_calls(steps, rows, offset, offset0, offsets):
    """name -> (positions, rotary_dim, layout, trailing, inputs it rotates: 1 for x alone, 2 for q and k)."""
    at = steps + offset
    return {
        "apply_rotary": (steps, PARTIAL, "half", False, 1),
        "apply_rotary, interleaved trailing": (steps, PARTIAL, "interleaved", True, 1),
        "prefill": (steps, D, "half", False, 2),
        "positions": (steps + 70_000, D, "half", False, 2),
        "positions per row": (rows, D, "half", False, 2),
        "int offset": (at, D, "half", False, 2),
        "0-d offset": (steps + offset0, D, "half", False, 2),
        "offset per row": (offsets[:, None] + steps, D, "half", False, 2),
        "partial, interleaved": (at, D // 2, "interleaved", False, 2),
        "bshd": (at, D, "half", False, 2),
        "trailing": (at, D // 2, "half", True, 2),
    }


def case(backend, dtype, offset=FAR):
    """Inputs of :func:`every_call` on ``backend`` (q, k in ``dtype``), and what each call should give."""
    rng = np.random.default_rng(3)
    q = backend.asarray(rng.standard_normal((2, HQ, S, D)), dtype=dtype)
    k = backend.asarray(rng.standard_normal((2, HK, S, D)), dtype=dtype)
    steps = np.arange(S)
    rows = np.stack([steps + 1020, steps + FAR])  # across a digit boundary, and up to 2**20 - 1
    offsets = np.array([0, 70_000])
    args = (
        q,
        k,
        backend.asarray(steps),
        backend.asarray(rows),
        offset,
        backend.asarray(1021),
        backend.asarray(offsets),
    )
    return args, expected_calls(steps, rows, offset, 1021, offsets)


def check_calls(got, args, expected, table):
    assert set(got) == set(expected)
    for name, (positions, rdim, layout, trailing, n) in expected.items():
        assert len(got[name]) == n, name
        for x, y in zip(args[:n], got[name], strict=True):
            check_rotation(y, x, positions, rdim, layout, trailing, table, name)


def table_error(backend):
    """The tables' bound on ``backend`` outside a trace: float64 rounded once, or the exact float32 method."""
    return EAGER if "float64" in backend.dtypes else TRACED


# -- eager, every backend ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_every_call_rounds_once(backend, dtype):
    if dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} has no {dtype}")
    args, expected = case(backend, dtype)
    got = every_call(Ropes(), *args)
    check_calls(got, args, expected, table_error(backend))


WRITABLE = ("numpy", "torch", "cupy")


@pytest.mark.parametrize("dtype", ALL)
def test_out_rounds_once(backend, dtype):
    """``apply_rotary(out=)`` into x itself and into a cache slice; ``q_out=``/``k_out=`` in place and into a
    cache slice: the same bits as the fresh output, rounded once."""
    if backend.library not in WRITABLE:
        pytest.skip(f"{backend.name} arrays cannot be written (out= is refused, tests/test_out.py)")
    if dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} has no {dtype}")
    xp = backend.xp
    (q, k, steps, *_), _ = case(backend, dtype)
    f = arrayrope.rope_frequencies(D, rotary_dim=PARTIAL)
    cos, sin = arrayrope.rope_tables(f, steps, dtype=xp.float64 if dtype == "float64" else None)
    fresh = arrayrope.apply_rotary(q, cos, sin, layout="interleaved")
    x = xp.asarray(q, copy=True)
    assert arrayrope.apply_rotary(x, cos, sin, layout="interleaved", out=x) is x
    cache = xp.zeros((2, HQ, S + 3, D), dtype=q.dtype, device=backend.device)
    arrayrope.apply_rotary(q, cos, sin, layout="interleaved", out=cache[:, :, 2 : 2 + S])
    for y in (x, cache[:, :, 2 : 2 + S]):
        assert np.array_equal(to_numpy(y), to_numpy(fresh))
        check_rotation(y, q, np.arange(S), PARTIAL, "interleaved", table=table_error(backend))
    rope = arrayrope.RotaryEmbedding(D)
    q_in, k_cache = xp.asarray(q, copy=True), xp.zeros((2, HK, S + 3, D), dtype=q.dtype, device=backend.device)
    q_fresh, k_fresh = rope(q, k, offset=FAR)
    rope(q_in, k, offset=FAR, q_out=q_in, k_out=k_cache[:, :, 3:])
    assert np.array_equal(to_numpy(q_in), to_numpy(q_fresh))
    assert np.array_equal(to_numpy(k_cache[:, :, 3:]), to_numpy(k_fresh))
    check_rotation(k_cache[:, :, 3:], k, np.arange(S) + FAR, table=table_error(backend))
    assert not to_numpy(k_cache[:, :, :3]).any()


@pytest.mark.parametrize("dtype", LOW)
def test_tables_in_the_inputs_dtype_are_applied_in_float32(backend, dtype):
    """float16 or bfloat16 tables with inputs of their dtype: the products and sums run in float32 all the same,
    rounded once (oracle: the rotation by the given table values, in float64, rounded to ``dtype``)."""
    if dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} has no {dtype}")
    rng = np.random.default_rng(8)
    x = backend.asarray(rng.standard_normal((3, 5, D)), dtype=dtype)
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(D), backend.asarray(np.arange(5) + 300), dtype=dtype)
    for layout in ("half", "interleaved"):
        y = np.asarray(to_numpy(arrayrope.apply_rotary(x, cos, sin, layout=layout)), dtype=np.float64)
        xs, c, s = (np.asarray(to_numpy(t), dtype=np.float64) for t in (x, cos, sin))
        ia, ib = (
            (np.arange(D // 2), np.arange(D // 2, D)) if layout == "half" else (np.arange(0, D, 2), np.arange(1, D, 2))
        )
        a, b = xs[..., ia], xs[..., ib]
        z = np.empty_like(xs)
        z[..., ia], z[..., ib] = a * c - b * s, b * c + a * s
        e = np.empty_like(xs)
        e[..., ia] = e[..., ib] = (np.abs(a) + np.abs(b)) * 3 * 2.0**-24
        assert ((round_to(z - e, dtype) <= y) & (y <= round_to(z + e, dtype))).all(), layout


@pytest.mark.parametrize("dtype", ALL)
def test_tables_of_every_dtype_are_rounded_once(backend, dtype):
    """``rope_tables(dtype=...)``: cos and sin rounded once to ``dtype`` from values within ``near`` of the exact
    ones (float64 where the device has it, else the exact float32 method); the sinusoidal embedding holds the
    same values. Oracle: cos/sin of the exactly reduced angles of arrayrope's frequencies."""
    if dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} has no {dtype}")
    f = arrayrope.rope_frequencies(D)
    positions = np.array([0, 1, 1023, 1024, 70_000, FAR, 2**20 - 1])
    cos, sin = arrayrope.rope_tables(f, backend.asarray(positions), dtype=dtype)
    pe = arrayrope.sinusoidal_embedding(D, backend.asarray(positions), dtype=dtype)
    exact_cos, exact_sin = exact_cos_sin(positions, np.asarray(f.inv_freq))
    wide = "float64" in backend.dtypes
    near = 2.0**-51 if wide else TRACED
    for got, want in ((cos, exact_cos), (sin, exact_sin), (pe[:, 1::2], exact_cos), (pe[:, ::2], exact_sin)):
        assert str(got.dtype).rsplit(".", 1)[-1] == dtype
        got = np.asarray(to_numpy(got), dtype=np.float64)
        if dtype == "float64" or (dtype == "float32" and not wide):
            assert np.abs(got - want).max() <= near
        else:
            assert ((round_to(want - near, dtype) <= got) & (got <= round_to(want + near, dtype))).all()


# -- PyTorch: torch.compile and torch.export ------------------------------------------------------------------

torch_params = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda")]


def torch_backend(device):
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch")
    from arrayrope.testing import available_backends

    name = "torch" if device == "cpu" else "torch-cuda"
    return next(b for b in available_backends(name))


@pytest.fixture
def fresh_dynamo():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


@pytest.mark.parametrize("device", torch_params)
@pytest.mark.parametrize(
    "dtype,dynamic,backend_name",
    [("bfloat16", None, "inductor"), ("float16", None, "aot_eager"), ("bfloat16", True, "aot_eager")],
)
def test_every_call_compiles_whole(device, dtype, dynamic, backend_name, fresh_dynamo):
    """One graph for every call (``fullgraph=True``), its results rounded once from the exact float32 tables:
    inductor's code, and dynamic shapes (the slowest to trace: one dtype each; float16 takes the same ops)."""
    import torch

    backend = torch_backend(device)
    ropes = Ropes()
    args, expected = case(backend, dtype)
    compiled = torch.compile(lambda *a: every_call(ropes, *a), fullgraph=True, dynamic=dynamic, backend=backend_name)
    check_calls(compiled(*args), args, expected, TRACED)
    assert fresh_dynamo["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("device", torch_params)
@pytest.mark.parametrize("dtype", LOW)
def test_out_compiles_whole(device, dtype, fresh_dynamo):
    """``q_out=``/``k_out=`` (q in place, k into its cache) and ``apply_rotary(out=)`` under ``fullgraph=True``: a
    decode loop of 12 steps compiles at most twice, every step rounded once."""
    import torch

    backend = torch_backend(device)
    rope = arrayrope.RotaryEmbedding(D)
    f = arrayrope.rope_frequencies(D, rotary_dim=PARTIAL)

    def step(q, k, cache, x, buffer, offset: int):
        cos, sin = arrayrope.rope_tables(f, torch.arange(offset, offset + 1, device=q.device))
        arrayrope.apply_rotary(x, cos, sin, out=buffer)
        return rope(q, k, offset=offset, q_out=q, k_out=cache[:, :, offset : offset + 1])

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    rng = np.random.default_rng(5)
    cache = torch.zeros((2, HK, 20, D), dtype=getattr(torch, dtype), device=backend.device)
    keys = []
    for i in range(12):
        q, k, x = (backend.asarray(rng.standard_normal((2, h, 1, D)), dtype=dtype) for h in (HQ, HK, HQ))
        q_in, buffer = q.clone(), torch.empty_like(x)
        compiled(q, k, cache, x, buffer, i)
        check_rotation(q, q_in, [i], table=TRACED, name="q in place")
        check_rotation(buffer, x, [i], PARTIAL, table=TRACED, name="apply_rotary(out=)")
        keys.append(k)
    check_rotation(cache[:, :, :12], torch.cat(keys, 2), np.arange(12), table=TRACED, name="k cache")
    assert not cache[:, :, 12:].any()
    assert fresh_dynamo["stats"]["unique_graphs"] <= 2


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non-strict"])
def test_torch_export(dtype, strict):
    """A module holding RotaryEmbeddings, exported with dynamic batch and sequence: no float64 in the program,
    and its results rounded once at sizes and positions other than the traced ones."""
    torch = pytest.importorskip("torch")
    backend = torch_backend("cpu")
    ropes = Ropes()

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.plain, self.partial = ropes.plain, ropes.partial

        def forward(self, q, k, positions, offsets):
            return (*self.plain(q, k, positions=positions), *self.partial(q, k, offset=offsets))

    def inputs(batch, seq, top):
        rng = np.random.default_rng(batch * seq)
        q = backend.asarray(rng.standard_normal((batch, HQ, seq, D)), dtype=dtype)
        k = backend.asarray(rng.standard_normal((batch, HK, seq, D)), dtype=dtype)
        positions = top - 1 - np.arange(batch * seq)[::-1].reshape(batch, seq) * 997
        return q, k, torch.tensor(positions), torch.tensor(top - seq - np.arange(batch) * 12_345)

    b, s = torch.export.Dim("B"), torch.export.Dim("S")
    program = torch.export.export(
        Attention(),
        inputs(2, 5, 100),
        strict=strict,
        dynamic_shapes={"q": {0: b, 2: s}, "k": {0: b, 2: s}, "positions": {0: b, 1: s}, "offsets": {0: b}},
    )
    values = [n.meta["val"] for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    assert values and not [v for v in values if v.dtype == torch.float64]
    for batch, seq in ((3, 7), (1, 33)):
        q, k, positions, offsets = inputs(batch, seq, 2**20)
        got = program.module()(q, k, positions, offsets)
        rows = offsets.numpy()[:, None] + np.arange(seq)
        for x, y, at, rdim, layout in zip(
            (q, k, q, k),
            got,
            (positions.numpy(),) * 2 + (rows,) * 2,
            (D, D, D // 2, D // 2),
            ("half", "half", "interleaved", "interleaved"),
            strict=True,
        ):
            check_rotation(y, x, at, rdim, layout, table=TRACED)


def test_the_readme_example_compiles_whole(fresh_dynamo):
    """The README's PyTorch block (bfloat16, a decode step at per-row offsets) runs as pasted, and its call
    compiled with ``fullgraph=True`` gives one graph; eager's results and the compiled ones are rounded once."""
    torch = pytest.importorskip("torch")
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "bfloat16" in b]
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    rope, q, k = scope["rope"], scope["q"], scope["k"]
    at = np.array([[17], [230]])
    compiled = torch.compile(lambda q, k, offset: rope(q, k, offset=offset), fullgraph=True)
    for x, traced, eager in zip(
        (q, k), compiled(q, k, torch.tensor([17, 230])), (scope["q_rot"], scope["k_rot"]), strict=True
    ):
        check_rotation(traced, x, at, 128, table=TRACED)
        check_rotation(eager, x, at, 128)
    assert fresh_dynamo["stats"]["unique_graphs"] == 1


# -- JAX: jax.jit with traced offsets ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", LOW)
def test_every_call_under_jax_jit(dtype):
    """Every call traced by ``jax.jit``, the offsets and positions traced values, on each of JAX's devices."""
    jax = pytest.importorskip("jax")
    from arrayrope.testing import available_backends

    for backend in available_backends("jax"):  # the CPU, and CUDA where JAX has it
        ropes = Ropes()
        args, expected = case(backend, dtype)
        jitted = jax.jit(lambda *a, ropes=ropes: every_call(ropes, *a))
        check_calls(jitted(*args), args, expected, TRACED)


# -- the rounding figures --------------------------------------------------------------------------------------

#: The figures the precision page of the documentation states, checked against the measurement below.
DOCS = Path(__file__).parents[1] / "docs" / "guide" / "precision.md"


def rounding_figures():
    """Fraction of elements equal to the correctly rounded rotation, arrayrope and transformers' apply function,
    for bfloat16 and float16 queries (1, 8, 4096, 128) at positions 0..4095, base 500000 (Llama 3's)."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=1024, num_attention_heads=8, rope_theta=500_000.0, max_position_embeddings=4096)
    hf_rope = llama.LlamaRotaryEmbedding(config)
    steps: dict[str, tuple[int, float]] = {}
    rope = arrayrope.RotaryEmbedding.from_config(config.to_dict())
    positions = torch.arange(4096)[None]
    figures = {}
    for dtype in LOW:
        q = torch.tensor(np.random.default_rng(11).standard_normal((1, 8, 4096, 128)), dtype=getattr(torch, dtype))
        z, _ = exact_rotation(q.float().numpy(), np.arange(4096), 128, "half", base=500_000.0)
        # the oracle here is the float64 rotation with float64 angles; z's own error (1e-16 relative) moves no element
        correct = round_to(z, dtype)
        rotated = rope(q)
        check_rotation(rotated, q, np.arange(4096), 128, base=500_000.0)  # the bound, on every element
        ours = rotated.float().numpy()
        cos, sin = hf_rope(q, positions)
        theirs, _ = llama.apply_rotary_pos_emb(q, q, cos, sin)
        figures[dtype] = (float(np.mean(ours == correct)), float(np.mean(theirs.float().numpy() == correct)))
        differ = ours != correct
        steps[dtype] = (
            int(differ.sum()),
            float(np.max(np.abs(ours[differ] - correct[differ]) / ulp(correct[differ], dtype))),
        )
    return figures, steps


def test_rounding_figures():
    """arrayrope's bfloat16 and float16 rotations are the correctly rounded ones in all but about one element in
    ten thousand (those within the float32 computation's error of a rounding boundary); transformers' apply
    function, fed its own bfloat16 tables, rounds tables, products and sums, and misses about a third. The
    precision page states these figures, to the digits it shows."""
    figures, steps = rounding_figures()
    for dtype, (ours, theirs) in figures.items():
        assert ours >= 0.9998, (dtype, ours)
        assert theirs <= 0.9, (dtype, theirs)
    text = DOCS.read_text()
    differing = re.search(r"every such element \((\d+) in bfloat16, (\d+) in float16\) is one unit", text)
    assert differing, "the precision page no longer states how many elements differ, and by how much"
    assert (steps["bfloat16"], steps["float16"]) == ((int(differing.group(1)), 1.0), (int(differing.group(2)), 1.0))
    for dtype, (ours, theirs) in figures.items():
        row = re.search(rf"^\| {dtype} \| ([0-9.]+) % \| ([0-9.]+) % \|$", text, re.M)
        assert row, f"the precision page has no row for {dtype}"
        shown = (float(row.group(1)), float(row.group(2)))
        digits = (len(row.group(1).split(".")[1]), len(row.group(2).split(".")[1]))
        assert shown == (round(100 * ours, digits[0]), round(100 * theirs, digits[1])), (dtype, shown, figures)


if __name__ == "__main__":  # the figures, for the docs: python tests/test_low_precision.py
    sys.path.insert(0, str(Path(__file__).parent))
    found, differ = rounding_figures()
    for dtype, (ours, theirs) in found.items():
        print(f"| {dtype} | {100 * ours:.4f} % | {100 * theirs:.2f} % |")
    print({dtype: f"{n} elements differ, at most {worst:g} ulp" for dtype, (n, worst) in differ.items()})
