"""Which library an array belongs to, its namespace, device and capabilities: decided here, once.

Everything above this package is written against the Array API standard and asks
these functions what it needs to know about an array. Answers that depend only on
an array's type or dtype are cached, so that a call costs dictionary lookups, not
``array_api_compat``'s per-array inspection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable

import array_api_compat as compat
import numpy as np

from .._lib.types import Array, Device, DType, Namespace
from ._libraries import TABLE

# top-level module of an array type -> the library it belongs to
_MODULES = {module: lib.name for lib in TABLE for module in lib.modules}
# libraries whose arrays all live on one device (no device check needed)
_ONE_DEVICE = frozenset(lib.name for lib in TABLE if lib.one_device)
# libraries whose arrays carry their device as ``.device`` (compat.device would return it)
_DEVICE_ATTRIBUTE = frozenset(lib.name for lib in TABLE if lib.device_attribute)

# Keyed by strings (a type's module and name, a namespace's name): torch.compile's tracer guards a dict keyed
# by classes or modules as a whole (any new entry anywhere would recompile every graph that read it), one
# keyed by strings on the entries read alone. Tensors take none of the type caches (see _torch_namespace).
_namespace_of_type: dict[str, Namespace] = {}
_normalized: dict[Hashable, Namespace] = {}
# per namespace, then per dtype or device: torch.compile before PyTorch 2.9 reads no dict with other libraries'
# dtypes or devices among its keys
_dtypes_here: dict[Hashable, dict[Hashable, bool]] = {}
_real_floating: dict[Hashable, dict[Hashable, bool]] = {}
_integral: dict[Hashable, dict[Hashable, bool]] = {}


def library_of(x: object) -> str | None:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"dask"``, ``"cupy"``, ``"array_api_strict"`` or None.

    Decided by the module of the array's type alone: the one place where a module name tells which
    library an object comes from.
    """
    module = type(x).__module__
    found = _MODULES.get(module)  # a top-level module's own types (numpy.ndarray, torch.Tensor) without a split
    return found if found is not None else _MODULES.get(module.split(".", 1)[0])


def _type_key(t: type) -> str:
    return f"{t.__module__}:{t.__qualname__}"


_NDARRAY_KEY = _type_key(np.ndarray)


def is_array(x: object) -> bool:
    """Whether ``x`` is an array of an Array API library."""
    return _torch_namespace(x) is not None or _type_key(type(x)) in _namespace_of_type or compat.is_array_api_obj(x)


def _namespace_of(a: Array) -> Namespace:
    ns = _torch_namespace(a)
    if ns is not None:
        return ns
    key = _type_key(type(a))
    ns = _namespace_of_type.get(key)
    if ns is None:
        ns = compat.array_namespace(a)
        if library_of(a) is not None:  # a namespace that depends on the type alone
            _namespace_of_type[key] = ns
    return ns


def _torch_namespace(x: object) -> Namespace | None:
    """array_api_compat's PyTorch namespace for a tensor, None for anything else; asked first, of every array.

    The first tensor arrayrope sees may be inside ``torch.compile``. The import statement loads arrayrope's
    PyTorch module (a lookup in ``sys.modules`` after the first time), whose loading fills the lookups that
    the code on tensors reads, before any is read: dynamo runs an import statement as it is, but fails a
    graph for which a lookup it read changed while it traced (and refuses ``importlib`` calls).
    """
    if type(x).__module__.split(".", 1)[0] != "torch":
        return None
    from . import torch as backend

    return backend.namespace_of(x)


def default_namespace() -> Namespace:
    """The namespace used when no array says otherwise: NumPy's."""
    import numpy as np

    return _namespace_of(np.empty(0))


#: NumPy's real floating dtypes in native byte order (their dtype objects are singletons: identity tests)
_NP_F16, _NP_F32, _NP_F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def plain_floating(arrays: tuple[Array, ...]) -> Namespace | None:
    """The namespace of ``arrays`` where all are NumPy arrays or all PyTorch tensors, of those exact types, of one
    real floating dtype and on one device: what :func:`namespace`, :func:`is_real_floating` and
    :func:`same_device` would find of them, in a few identity tests; else None (those checks decide, and name
    what is wrong). Asked first by the calls that rotate (a decode step is microseconds)."""
    a = arrays[0]
    t = type(a)
    if t is not np.ndarray:
        if t.__module__ != "torch":
            return None
        from . import torch as backend  # an import statement, not a lookup torch.compile would guard

        return backend.plain_floating(arrays)
    dt = a.dtype
    for b in arrays:
        if type(b) is not t or b.dtype is not dt:
            return None
    return _namespace_of_type.get(_NDARRAY_KEY) if dt is _NP_F32 or dt is _NP_F64 or dt is _NP_F16 else None


