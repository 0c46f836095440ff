"""torch.compile and torch.export of arrayrope on PyTorch: whole graphs, decode loops that compile at most
twice, graphs without float64 that are right at every position, gradients.

Every compiled function here uses ``fullgraph=True``: a graph break is an error. Oracles: rotations by
explicit matrices on float64 angles (``helpers.rope_by_matrix``; at positions up to ``2**20`` a float64
angle is off by at most ``2**20 * 2**-53 = 1.2e-10``, far below the tolerances), the published formulas of
xPos, M-RoPE and axial RoPE in float64 NumPy, the eager calls (float64 angles rounded once, within
``2**-25`` of the exact tables), and the transposed rotation for gradients.

Tolerance. Inside a trace the tables carry no float64 (the graph of a float32 model runs wherever it is
deployed): they come from the exact float32 method, within ``TABLE = 2.5 * 2**-23`` of the exact values at
every position (``tests/_lib/test_digits.py``), where eager float32 tables are within ``2**-25``. A rotated
pair ``x1 cos - x2 sin`` then differs from the exact value by at most ``(|x1| + |x2|) * TABLE`` plus float32
rounding of two products and a sum (3 ulps): :func:`tolerance` takes ``2 * max|x|`` for ``|x1| + |x2|``,
and adds eager's own error where eager is the other side.

The same tests run on CUDA where a GPU is present (``DEVICES``). ``mode="reduce-overhead"`` records CUDA
graphs there; on the CPU it compiles as the default mode does.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import arrayrope
from helpers import exact_cos_sin, inv_freq_formula, rope_by_matrix

torch = pytest.importorskip("torch")

counters = torch._dynamo.utils.counters

#: The exact float32 method's bound on cos/sin (float64 digit rotations rounded once, composed in float32).
TABLE = 2.5 * 2.0**-23
EAGER = 2.0**-25  # eager float32 tables: float64 values rounded once

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for PyTorch")
    ),
]
D, HQ, HK = 16, 4, 2  # grouped-query attention: 4 query heads, 2 key heads
#: (mode, dynamic) of torch.compile
SETTINGS = [("default", None), ("default", True), ("reduce-overhead", None), ("reduce-overhead", True)]
#: Positions around digit boundaries and far out: 1023/1024 (a new digit), 70000, up to 2**20.
FAR = 2**20 - 6


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles afresh and counts its own graphs."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def tolerance(x, *, eager=False):
    """Largest error of a rotated float32 ``x`` against the exact rotation (and against eager's, if asked)."""
    m = 2 * float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
    return m * (TABLE + (EAGER if eager else 0.0) + 3 * 2.0**-24)


def host(t):
    return t.detach().cpu().double().numpy()


def rotated(x, positions, rotary_dim=D, layout="half", trailing=False):
    """The oracle: ``x`` (B, H, S, D) rotated at ``positions`` (S,) or (B, S) by explicit matrices."""
    x = np.asarray(x, dtype=np.float64)
    inv = inv_freq_formula(rotary_dim, 10000.0)
    positions = np.broadcast_to(np.asarray(positions), (x.shape[0], x.shape[2]))
    part = slice(D - rotary_dim, D) if trailing else slice(0, rotary_dim)  # the rest passes through
    out = x.copy()
    for b in range(x.shape[0]):
        out[b, ..., part] = rope_by_matrix(x[b, ..., part], positions[b], inv, layout)
    return out


class Calls(torch.nn.Module):
    """Every kind of RotaryEmbedding call a model makes, in one forward: one graph."""

    def __init__(self):
        super().__init__()
        self.plain = arrayrope.RotaryEmbedding(D)
        self.partial = arrayrope.RotaryEmbedding(D, rotary_dim=D // 2, layout="interleaved")
        self.bshd = arrayrope.RotaryEmbedding(D, axes="bshd")
        self.trailing = arrayrope.RotaryEmbedding(D, rotary_dim=D // 2, rotary_features="trailing")

    def forward(self, q, k, positions, rows, offset: int, offset0, offsets):
        bshd = self.bshd(q.transpose(1, 2), k.transpose(1, 2), offset=offset)
        return {
            "prefill": self.plain(q, k),
            "positions": self.plain(q, k, positions=positions),
            "positions per row": self.plain(q, k, positions=rows),
            "int offset": self.plain(q, k, offset=offset),
            "0-d offset": self.plain(q, k, offset=offset0),
            "offset per row": self.plain(q, k, offset=offsets),
            "partial, interleaved": self.partial(q, k, offset=offset),
            "bshd": tuple(t.transpose(1, 2) for t in bshd),
            "trailing": self.trailing(q, k, offset=offset),
        }


def calls_case(device, s=6):
    rng = np.random.default_rng(3)
    q = torch.tensor(rng.standard_normal((2, HQ, s, D)), dtype=torch.float32, device=device)
    k = torch.tensor(rng.standard_normal((2, HK, s, D)), dtype=torch.float32, device=device)
    steps = np.arange(s)
    rows = np.stack([steps + 1020, steps + FAR])  # across a digit boundary, and up to 2**20 - 1
    offsets = np.array([0, 70_000])
    args = (
        q,
        k,
        torch.tensor(steps + 70_000, device=device),
        torch.tensor(rows, device=device),
        FAR,
        torch.tensor(1021, device=device),
        torch.tensor(offsets, device=device),
    )
    expected = {  # name -> (positions, rotary_dim, layout, trailing)
        "prefill": (steps, D, "half", False),
        "positions": (steps + 70_000, D, "half", False),
        "positions per row": (rows, D, "half", False),
        "int offset": (steps + FAR, D, "half", False),
        "0-d offset": (steps + 1021, D, "half", False),
        "offset per row": (offsets[:, None] + steps, D, "half", False),
        "partial, interleaved": (steps + FAR, D // 2, "interleaved", False),
        "bshd": (steps + FAR, D, "half", False),
        "trailing": (steps + FAR, D // 2, "half", True),
    }
    return args, expected


def check_calls(got, eager, args, expected):
    assert set(got) == set(expected)
    for name, (positions, rdim, layout, trailing) in expected.items():
        for x, y, e in zip(args[:2], got[name], eager[name], strict=True):
            assert y.dtype == torch.float32 and y.shape == x.shape and y.device == x.device, name
            want = rotated(host(x), positions, rdim, layout, trailing)
            err = np.abs(host(y) - want).max()
            assert err <= tolerance(host(x)), (name, err, tolerance(host(x)))
            assert np.abs(host(y) - host(e)).max() <= tolerance(host(x), eager=True), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [None, True])
def test_every_rotary_embedding_call_traces_whole(device, dynamic):
    """Prefill, positions (S,) and (B, S), int, 0-d and per-row offsets, partial interleaved, bshd, trailing,
    grouped-query keys: one graph without a break (dynamo and AOT autograd; inductor below)."""
    model = Calls()
    args, expected = calls_case(device)
    got = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=dynamic)(*args)
    check_calls(got, model(*args), args, expected)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_every_rotary_embedding_call_compiles_with_inductor(device):
    model = Calls()
    args, expected = calls_case(device)
    compiled = torch.compile(model, fullgraph=True)
    check_calls(compiled(*args), model(*args), args, expected)
    (q, k, *rest) = args
    check_calls(compiled(q * 2, k * 2, *rest), model(q * 2, k * 2, *rest), (q * 2, k * 2, *rest), expected)
    assert counters["stats"]["unique_graphs"] == 1


def test_graphs_of_float32_models_hold_no_float64():
    """Tables, digit rotations and frequencies enter the graph as float32 constants, computed outside it."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model = Calls()
    args, _ = calls_case("cpu")
    torch.compile(model, fullgraph=True, backend=record)(*args)
    (gm,) = graphs
    values = [n.meta["example_value"] for n in gm.graph.nodes if "example_value" in n.meta]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    assert tensors and not [t for t in tensors if t.dtype == torch.float64]
    constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert constants and all(c.dtype in (torch.float32, torch.int64) for c in constants)
    # a float64 model keeps float64 tables, exact to float64 precision as eager's: against cos/sin of the
    # exactly reduced angles (a float64 angle p * theta is itself off by up to 1.2e-10 here)
    x = np.random.default_rng(0).standard_normal((1, 2, 5, D))
    rope = arrayrope.RotaryEmbedding(D)
    got = torch.compile(lambda a: rope(a, offset=FAR), fullgraph=True, backend="aot_eager")(torch.tensor(x))
    c, s = exact_cos_sin(np.arange(5) + FAR, inv_freq_formula(D, 10000.0))
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    assert got.dtype == torch.float64 and np.abs(got.numpy() - want).max() <= 1e-14 * np.abs(x).max()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,dynamic", SETTINGS)
def test_apply_rotary_and_tables_compile(device, mode, dynamic):
    f = arrayrope.rope_frequencies(D, rotary_dim=12)

    def rotate(x, positions):
        cos, sin = arrayrope.rope_tables(f, positions)
        return arrayrope.apply_rotary(x, cos, sin)

    x = torch.tensor(np.random.default_rng(1).standard_normal((2, 3, 7, D)), dtype=torch.float32, device=device)
    positions = torch.tensor([0, 1, 1023, 1024, 70_000, FAR, 2**20 - 1], device=device)
    got = torch.compile(rotate, fullgraph=True, mode=mode, dynamic=dynamic)(x, positions)
    want = rotated(host(x), host(positions).astype(np.int64), rotary_dim=12)
    assert np.abs(host(got) - want).max() <= tolerance(host(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,dynamic", SETTINGS)
def test_decode_step_compiles(device, mode, dynamic):
    rope = arrayrope.RotaryEmbedding(D)
    step = torch.compile(lambda q, k, offset: rope(q, k, offset=offset), fullgraph=True, mode=mode, dynamic=dynamic)
    rng = np.random.default_rng(2)
    q = torch.tensor(rng.standard_normal((2, HQ, 1, D)), dtype=torch.float32, device=device)
    k = torch.tensor(rng.standard_normal((2, HK, 1, D)), dtype=torch.float32, device=device)
    for offset in (5, 6, FAR):
        for x, y in zip((q, k), step(q, k, offset), strict=True):
            assert np.abs(host(y) - rotated(host(x), [offset])).max() <= tolerance(host(x))


def decode_loop(device, offset_of, steps=100, backend="inductor", dynamic=None):
    """``steps`` decode steps at increasing offsets; each against eager and the oracle. The graphs compiled."""
    rope = arrayrope.RotaryEmbedding(D)
    step = torch.compile(
        lambda q, k, offset: rope(q, k, offset=offset), fullgraph=True, backend=backend, dynamic=dynamic
    )
    rng = np.random.default_rng(4)
    q = torch.tensor(rng.standard_normal((2, HQ, 1, D)), dtype=torch.float32, device=device)
    k = torch.tensor(rng.standard_normal((2, HK, 1, D)), dtype=torch.float32, device=device)
    for i in range(steps):
        offset = offset_of(1020 + i)  # crosses the digit boundary at 1024
        got, eager = step(q, k, offset), rope(q, k, offset=offset)
        where = np.broadcast_to(host(offset) if isinstance(offset, torch.Tensor) else offset, (2,))[:, None]
        for x, y, e in zip((q, k), got, eager, strict=True):
            assert np.abs(host(y) - rotated(host(x), where)).max() <= tolerance(host(x))
            assert np.abs(host(y) - host(e)).max() <= tolerance(host(x), eager=True)
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_generation_loop_with_an_int_offset_compiles_twice(device):
    """dynamo specializes the first int offset and makes it dynamic at the second value: 2 graphs for 100
    steps (1 recompile, the issue allows 2); nothing else (cache lookups, tables) recompiles."""
    assert decode_loop(device, int) == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["0-d", "per row"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_a_generation_loop_with_tensor_offsets_compiles_once(device, kind, dynamic):
    def offset(i):
        return torch.tensor(i, device=device) if kind == "0-d" else torch.tensor([i, 2 * i], device=device)

    assert decode_loop(device, offset, backend="eager", dynamic=dynamic) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_with_dynamic_true_an_int_offset_compiles_once(device):
    assert decode_loop(device, int, steps=20, backend="eager", dynamic=True) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_sequence_length_types_keep_the_frequencies_of_each_length(device):
    """LongRoPE switches sets beyond its original length, dynamic NTK rescales beyond max_position_embeddings
    (both 32 here): compiled decode steps equal eager ones on either side. A graph keeps the frequencies of
    its length: up to the switch one graph serves every step; beyond it LongRoPE's long set is one more,
    dynamic NTK takes one per length (its frequencies change with every length). Oracle: rotations by explicit
    matrices with the frequencies a fresh instance picks for each length (its first call)."""
    half = D // 2
    types = {
        "longrope": dict(
            scaling={
                "rope_type": "longrope",
                "long_factor": [2.0] * half,
                "short_factor": [1.0] * half,
                "original_max_position_embeddings": 32,
            },
            max_position_embeddings=128,
        ),
        "dynamic": dict(scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=32),
    }
    rng = np.random.default_rng(5)
    q = torch.tensor(rng.standard_normal((1, HQ, 1, D)), dtype=torch.float32, device=device)
    for name, config in types.items():
        torch._dynamo.reset()  # the step below has one code object for both types: each counts its own graphs
        counters.clear()
        rope, eager = arrayrope.RotaryEmbedding(D, **config), arrayrope.RotaryEmbedding(D, **config)
        step = torch.compile(lambda x, offset, rope=rope: rope(x, offset=offset), fullgraph=True, backend="eager")
        graphs = {}
        for offset in range(4, 35):  # lengths 5..35
            got = step(q, offset)
            graphs[offset + 1] = counters["stats"]["unique_graphs"]
            fresh = arrayrope.RotaryEmbedding(D, **config)
            _, used = fresh(q, offset=offset, return_freqs=True)
            want = rope_by_matrix(host(q), [offset], used.inv_freq, "half") * used.attention_factor
            assert np.abs(host(got) - want).max() <= tolerance(host(q)), (name, offset)
            assert np.abs(host(got) - host(eager(q, offset=offset))).max() <= tolerance(host(q), eager=True)
        # up to the switch: the first offset's graph, then the dynamic offset's, and one for the length at the
        # switch itself (a branch of dynamic NTK's rule)
        assert graphs[32] <= 3, (name, graphs)
        assert graphs[35] - graphs[32] <= (1 if name == "longrope" else 3), (name, graphs)
    # a traced position array needs seq_len=, which fixes the frequencies as the ONNX export does
    rope = arrayrope.RotaryEmbedding(D, **types["dynamic"])
    positions = torch.arange(3, device=device) + 40
    got = torch.compile(lambda x, p: rope(x, positions=p, seq_len=43), fullgraph=True, backend="eager")(
        q.expand(1, HQ, 3, D), positions
    )
    want = rope(q.expand(1, HQ, 3, D), positions=positions, seq_len=43)
    assert np.abs(host(got) - host(want)).max() <= tolerance(host(q), eager=True)
    with pytest.raises(Exception, match=r"pass seq_len=|ValueError"):  # dynamo before 2.9 names the type alone
        torch.compile(lambda x, p: rope(x, positions=p), fullgraph=True, backend="eager")(q, positions[:1])


@pytest.mark.parametrize("device", DEVICES)
def test_xpos_axial_and_mrope_tables_trace_whole(device):
    """Against their published formulas in float64 NumPy: xPos scales ``zeta ** (n / scale_base)``, axial
    RoPE's per-axis angles, M-RoPE's sections."""
    f = arrayrope.rope_frequencies(D)
    inv = inv_freq_formula(D, 10000.0)
    positions = torch.tensor([0, 5, 1023, 1024, 4000], device=device)
    qc, qs, kc, ks = torch.compile(lambda p: arrayrope.xpos_tables(f, p), fullgraph=True, backend="aot_eager")(
        positions
    )
    n = host(positions)[:, None]
    zeta = (np.arange(0, D, 2) / D + 0.4) / 1.4
    angle = n * inv
    for got, want in (
        (qc, np.cos(angle) * zeta ** (n / 512)),
        (qs, np.sin(angle) * zeta ** (n / 512)),
        (kc, np.cos(angle) * zeta ** (-n / 512)),
        (ks, np.sin(angle) * zeta ** (-n / 512)),
    ):
        assert got.dtype == torch.float32
        # float32 power (n / 512) * log(zeta): relative error up to |power| * 2**-23 besides the tables'
        np.testing.assert_allclose(host(got), want, rtol=8 * 2.0**-23 * np.abs(n / 512).max() + 1e-6, atol=TABLE)

    coords = torch.stack([torch.arange(12, device=device) % 4, torch.arange(12, device=device) // 4], -1)
    cos, sin = torch.compile(
        lambda c: arrayrope.axial_rope_tables(D, c, axis_dims=(4, 12)), fullgraph=True, backend="aot_eager"
    )(coords)
    c = host(coords)
    angles = np.concatenate(
        [c[:, :1] * 100.0 ** (-np.arange(0, 4, 2) / 4), c[:, 1:] * 100.0 ** (-np.arange(0, 12, 2) / 12)], axis=-1
    )
    np.testing.assert_allclose(host(cos), np.cos(angles), rtol=0, atol=TABLE)
    np.testing.assert_allclose(host(sin), np.sin(angles), rtol=0, atol=TABLE)

    mpos = torch.stack(
        [torch.zeros(2, 5, dtype=torch.int64), torch.arange(5).expand(2, 5) + 2000, torch.arange(5).expand(2, 5) % 2]
    ).to(device)
    for interleaved in (False, True):
        cos, sin = torch.compile(
            lambda p, i=interleaved: arrayrope.mrope_tables(f, p, sections=(2, 3, 3), interleaved=i),
            fullgraph=True,
            backend="aot_eager",
        )(mpos)
        m = host(mpos)
        k = np.arange(D // 2)
        axis = (
            np.where(k % 3 == 1, 1, np.where(k % 3 == 2, 2, 0)) * (k < 3 * np.array([2, 3, 3])[k % 3])
            if interleaved
            else np.repeat([0, 1, 2], [2, 3, 3])
        )
        angle = (
            np.take_along_axis(m[..., None].repeat(D // 2, -1), axis[None, None, None].repeat(2, 1).repeat(5, 2), 0)[0]
            * inv
        )
        np.testing.assert_allclose(host(cos), np.cos(angle), rtol=0, atol=TABLE)
        np.testing.assert_allclose(host(sin), np.sin(angle), rtol=0, atol=TABLE)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [None, True])
def test_gradients_through_compiled_code_match_eager(device, dynamic):
    """d/dx <R x, w> = R^T w, the rotation by the negative angles; cos and sin get eager's gradients too."""
    rng = np.random.default_rng(6)
    f = arrayrope.rope_frequencies(D)
    positions = torch.tensor([3, 1024, FAR], device=device)
    cos, sin = (t.clone().requires_grad_() for t in arrayrope.rope_tables(f, positions))
    x = torch.tensor(rng.standard_normal((2, 3, D)), dtype=torch.float32, device=device, requires_grad=True)
    w = torch.tensor(rng.standard_normal((2, 3, D)), dtype=torch.float32, device=device)

    def grads(fn, *inputs):
        for t in inputs:
            t.grad = None
        (fn(*inputs) * w).sum().backward()
        return [t.grad.clone() for t in inputs]

    compiled = torch.compile(arrayrope.apply_rotary, fullgraph=True, dynamic=dynamic)
    got, eager = grads(compiled, x, cos, sin), grads(arrayrope.apply_rotary, x, cos, sin)
    for g, e in zip(got, eager, strict=True):
        assert torch.allclose(g, e, rtol=0, atol=8 * 2.0**-24 * float(w.abs().max()))
    want = rope_by_matrix(host(w), -host(positions), f.inv_freq, "half")
    assert np.abs(host(got[0]) - want).max() <= tolerance(host(w), eager=True)

    rope = arrayrope.RotaryEmbedding(D)
    q = torch.tensor(rng.standard_normal((2, HQ, 3, D)), dtype=torch.float32, device=device, requires_grad=True)
    k = torch.tensor(rng.standard_normal((2, HK, 3, D)), dtype=torch.float32, device=device, requires_grad=True)
    wq, wk = (torch.tensor(rng.standard_normal(t.shape), dtype=torch.float32, device=device) for t in (q, k))

    def loss(fn):
        q.grad = k.grad = None
        q_rot, k_rot = fn(q, k)
        ((q_rot * wq).sum() + (k_rot * wk).sum()).backward()
        return q.grad.clone(), k.grad.clone()

    step = torch.compile(lambda a, b: rope(a, b, offset=FAR), fullgraph=True, dynamic=dynamic)
    got, eager = loss(step), loss(lambda a, b: rope(a, b, offset=FAR))
    for g, e, wt in zip(got, eager, (wq, wk), strict=True):
        want = rotated(host(wt), -(np.arange(3) + FAR))
        assert np.abs(host(g) - want).max() <= tolerance(host(wt))
        assert np.abs(host(g) - host(e)).max() <= tolerance(host(wt), eager=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_out_writes_into_the_callers_tensors_under_compile(device, backend):
    """apply_rotary(out=) and RotaryEmbedding(q_out=, k_out=) trace whole: the compiled call writes its
    rotation into the caller's tensors (a KV cache slice, q in place) as eager does; a decode loop of 20
    steps compiles at most twice (dynamo makes the int offset dynamic at its second value)."""
    rng = np.random.default_rng(9)
    rope = arrayrope.RotaryEmbedding(D)

    def step(q, k, cache, offset: int):
        return rope(q, k, offset=offset, q_out=q, k_out=cache[:, :, offset : offset + q.shape[2]])

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    cache = torch.zeros((2, HK, 40, D), device=device)
    keys = []
    for i in range(20):
        q = torch.tensor(rng.standard_normal((2, HQ, 1, D)), dtype=torch.float32, device=device)
        k = torch.tensor(rng.standard_normal((2, HK, 1, D)), dtype=torch.float32, device=device)
        q_in = host(q)
        compiled(q, k, cache, i)
        assert np.abs(host(q) - rotated(q_in, [i])).max() <= tolerance(q_in)  # q rotated in place
        keys.append(host(k))
    filled = host(cache)
    assert np.abs(filled[:, :, :20] - rotated(np.concatenate(keys, axis=2), np.arange(20))).max() <= tolerance(filled)
    assert not filled[:, :, 20:].any()
    assert counters["stats"]["unique_graphs"] <= 2

    f = arrayrope.rope_frequencies(D, rotary_dim=12)

    def into(x, positions, out):
        cos, sin = arrayrope.rope_tables(f, positions)
        return arrayrope.apply_rotary(x, cos, sin, out=out)

    x = torch.tensor(rng.standard_normal((2, 3, 7, D)), dtype=torch.float32, device=device)
    positions = torch.tensor([0, 1, 1023, 1024, 70_000, FAR, 2**20 - 1], device=device)
    buffer = torch.zeros((2, 3, 9, D), device=device)
    got = torch.compile(into, fullgraph=True, backend=backend)(x, positions, buffer[:, :, 1:8])
    want = rotated(host(x), host(positions).astype(np.int64), rotary_dim=12)
    assert np.abs(host(buffer[:, :, 1:8]) - want).max() <= tolerance(host(x))
    assert np.abs(host(got) - want).max() <= tolerance(host(x))
    assert not host(buffer[:, :, [0, 8]]).any()


class Exported(torch.nn.Module):
    """A model's attention block: positions when given, else per-row offsets."""

    def __init__(self):
        super().__init__()
        self.rope = arrayrope.RotaryEmbedding(D)

    def forward(self, q, k, positions, offsets):
        return (*self.rope(q, k, positions=positions), *self.rope(q, k, offset=offsets))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non-strict"])
def test_torch_export_with_dynamic_batch_and_sequence(strict):
    """No float64 in the graph (nodes and constants); the exported module matches eager and the oracle at
    positions up to 2**20, for batch and sequence sizes other than the traced ones."""
    b, s = torch.export.Dim("B"), torch.export.Dim("S")
    rng = np.random.default_rng(7)

    def inputs(batch, seq, top):
        q = torch.tensor(rng.standard_normal((batch, HQ, seq, D)), dtype=torch.float32)
        k = torch.tensor(rng.standard_normal((batch, HK, seq, D)), dtype=torch.float32)
        positions = torch.tensor(top - 1 - np.arange(batch * seq)[::-1].reshape(batch, seq) * 997)
        return q, k, positions, torch.tensor(top - seq - np.arange(batch) * 12_345)

    model = Exported()
    program = torch.export.export(
        model,
        inputs(2, 5, 100),
        strict=strict,
        dynamic_shapes={"q": {0: b, 2: s}, "k": {0: b, 2: s}, "positions": {0: b, 1: s}, "offsets": {0: b}},
    )
    nodes = [n.meta["val"] for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    assert nodes and not [v for v in nodes if v.dtype == torch.float64]
    assert program.constants and all(c.dtype != torch.float64 for c in program.constants.values())
    for batch, seq in ((3, 7), (1, 33)):
        q, k, positions, offsets = inputs(batch, seq, 2**20)
        got, eager = program.module()(q, k, positions, offsets), model(q, k, positions, offsets)
        at = (host(positions), host(offsets)[:, None] + np.arange(seq))
        for i, (x, y, e) in enumerate(zip((q, k, q, k), got, eager, strict=True)):
            assert y.shape == x.shape and y.dtype == torch.float32
            assert np.abs(host(y) - rotated(host(x), at[i // 2])).max() <= tolerance(host(x))
            assert np.abs(host(y) - host(e)).max() <= tolerance(host(x), eager=True)


def test_the_first_tensor_may_be_met_inside_torch_compile():
    """A fresh interpreter whose first arrayrope call on a tensor is being compiled: arrayrope's PyTorch module
    loads before any of its lookups is read (dynamo would otherwise fail the graph, or guard on a lookup the
    first call fills and compile again on the next), and no warning comes from the tracer (array_api_compat's
    cached checks are never traced)."""
    code = (
        "import warnings, arrayrope, torch\n"
        "warnings.simplefilter('error')\n"
        "graphs = []\n"
        "rope = arrayrope.RotaryEmbedding(16)\n"
        "step = torch.compile(lambda q, k: rope(q, k), backend=lambda gm, _: graphs.append(gm) or gm.forward)\n"
        "for _ in range(3):\n"
        "    step(torch.randn(1, 2, 4, 16), torch.randn(1, 1, 4, 16))\n"
        "print(len(graphs))\n"
        "f = arrayrope.rope_frequencies(16)\n"
        "fn = lambda x, p: arrayrope.apply_rotary(x, *arrayrope.rope_tables(f, p))\n"
        "y = torch.compile(fn, fullgraph=True, backend='aot_eager')(torch.ones(3, 16), torch.arange(3))\n"
        "print(tuple(y.shape))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1", "(3,", "16)"]  # one graph for the three calls


def _filled(value: int) -> np.ndarray:
    return np.full(3, float(value))


def test_a_graph_keeps_its_constants_when_the_kept_ones_overflow():
    """A graph that reads a kept constant, then one new when the store is full: the one that goes to make room is
    the least recently used, not the one the graph holds (two tensors under one name fail the compiler)."""
    from arrayrope.backends import torch as backend
    from arrayrope.backends._torch_graph import CONSTANTS_KEPT

    xp = arrayrope.backends.namespace(torch.zeros(1))
    backend.constant(xp, _filled, (-1,), None)
    for i in range(1, CONSTANTS_KEPT):
        backend.constant(xp, _filled, (-1 - i,), None)

    def f(x):
        return x + backend.constant(xp, _filled, (-1,), None) + backend.constant(xp, _filled, (10**6,), None)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(torch.zeros(3, dtype=torch.float64))
    assert got.tolist() == [10**6 - 1.0] * 3
