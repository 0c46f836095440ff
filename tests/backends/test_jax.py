"""The JAX path (``backends/jax.py``): the jitted reference inlined into a caller's own jax.jit, with the
tables traced in the same computation, against explicit rotation matrices."""

from __future__ import annotations

import numpy as np
import pytest

import arrayrope
from arrayrope.testing import assert_close
from helpers import rope_by_matrix

jax = pytest.importorskip("jax")

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_kernel_under_jit(layout):
    jnp = jax.numpy
    f = arrayrope.rope_frequencies(32, rotary_dim=16)
    x = jnp.asarray(RNG.standard_normal((2, 6, 32)).astype(np.float32))
    positions = jnp.arange(6)
    fn = jax.jit(lambda a, p: arrayrope.apply_rotary(a, *arrayrope.rope_tables(f, p), layout=layout))
    ref = rope_by_matrix(np.asarray(x), np.arange(6), f.inv_freq, layout)
    assert_close(fn(x, positions), ref, rtol=2e-6, atol=2e-6, check_namespace=False, check_dtype=False)