def namespace(*arrays: Array, xp: Namespace | None = None, names: tuple[str, ...] = ()) -> Namespace:
    """The array namespace of ``arrays``, or ``xp`` normalised to a compliant one.

    ``xp`` may be a raw module (``numpy``, ``torch``, ``cupy``, ``dask.array``,
    ``jax.numpy``) or a compliant namespace; raw modules are mapped to their
    ``array_api_compat`` wrappers. ``names`` label the arrays in the ``TypeError``
    raised for a non-array (``None`` included) or for arrays of different libraries.
    """
    ns = None
    if xp is not None:
        ns = _normalized.get(namespace_key(xp))
        if ns is None:
            try:
                ns = _namespace_of(xp.asarray(0))
            except Exception:
                raise TypeError(
                    f"xp must be an array namespace (numpy, torch, cupy, jax.numpy, dask.array, array_api_strict "
                    f"or a compliant namespace), got {xp!r}"
                ) from None
            _normalized[namespace_key(xp)] = ns
    found = None
    first_name = ""
    found_type: type | None = None
    for i, a in enumerate(arrays):
        if type(a) is found_type:  # an array of the type seen first: its namespace (x, cos and sin of a call)
            continue
        name = names[i] if i < len(names) else f"argument {i}"
        if a is None:
            raise TypeError(f"{name} must be an array (NumPy, PyTorch, CuPy, JAX, Dask...), got None")
        this = _torch_namespace(a)
        if this is None:
            this = _namespace_of_type.get(_type_key(type(a)))
        if this is None:
            if not compat.is_array_api_obj(a):
                raise TypeError(f"{name} must be an array (NumPy, PyTorch, CuPy, JAX, Dask...), got {type(a).__name__}")
            this = _namespace_of(a)
        if found is None:
            found, first_name = this, name
            if library_of(a) is not None:  # a namespace that depends on the type alone
                found_type = type(a)
        elif this is not found:
            raise TypeError(
                f"{name} is a {library_name(this)} array but {first_name} is a {library_name(found)} array; "
                "pass arrays of one library"
            )
    if found is None:
        return ns if ns is not None else default_namespace()
    if ns is not None and found is not ns:
        raise TypeError(
            f"{first_name} is a {library_name(found)} array but xp={library_name(ns)}; "
            "pass xp=None or arrays of that library"
        )
    return found


def namespace_key(xp: Namespace) -> Hashable:
    """The key of caches per namespace: its module name (``torch.compile`` before PyTorch 2.9 traces no ``id()``
    of a module), else its ``id``."""
    name = getattr(xp, "__name__", None)
    return name if isinstance(name, str) else id(xp)


def library_name(ns: Namespace) -> str:
    """A short name of a namespace for messages (``numpy``, ``torch``, ``array_api_strict``...)."""
    name = getattr(ns, "__name__", repr(ns))
    return str(name).replace("array_api_compat.", "")


def check_device(xp: Namespace, device: Device, name: str = "device") -> None:
    """Raise ``ValueError`` unless ``device`` is None or a device of ``xp`` (an array can be made there)."""
    if device is None:
        return
    known = _of_namespace(_dtypes_here, xp)
    key = (cache_key(device), "device")
    if key in known:
        return
    try:
        xp.asarray(0, device=device)
    except Exception as exc:
        raise ValueError(f"{name}={device!r} is not a device of {library_name(xp)}: {exc}") from None
    known[key] = True


def device_of(x: Array) -> Device:
    """The device of ``x`` (``None`` for a JAX array being traced)."""
    lib = library_of(x)
    if lib in _DEVICE_ATTRIBUTE:
        return x.device
    if lib == "numpy":
        return "cpu"
    return compat.device(x)


