"""Which library an array belongs to, its namespace, device and capabilities (``backends/_namespace.py``).

The oracle is what each library module declares in the registry (``Backend.name``,
``xp``, ``native``, ``dtypes``, ``lazy``), written by hand for every library, and
plain objects whose answers are known.
"""

from __future__ import annotations

import array_api_compat
import array_api_compat.numpy
import numpy as np
import pytest

from arrayrope.backends import (
    concrete,
    default_namespace,
    device_of,
    has_float64,
    is_array,
    is_integral,
    is_real_floating,
    known,
    library_name,
    library_of,
    namespace,
    same_device,
    to_device,
)
from helpers import on_device


class Impostor:
    """Not an array: its module is not an array library's."""

    dtype = "float32"
    shape = (2,)


def test_library_of_every_backend_is_its_registry_library(backend):
    assert library_of(backend.asarray(np.zeros(2), dtype="float32")) == backend.library
    assert library_of(backend.xp.asarray(np.arange(3), device=backend.device)) == backend.library


@pytest.mark.parametrize("obj", [[1.0, 2.0], (1,), 3.0, 2, "array", None, Impostor()])
def test_library_of_other_objects_is_none(obj):
    assert library_of(obj) is None
    assert not is_array(obj)


def test_library_of_numpy_scalars_and_subclasses():
    assert library_of(np.float32(1.0)) == "numpy"
    assert library_of(np.ma.masked_array([1.0])) == "numpy"


def test_is_array(backend):
    assert is_array(backend.asarray(np.zeros(2), dtype="float32"))


def test_namespace_of_arrays_is_the_registry_namespace(backend):
    x = backend.asarray(np.ones(3), dtype="float32")
    assert namespace(x) is backend.xp
    with pytest.raises(TypeError, match=r"^argument 1 must be an array .*, got None$"):  # None is no array
        namespace(x, None, x)
    assert namespace(x, xp=backend.xp) is backend.xp


def test_xp_is_normalised_from_the_library_module(backend):
    """``xp=numpy``, ``xp=torch``, ``xp=dask.array``... give the compliant namespace the registry declares."""
    assert namespace(xp=backend.native) is backend.xp
    assert namespace(xp=backend.xp) is backend.xp
    assert namespace(backend.asarray(np.ones(2), dtype="float32"), xp=backend.native) is backend.xp


def test_default_namespace_is_numpys():
    assert default_namespace() is array_api_compat.numpy
    assert namespace() is array_api_compat.numpy


@pytest.mark.parametrize("value, kind", [([1.0, 2.0], "list"), (3.0, "float"), (Impostor(), "Impostor")])
def test_a_non_array_is_named_in_the_error(value, kind):
    with pytest.raises(TypeError, match=rf"^positions must be an array \(NumPy, PyTorch, .*\), got {kind}$"):
        namespace(np.ones(2), value, names=("x", "positions"))
    with pytest.raises(TypeError, match=rf"^argument 0 must be an array .*got {kind}$"):
        namespace(value)


def test_mixed_libraries_name_both_arguments():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(
        TypeError,
        match=r"^cos is a array_api_strict array but x is a numpy array; pass arrays of one "
        r"library$",
    ):
        namespace(np.ones(2), strict.ones(2), names=("x", "cos"))
    with pytest.raises(TypeError, match=r"^argument 1 is a numpy array but argument 0 is a array_api_strict array"):
        namespace(strict.ones(2), np.ones(2))


def test_arrays_of_another_library_than_xp_are_refused():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(
        TypeError,
        match=r"^positions is a numpy array but xp=array_api_strict; pass xp=None or arrays "
        r"of that library$",
    ):
        namespace(np.ones(2), xp=strict, names=("positions",))


def test_torch_and_numpy_are_told_apart_by_name():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"^sin is a torch array but x is a numpy array"):
        namespace(np.ones(2), torch.ones(2), names=("x", "sin"))


def test_library_name_of_namespaces():
    assert library_name(array_api_compat.numpy) == "numpy"
    strict = pytest.importorskip("array_api_strict")
    assert library_name(strict) == "array_api_strict"


def test_float64_support_is_what_the_registry_declares(backend):
    assert has_float64(backend.xp, backend.device) == ("float64" in backend.dtypes)


def test_values_exist_for_every_eager_array_and_not_for_graphs(backend):
    """Eager arrays of every library hold values that may be read; a Dask graph, a tracer's stand-in (``jax.jit``,
    ``torch.compile``) and a tensor without storage do not."""
    x = backend.asarray(np.ones(2), dtype="float32")
    assert concrete(x) == (backend.library != "dask")
    if backend.library == "jax":
        import jax

        seen = []
        jax.jit(lambda a: seen.append(concrete(a)) or a)(x)
        assert seen == [False]
    if backend.library == "torch":
        import torch

        assert not concrete(torch.empty(2, device="meta"))
        seen = []
        torch.compile(lambda a: seen.append(concrete(a)) or a * 1, backend="eager", fullgraph=False)(x)
        assert seen and not any(seen)


DTYPE_KINDS = {
    "float16": (True, False),
    "float32": (True, False),
    "float64": (True, False),
    "bfloat16": (True, False),
    "int8": (False, True),
    "int32": (False, True),
    "int64": (False, True),
    "uint8": (False, True),
    "bool": (False, False),
    "complex64": (False, False),
}


def test_dtype_kinds(backend):
    """(real floating, integral) of each dtype the namespace has; bool is not an integer here."""
    seen = 0
    for name, (floating, integral) in DTYPE_KINDS.items():
        dtype = getattr(backend.xp, name, None)
        if dtype is None:
            continue
        seen += 1
        assert is_real_floating(backend.xp, dtype) is floating, name
        assert is_integral(backend.xp, dtype) is integral, name
    assert seen >= 8


def test_dtype_kinds_of_foreign_objects_are_false():
    xp = array_api_compat.numpy
    assert not is_real_floating(xp, "not a dtype")
    assert not is_integral(xp, object())


@pytest.mark.parametrize("value, expected", [(0, True), (7, True), (None, False), (float("nan"), False), (3.0, True)])
def test_known_shape_entries(value, expected):
    assert known(value) is expected


def test_same_device_names_both_arguments():
    strict = pytest.importorskip("array_api_strict")
    a = strict.ones(2, device=strict.Device("CPU_DEVICE"))
    b = strict.ones(2, device=strict.Device("device1"))
    same_device(a, strict.ones(3, device=strict.Device("CPU_DEVICE")), "x", "cos")
    with pytest.raises(ValueError, match=r"^cos is on device .*device1.* but x is on device .*CPU_DEVICE.*; move one"):
        same_device(a, b, "x", "cos")


def test_same_device_on_every_backend(backend):
    a = backend.asarray(np.ones(2), dtype="float32")
    same_device(a, backend.asarray(np.zeros(3), dtype="float32"), "x", "cos")
    assert on_device(device_of(a), backend.device)


def test_to_device_moves_and_keeps():
    strict = pytest.importorskip("array_api_strict")
    a = strict.asarray([1.0, 2.0], device=strict.Device("CPU_DEVICE"))
    moved = to_device(a, strict.Device("device1"))
    assert device_of(moved) == strict.Device("device1") and device_of(a) == strict.Device("CPU_DEVICE")
    np.testing.assert_array_equal(np.asarray(strict.asarray(moved, device=strict.Device("CPU_DEVICE"))), [1.0, 2.0])
