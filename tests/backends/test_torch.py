"""The PyTorch fast path (``backends/torch.py``): autograd through the reference, strided tensors through
the slice kernel, and torch.compile, against explicit rotation matrices and the reference."""

from __future__ import annotations

import numpy as np
import pytest

import arrayrope
from arrayrope._lib.rotation import rotate_reference
from arrayrope.testing import assert_close
from helpers import random_case, rope_by_matrix

torch = pytest.importorskip("torch")

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

LAYOUTS = ("half", "interleaved")
RNG = np.random.default_rng(7)


def test_autograd_uses_reference():
    f = arrayrope.rope_frequencies(16)
    cos, sin = arrayrope.rope_tables(f, 5, xp=torch, dtype="float64")
    x = torch.tensor(RNG.standard_normal((2, 5, 16)), requires_grad=True)
    w = torch.tensor(RNG.standard_normal((2, 5, 16)))
    (arrayrope.apply_rotary(x, cos, sin) * w).sum().backward()
    # d/dx <R x, w> = R^T w: rotating w by the negative angles
    expected = rope_by_matrix(w.numpy(), -np.arange(5.0), f.inv_freq, "half")
    assert_close(x.grad, expected, rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)
    with torch.no_grad():
        out = arrayrope.apply_rotary(x, cos, sin)
    assert not out.requires_grad
    assert_close(
        out,
        rope_by_matrix(x.detach().numpy(), np.arange(5), f.inv_freq, "half"),
        rtol=1e-12,
        atol=1e-12,
        check_namespace=False,
        check_dtype=False,
    )


def test_autograd_gives_the_inverse_rotation_in_both_layouts():
    x, f, pos = random_case((1, 2, 5, 8), rotary_dim=6)
    g = np.random.default_rng(7).standard_normal(x.shape)
    c, s = arrayrope.rope_tables(f, torch.as_tensor(pos), dtype=torch.float64)
    for layout in LAYOUTS:
        xt = torch.tensor(x, requires_grad=True)
        (arrayrope.apply_rotary(xt, c, s, layout=layout) * torch.tensor(g)).sum().backward()
        # d/dx <R x, g> = R^T g = rotation by -p
        expected = rope_by_matrix(g, -pos, f.inv_freq, layout)
        np.testing.assert_allclose(xt.grad.numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_inputs(layout):
    """Tensors the blocked kernel must not flatten (transposed, sliced) take the slice kernel."""
    base = torch.from_numpy(RNG.standard_normal((2, 900, 4, 160)).astype(np.float32))
    cos, sin = (torch.from_numpy(t) for t in arrayrope.rope_tables(arrayrope.rope_frequencies(128), 900))
    for x in (base.transpose(1, 2)[..., :128], base.transpose(1, 2)[..., 32:]):
        before = x.clone()
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert_close(out, rotate_reference(arrayrope.backends.namespace(x), x, cos, sin, layout))
        assert torch.equal(x, before)


def test_torch_compile():
    x, f, pos = random_case((1, 2, 5, 8))
    c, s = arrayrope.rope_tables(f, torch.as_tensor(pos))
    xt = torch.tensor(x, dtype=torch.float32)
    compiled = torch.compile(lambda a, b, d: arrayrope.apply_rotary(a, b, d), fullgraph=True)
    np.testing.assert_allclose(compiled(xt, c, s).numpy(), rope_by_matrix(x, pos, f.inv_freq, "half"), atol=2e-6)