def same_device(a: Array, b: Array, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` when ``a`` and ``b`` live on different devices."""
    if type(a) is type(b):
        lib = library_of(a)
        if lib in _ONE_DEVICE or (lib in _DEVICE_ATTRIBUTE and a.device == b.device):
            return
    da, db = device_of(a), device_of(b)
    if da is None or db is None or da == db:
        return
    raise ValueError(f"{name_b} is on device {db} but {name_a} is on device {da}; move one of them")


def to_device(x: Array, device: Device) -> Array:
    """``x`` on ``device`` (itself when it is there already)."""
    return compat.to_device(x, device)


def cache_key(obj: object) -> Hashable:
    """``obj`` itself as part of a cache key where it hashes (devices, dtypes), else its repr."""
    key = _type_key(type(obj))
    if obj is None or _HASHABLE.get(key, False):  # torch.compile before PyTorch 2.9 traces no hash() of a device
        return obj
    try:
        hash(obj)
    except TypeError:
        return repr(obj)
    _HASHABLE[key] = True
    return obj


#: Types whose objects hash, as :func:`cache_key` found (devices and dtypes are of a few types).
_HASHABLE: dict[str, bool] = {_type_key(str): True, _type_key(int): True}


def has_float64(xp: Namespace, device: Device) -> bool:
    """Whether ``xp`` computes in float64 on ``device`` (JAX without x64, Apple MPS do not)."""
    return _has_dtype(xp, device, "float64", "real floating")


def has_int64(xp: Namespace, device: Device) -> bool:
    """Whether ``xp`` has int64 arrays on ``device`` (JAX without x64 does not)."""
    return _has_dtype(xp, device, "int64", "signed integer")


def _has_dtype(xp: Namespace, device: Device, name: str, kind: str) -> bool:
    known = _of_namespace(_dtypes_here, xp)
    key = (cache_key(device), name)
    ok = known.get(key)
    if ok is None:
        try:
            info = xp.__array_namespace_info__()
            ok = name in info.dtypes(device=device, kind=kind)
        except Exception:  # a namespace without the inspection API: try it
            try:
                dtype = getattr(xp, name)
                ok = xp.asarray(1, dtype=dtype, device=device).dtype == dtype
            except Exception:
                ok = False
        known[key] = bool(ok)
    return bool(ok)


def lazy_array(x: object) -> bool:
    """Whether ``x`` is of a kind whose values cannot be inspected without forcing computation (JAX,
    Dask), or at all (PyTorch's ``meta`` tensors); :func:`~arrayrope.backends.concrete` adds traced arrays."""
    return bool(compat.is_lazy_array(x)) or getattr(getattr(x, "device", None), "type", None) == "meta"


def _of_namespace(cache: dict[Hashable, dict[Hashable, bool]], xp: Namespace) -> dict[Hashable, bool]:
    """The part of ``cache`` that holds ``xp``'s entries."""
    found = cache.get(namespace_key(xp))
    if found is None:
        found = cache[namespace_key(xp)] = {}
    return found


def _kind(
    cache: dict[Hashable, dict[Hashable, bool]], xp: Namespace, dtype: DType, test: Callable[[Namespace, DType], object]
) -> bool:
    """``test(xp, dtype)``, cached per namespace and dtype (False where the namespace cannot tell)."""
    of_namespace = _of_namespace(cache, xp)
    key = cache_key(dtype)
    found = of_namespace.get(key)  # no exception on the way: torch.compile before PyTorch 2.9 catches few
    if found is None:
        try:
            found = bool(test(xp, dtype))
        except Exception:
            found = False
        of_namespace[key] = found
    return found


def is_real_floating(xp: Namespace, dtype: DType) -> bool:
    """``xp.isdtype(dtype, "real floating")``, cached per namespace and dtype."""
    return _kind(_real_floating, xp, dtype, lambda ns, dt: ns.isdtype(dt, "real floating"))


def is_integral(xp: Namespace, dtype: DType) -> bool:
    """Whether ``dtype`` is an integer dtype (bool is not), cached per namespace and dtype."""
    return _kind(_integral, xp, dtype, lambda ns, dt: ns.isdtype(dt, "integral") and not ns.isdtype(dt, "bool"))


def known(n: object) -> bool:
    """Whether a shape entry is known (the standard says None, Dask gives NaN)."""
    return n is not None and not (isinstance(n, float) and math.isnan(n))


def warm(x: Array, dtypes: Iterable[DType], devices: Iterable[Device]) -> None:
    """Answer now what the code running on arrays like ``x`` asks here: their namespace, the kinds of
    ``dtypes``, what ``devices`` hold. Inside ``torch.compile`` a lookup that misses makes the graph depend on
    the whole table (any later entry would recompile it); one that hits depends on its entry alone."""
    xp = namespace(x)
    namespace(x, xp=xp)
    for dtype in dtypes:
        cache_key(dtype)
        is_real_floating(xp, dtype)
        is_integral(xp, dtype)
    for device in devices:
        cache_key(device)
        check_device(xp, device)
        has_float64(xp, device)
        has_int64(xp, device)
