"""Running transformers' own rotary code: its rotary modules and the attention layers that apply them.

The plumbing both ``tools/families.py`` (which writes arrayrope's table of family facts) and the
conformance sweep (``tests/conformance/test_families.py``) stand on. Nothing here knows a fact of
any family: every fact is measured from transformers' code.

* :func:`rotary_uses` finds every ``*RotaryEmbedding`` class in ``transformers.models`` and the
  config class its module is built from (the text sub-config of a multimodal config where the
  module's annotation names the composite one).
* :func:`tiny_config` builds a family's default config with small sizes (two heads, few layers,
  a small vocabulary), as a ``config.json`` of that family would say.
* :class:`Attention` runs one attention layer of the family twice on the same hidden states: once
  with its apply functions replaced by the identity (the queries and keys as the projections make
  them, in the order the attention kernel receives them) and once as transformers runs it. The
  rotation the layer applies at each position follows by least squares, in float64.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import importlib
import inspect
import io
import logging
import os
import re
import typing
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch
import transformers
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_utils import AttentionInterface

transformers.logging.set_verbosity_error()
logging.getLogger("transformers").setLevel(logging.ERROR)
torch.set_num_threads(1)  # small layers: one thread beats two that wait on each other

__all__ = ["Attention", "Use", "quiet", "rotary_uses", "tiny_config"]

# sizes a tiny config gets where its family has the key (heads stay two, so that a layer is cheap)
TINY = {
    "vocab_size": 512,
    "intermediate_size": 32,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "ffn_hidden_size": 32,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_head": 2,
    "n_heads": 2,
    "num_heads": 2,
    "decoder_num_attention_heads": 2,
    "decoder_num_key_value_heads": 2,
}
LAYERS = 6  # enough layers to show the per-layer patterns of the default configs (NoPE every 4th, sliding 5:1)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No warnings and no prints from transformers while probing."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@dataclasses.dataclass
class Use:
    """One rotary module of transformers and the attention classes that apply it."""

    family: str  # the folder under transformers.models
    module: ModuleType
    rotary: type
    config_cls: type  # the config its module is built from
    path: tuple[str, ...]  # where that config sits in the config class the module's annotation names
    attention: list[type]
    apply_names: list[str]  # module functions the attention classes call to rotate

    @property
    def model_type(self) -> str:
        """The config's model type; for a sub-config without one, the composite's and the path to it
        (``"qwen3_omni_moe.code2wav_config"``), as arrayrope's table keys it."""
        return str(self.config_cls.model_type) or part_key(self.config_cls)

    @property
    def name(self) -> str:
        return self.rotary.__name__


def _modeling_modules() -> Iterator[tuple[str, ModuleType, str]]:
    root = os.path.dirname(transformers.__file__)
    for folder in sorted(os.listdir(os.path.join(root, "models"))):
        path = os.path.join(root, "models", folder, f"modeling_{folder}.py")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        if not re.search(r"^class \w*RotaryEmbedding\b", source, re.M):
            continue
        with quiet():
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        yield folder, module, source


def _rotary_callers(module: ModuleType, source: str) -> dict[str, set[str]]:
    """Classes of the module that call one of its rotary apply functions, and which ones."""
    tree = ast.parse(source)
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and re.search("rot|rope", n.name)}
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.endswith("RotaryEmbedding"):
            calls = {
                s.func.id
                for s in ast.walk(node)
                if isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id in funcs
            }
            if calls:
                out[node.name] = calls
    return out


def _config_annotation(cls: type) -> type | None:
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        return None
    params = list(inspect.signature(cls.__init__).parameters)
    if len(params) < 2:
        return None
    ann = hints.get(params[1])
    return ann if isinstance(ann, type) and issubclass(ann, PreTrainedConfig) else None


def sub_configs(config: PreTrainedConfig, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every config nested in ``config`` (depth first), with its attribute path."""
    for key, value in sorted(vars(config).items()):
        if isinstance(value, PreTrainedConfig):
            yield (*path, key), value
            yield from sub_configs(value, (*path, key))


def _builds(rotary: type, config: Any) -> bool:
    try:
        with quiet():
            rotary(config)
    except Exception:
        return False
    return True


def part_key(config_cls: type) -> str:
    """The key of a sub-config class without a model type of its own: ``composite.path`` of the first
    composite config (by model type) that holds it; ``""`` where none does."""
    from transformers import CONFIG_MAPPING

    if config_cls not in _PART_KEYS:
        _PART_KEYS[config_cls] = ""
        for model_type in sorted(CONFIG_MAPPING.keys()):
            if CONFIG_MAPPING[model_type].model_type != model_type:  # an alias of another key
                continue
            with quiet():
                try:
                    config = CONFIG_MAPPING[model_type]()
                except Exception:
                    continue
            path = next((p for p, sub in sub_configs(config) if type(sub) is config_cls), None)
            if path is not None:
                _PART_KEYS[config_cls] = ".".join((model_type, *path))
                break
    return _PART_KEYS[config_cls]


_PART_KEYS: dict[type, str] = {}


def _model_pairs(module: ModuleType, source: str) -> list[tuple[type, type]]:
    """(config class, rotary class) of each model class of ``module`` that builds a rotary module in its
    ``__init__``, where that rotary module builds from the config class's default: what transformers runs,
    which outranks a guess from annotations (Qwen3-Omni's talker builds its own M-RoPE module from its
    text config, which the plain module also accepts)."""
    tree = ast.parse(source)
    rotary = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("RotaryEmbedding")}
    pairs: list[tuple[type, type]] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name in rotary:
            continue
        init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
        if init is None:
            continue
        built = sorted(
            {c.func.id for c in ast.walk(init) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)} & rotary
        )
        cls = getattr(module, node.name, None)
        try:
            ann = typing.get_type_hints(cls).get("config") if built else None
        except Exception:
            ann = None
        if not (isinstance(ann, type) and issubclass(ann, PreTrainedConfig)):
            continue
        with quiet():
            try:
                default = ann()
            except Exception:
                continue
        pairs += [(ann, getattr(module, b)) for b in built if _builds(getattr(module, b), default)]
    return pairs


def rotary_uses() -> list[Use]:
    """Every rotary module class of transformers, with the config it is built from and its attention classes.

    Where a model class builds a rotary module from a config class, that pair is kept and any other rotary
    module matched to the same config class by its annotation or by building from a sub-config is dropped.
    """
    uses = []
    for folder, module, source in _modeling_modules():
        callers = _rotary_callers(module, source)
        pairs = _model_pairs(module, source)
        runs = {c: {r for c2, r in pairs if c2 is c} for c, _ in pairs}
        found: list[Use] = []
        for name, cls in vars(module).items():
            if not (inspect.isclass(cls) and name.endswith("RotaryEmbedding") and cls.__module__ == module.__name__):
                continue
            ann = _config_annotation(cls)
            if ann is None:
                continue
            for config_cls, path in _configs_built(cls, ann):
                if cls not in runs.get(config_cls, {cls}):
                    continue
                attention, names = _attention_classes(module, callers, config_cls, ann, cls.__name__)
                found.append(Use(folder, module, cls, config_cls, path, attention, names))
        for config_cls, rotary_cls in pairs:
            if not any(u.config_cls is config_cls and u.rotary is rotary_cls for u in found):
                ann = _config_annotation(rotary_cls) or config_cls
                attention, names = _attention_classes(module, callers, config_cls, ann, rotary_cls.__name__)
                found.append(Use(folder, module, rotary_cls, config_cls, (), attention, names))
        uses += found
    return uses


def _configs_built(rotary: type, ann: type) -> list[tuple[type, tuple[str, ...]]]:
    """The config classes ``rotary`` is built from: its annotation, else every sub-config it builds from."""
    with quiet():
        try:
            default = ann()
        except Exception:
            return [(ann, ())]
    if _builds(rotary, default):
        return [(ann, ())]
    found: list[tuple[type, tuple[str, ...]]] = []
    family = rotary.__module__.rsplit(".", 1)[0]
    for sub_path, sub in sub_configs(default):
        same = type(sub).__module__.rsplit(".", 1)[0] == family  # a sub-config of another family is not its own
        if same and type(sub) not in [c for c, _ in found] and _builds(rotary, sub):
            found.append((type(sub), sub_path))
    return found or [(ann, ())]


_NOT_ATTENTION = re.compile("Vision|Indexer|Compressor|Patch|Merger")


def _attention_classes(
    module: ModuleType, callers: dict[str, set[str]], config_cls: type, ann: type, rotary_name: str = ""
) -> tuple[list[type], list[str]]:
    """Classes of ``module`` that apply rotary embeddings to attention built from ``config_cls`` (best first);
    a vision encoder's are left out by their names past the model's own (Granite4VisionText's attention is not)."""
    ranked = []
    for caller, calls in callers.items():
        c = getattr(module, caller, None)
        own = caller[len(os.path.commonprefix([caller, rotary_name])) :]  # noqa: RUF071 (names, not paths)
        if not isinstance(c, type) or _NOT_ATTENTION.search(own) or any("vision" in n for n in calls):
            continue
        c_ann = _config_annotation(c)
        rank = 0 if c_ann is config_cls else 1 if c_ann in (ann, None) else 2
        ranked.append((rank, "Attention" not in caller, caller, c, calls))
    ranked.sort(key=lambda r: r[:3])
    names = sorted({n for r in ranked for n in r[4]})
    return [r[3] for r in ranked], names


def _head_dim(config: Any) -> int | None:
    with contextlib.suppress(Exception):
        hd = getattr(config, "head_dim", None)
        if isinstance(hd, int) and hd > 0:
            return hd
    with contextlib.suppress(Exception):
        return int(config.hidden_size // config.num_attention_heads)
    return None


def tiny_configs(config_cls: type, **values: Any) -> Iterator[Any]:
    """``config_cls`` with its defaults, small sizes and ``values`` (keys of its ``config.json``).

    Yields the smallest config first, then ones that give up a group of small sizes (layers, then experts,
    then all) for families whose validators or layers refuse them.
    """
    with quiet():
        default = config_cls()
        fields = default.to_dict()
    over: dict[str, Any] = {k: v for k, v in TINY.items() if k in fields and isinstance(fields[k], int)}
    if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None and "num_attention_heads" in over:
        over["num_key_value_heads"] = over["num_attention_heads"]  # published configs state it
    layers = {
        k: min(fields[k], LAYERS)
        for k in ("num_hidden_layers", "n_layer", "n_layers", "decoder_num_hidden_layers")
        if isinstance(fields.get(k), int)
    }
    head = _head_dim(default)
    heads = next(
        (
            over[k]
            for k in ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_num_attention_heads")
            if k in over
        ),
        None,
    )
    if head and heads:
        for k in ("hidden_size", "n_embd", "d_model"):
            if isinstance(fields.get(k), int):
                over[k] = heads * head
    ids = [v for k, v in fields.items() if k in ("pad_token_id", "blank_token_id") and isinstance(v, int)]
    if ids and "vocab_size" in over:  # token ids that index the embedding or the classes: below the vocabulary
        over["vocab_size"] = max(over["vocab_size"], max(ids) + 1)
    experts = {k for k in over if "expert" in k}
    # (never the default sizes themselves: a layer of a default config can take gigabytes)
    # the last keeps the default hidden size, for validators that tie other sizes to it (a TTS flow head's
    # condition_dim, an audio adapter's input size): a checkpoint's sizes agree with each other
    widths = ("hidden_size", "n_embd", "d_model")
    attempts = [
        {**over, **layers},
        over,
        {k: v for k, v in over.items() if k not in experts},
        {**{k: v for k, v in over.items() if k not in widths}, **layers},
    ]
    error: Exception | None = None
    built = 0
    for attempt in attempts:
        kwargs = {**attempt, **values}
        try:
            with quiet():
                config = config_cls(**copy.deepcopy(kwargs))
        except Exception as exc:
            error = exc
            continue
        built += 1
        config.probe_kwargs = kwargs  # the keys a hub config.json of these sizes states
        yield config
    if not built:
        assert error is not None
        raise error


def tiny_config(config_cls: type, **values: Any) -> Any:
    """The first of :func:`tiny_configs`."""
    return next(tiny_configs(config_cls, **values))


class Captured(Exception):
    """Raised by the capturing attention kernel: the layer's queries and keys, as the kernel receives them."""

    def __init__(self, query: Any, key: Any) -> None:
        super().__init__("captured")
        self.query, self.key = query, key


@contextlib.contextmanager
def _capture_kernel() -> Iterator[None]:
    """Every attention kernel a layer asks transformers for raises :class:`Captured` with its q and k."""

    def kernel(module: Any, query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        raise Captured(query.detach().clone(), key.detach().clone())

    original = AttentionInterface.get_interface
    original_sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        raise Captured(query.detach().clone(), key.detach().clone())

    AttentionInterface.get_interface = lambda self, impl, default: kernel  # type: ignore[method-assign]
    torch.nn.functional.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        AttentionInterface.get_interface = original  # type: ignore[method-assign]
        torch.nn.functional.scaled_dot_product_attention = original_sdpa


@contextlib.contextmanager
def _capture_method(layer: Any) -> Iterator[None]:
    """Layers that compute attention in a method of their own (``_attn(query, key, ...)``) raise there too."""
    if not callable(getattr(layer, "_attn", None)):
        yield
        return

    def attn(query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        raise Captured(query.detach().clone(), key.detach().clone())

    layer._attn = attn
    try:
        yield
    finally:
        del layer._attn


@contextlib.contextmanager
def _patched(
    module: ModuleType, names: list[str], wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """The module's functions ``names`` replaced by ``wrap(name, fn)`` for the duration."""
    saved = {n: getattr(module, n) for n in names}
    for n, fn in saved.items():
        setattr(module, n, wrap(n, fn))
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(module, n, fn)


def _identity(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` returning its query and key arguments as they came (the same structure as its result)."""

    def same(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return tuple(args[: len(out)]) if isinstance(out, tuple) else args[0]

    return same


@dataclasses.dataclass
class Applied:
    """One call of an apply function in a layer: its name, the shape of its query argument and the matrix it
    applies to the query's last axis at each position, measured on unit vectors (``(S, R, R)``, float64)."""

    name: str
    shape: tuple[int, ...]
    matrices: np.ndarray


def _recorder(calls: list[Applied], seq: int) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """Wrap apply functions so that each call also rotates unit vectors in place of its query argument.

    The layer runs with a batch of one; the probe has a batch of ``R`` rows, row ``b`` the unit vector
    ``e_b`` at every head and position, so one call measures the whole matrix at every position. The other
    arguments (the tables) are the call's own and broadcast over the probe's batch.
    """

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def recording(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            q = args[0] if args else None
            if isinstance(q, torch.Tensor) and q.ndim == 4 and q.shape[0] == 1:
                r = q.shape[-1]
                probe = torch.eye(r, dtype=q.dtype).view(r, 1, 1, r).expand(r, *q.shape[1:]).contiguous()
                rest = list(args[1:])
                if rest and isinstance(rest[0], torch.Tensor) and rest[0].ndim == q.ndim:
                    rest[0] = torch.zeros_like(rest[0])
                got = fn(probe, *rest, **kwargs)
                got = got[0] if isinstance(got, tuple) else got
                s_axis = 2 if q.shape[2] == seq else 1
                o = got.double().movedim(s_axis, 1)[:, :, 0]  # (R, S, R): output for e_b at position s
                calls.append(Applied(name, tuple(q.shape), o.permute(1, 2, 0).numpy().copy()))
            return out

        return recording

    return wrap


@dataclasses.dataclass
class Attention:
    """One attention layer of a family, run on fixed hidden states at chosen positions.

    ``run(positions)`` returns ``(q0, k0, q1, k1)``: the kernel's query and key (``(B, H, S, D)``,
    float64) without rotation and with it.
    """

    use: Use
    config: Any
    layer_idx: int
    batch: int = 0

    def __post_init__(self) -> None:
        self.layer = self._build()
        self.rotary = self._rotary()
        self.layer_type = _layer_type(self.config, self.layer_idx, self.rotary)
        label = getattr(self.layer, "rope_layer_type", None)  # DeepSeek-V4: the layer names its rope set itself
        if isinstance(label, str) and label in rotary_labels(self.rotary):
            self.layer_type = label
        self.head_dim = 0
        self.one_token = False  # set by run_tokens where the layer runs one position per call

    def _build(self) -> Any:
        errors = []
        for cls in self.use.attention:
            kwargs = _init_arguments(cls, self.config, self.layer_idx)
            try:
                with quiet():
                    torch.manual_seed(0)
                    self.config._attn_implementation = "sdpa"
                    previous = torch.get_default_dtype()
                    torch.set_default_dtype(torch.float64)
                    try:
                        layer = cls(**kwargs) if "config" in kwargs else cls(self.config, **kwargs)
                    finally:
                        torch.set_default_dtype(previous)
                    _fixed_parameters(layer)
                return layer.double().eval()
            except Exception as exc:
                errors.append(f"{cls.__name__}: {type(exc).__name__}: {exc}")
        raise RuntimeError("; ".join(errors) or "no attention class applies this rotary module")

    def _rotary(self) -> Any:
        params = inspect.signature(self.use.rotary.__init__).parameters
        with quiet():
            rot = self.use.rotary(self.config) if "device" not in params else self.use.rotary(self.config, device=None)
        return rot.double() if hasattr(rot, "double") else rot

    def position_embeddings(self, x: Any, positions: np.ndarray) -> Any:
        pos = torch.from_numpy(np.asarray(positions, dtype=np.int64))[None].expand(x.shape[0], -1)
        params = inspect.signature(self.rotary.forward).parameters
        wanted = inspect.signature(self.layer.forward).parameters.get("position_embeddings")
        with quiet():
            if wanted is not None and "dict" in str(wanted.annotation) and "layer_type" in params:
                # one (cos, sin) per rope set, keyed by its label; the layer picks its own (DeepSeek-V4)
                return {label: self.rotary(x, pos, label) for label in rotary_labels(self.rotary)}
            if "layer_type" in params and self.layer_type is not None:
                return self.rotary(x, pos, self.layer_type)
            return self.rotary(x, pos)

    def run(
        self,
        positions: np.ndarray,
        *,
        identity: bool = False,
        seed: int = 0,
        calls: list[Applied] | None = None,
        batch: int = 0,
    ) -> tuple[Any, Any]:
        """The kernel's (query, key) at ``positions`` for fixed random hidden states.

        ``identity``: with the apply functions returning their inputs. ``calls``: a list that receives what
        each apply function does to unit vectors (see :class:`Applied`).
        """
        hidden = _input_width(self.layer, int(self.config.hidden_size))
        rng = np.random.default_rng(seed)
        batch = batch or self.batch or 8
        x = torch.from_numpy(rng.standard_normal((batch, len(positions), hidden)))
        pe = self.position_embeddings(x, positions)
        pos = torch.from_numpy(np.asarray(positions, dtype=np.int64))[None].expand(batch, -1)
        forward = inspect.signature(self.layer.forward).parameters
        kwargs: dict[str, Any] = {"hidden_states": x}
        for name in forward:
            if name == "position_embeddings":
                kwargs[name] = pe
            elif name == "position_ids":
                kwargs[name] = pos
            elif name != "hidden_states" and "hidden_states" in name:  # cross attention: the same states
                kwargs[name] = x
            elif name == "attention_mask":  # additive, nothing masked (the kernel is never reached)
                kwargs[name] = torch.zeros(batch, 1, len(positions), len(positions), dtype=x.dtype)
            elif (
                name != "hidden_states"
                and forward[name].default is inspect.Parameter.empty
                and forward[name].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            ):
                kwargs[name] = {} if "dict" in str(forward[name].annotation).lower() else None
        if identity:
            ctx = _patched(self.use.module, self.use.apply_names, _identity)
        elif calls is not None:
            ctx = _patched(self.use.module, self.use.apply_names, _recorder(calls, len(positions)))
        else:
            ctx = contextlib.nullcontext()
        with ctx, _capture_kernel(), _capture_method(self.layer), torch.no_grad(), quiet():
            try:
                self.layer(**kwargs)
            except Captured as got:
                return got.query.double(), got.key.double()
        raise RuntimeError(f"{type(self.layer).__name__} reached no attention kernel")


def _input_width(layer: Any, hidden: int) -> int:
    """The width of the hidden states the layer's query projection takes: the config's hidden size, or what the
    projection says where the layer takes more (Zamba2's shared attention: the states and the embeddings)."""
    proj = getattr(layer, "q_proj", None)
    width = getattr(proj, "in_features", None)
    return int(width) if isinstance(width, int) and width != hidden else hidden


_INIT_FROM_CONFIG = {
    "num_heads": "num_attention_heads",
    "is_causal": True,
    "is_cross_attention": False,
    "use_flexible_linear": False,
}
# sizes a published config states where the class has no default (Moonshine streaming's decoder): the usual value
_INIT_FALLBACK = {"num_key_value_heads": "num_attention_heads"}


def _init_arguments(cls: type, config: Any, layer_idx: int) -> dict[str, Any]:
    """Keyword arguments of an attention class beyond its config: the layer index, sizes from the config; the
    config itself by name where the class takes sizes first (IDEFICS: ``(hidden_size, num_heads, ..., config)``)."""
    kwargs: dict[str, Any] = {}
    params = inspect.signature(cls.__init__).parameters
    by_name = len(params) > 1 and list(params)[1] != "config" and "config" in params
    for i, (name, p) in enumerate(params.items()):
        if i < (1 if by_name else 2) or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name == "config":
            kwargs[name] = config
        elif name == "layer_idx":
            kwargs[name] = layer_idx
        elif p.default is inspect.Parameter.empty:
            source = _INIT_FROM_CONFIG.get(name, name)
            if isinstance(source, str) and not hasattr(config, source) and source in _INIT_FALLBACK:
                source = _INIT_FALLBACK[source]  # a key the default config lacks and a checkpoint's states
            kwargs[name] = getattr(config, source) if isinstance(source, str) else source
    return kwargs


def _fixed_parameters(layer: Any) -> None:
    """Deterministic weights: random matrices, and ones for every vector (norm weights, biases, scales), so that
    per-feature factors after the rotation (a norm's weight, a learned query scale) are the same for every feature."""
    start = 0
    with torch.no_grad():
        for p in layer.parameters():
            if p.ndim < 2:
                p.fill_(1.0)
                continue
            n = p.numel()
            if start + n > _NORMAL.numel():
                start = 0  # the pool's values again, from its start: another layout of them for this matrix
            if n > _NORMAL.numel():
                p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(start))
            else:
                p.copy_(_NORMAL[start : start + n].view(p.shape))
                start += n
            p.mul_(max(1, p.shape[-1]) ** -0.5)


#: Standard normal values the layers' matrices are filled from, one after another (drawing them for every
#: matrix of every probed layer was most of a family sweep's time).
_NORMAL = torch.randn(1 << 22, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _layer_type(config: Any, layer_idx: int, rotary: Any) -> str | None:
    labels = sorted(
        {
            n[: -len("_inv_freq")]
            for n, _ in rotary.named_buffers()
            if n.endswith("_inv_freq") and not n.endswith("original_inv_freq")
        }
    )
    if not labels:
        return None
    types = getattr(config, "layer_types", None)
    if types and layer_idx < len(types) and types[layer_idx] in labels:
        return str(types[layer_idx])
    return labels[0] if len(labels) == 1 else None


def rotary_labels(rotary: Any) -> list[str]:
    """The layer types a rotary module keeps frequencies for (none for one set)."""
    return sorted(
        {
            n[: -len("_inv_freq")]
            for n, _ in rotary.named_buffers()
            if n.endswith("_inv_freq") and not n.endswith("original_inv_freq")
        }
    )


class HeadsDiffer(Exception):
    """A layer that rotates the heads of its queries differently (some heads only)."""


def rotating_features(att: Attention, positions: tuple[int, ...] = (1, 3, 1000, 100_000)) -> tuple[int, np.ndarray]:
    """The kernel's head dim and the features of its queries that the layer changes at ``positions``
    (the queries with the apply functions against those without them; float64, a batch of one)."""

    def changed(pos: tuple[int, ...]) -> np.ndarray | None:
        try:
            q0, _ = att.run(np.array(pos, dtype=np.int64), identity=True, batch=1)
            q1, _ = att.run(np.array(pos, dtype=np.int64), batch=1)
        except Exception:
            return None
        att.head_dim = int(q0.shape[-1])
        scale = float(q0.abs().max())
        found: np.ndarray = (q1 - q0).abs().amax(dim=(0, 2)).numpy() > 1e-6 * max(scale, 1.0)  # (heads, features)
        return found

    per_head = next((m for upto in range(len(positions), 1, -1) if (m := changed(positions[:upto])) is not None), None)
    if per_head is None:  # a layer that runs one token at a time: what any one position changes (at position 1
        # alone, the slowest pairs turn too little to tell)
        runs = [m for p in positions if (m := changed((p,))) is not None]
        per_head = np.any(runs, axis=0) if runs else None
    if per_head is None:
        att.run(np.zeros(1, dtype=np.int64), identity=True, batch=1)  # raises what keeps it from running
        raise RuntimeError(f"{type(att.layer).__name__} does not run at position 1")
    if not np.all(per_head == per_head[:1]):
        turned = np.flatnonzero(per_head.any(axis=1)).tolist()
        raise HeadsDiffer(
            f"{type(att.layer).__name__} rotates some of its heads only, chosen by their index (heads {turned} of a "
            f"{per_head.shape[0]}-head probe); arrayrope's rotations turn every head they are given"
        )
    return att.head_dim, np.flatnonzero(per_head[0])


def run_tokens(att: Attention, positions: np.ndarray, *, identity: bool = False) -> tuple[Any, Any]:
    """:meth:`Attention.run` (a batch of one) at ``positions``, or, for a layer that runs one token at a time
    (ZAYA's), one position per run, joined along the sequence axis."""
    try:
        return att.run(positions, identity=identity, batch=1)
    except Exception:
        if len(positions) == 1:
            raise
    att.one_token = True
    runs = [att.run(positions[i : i + 1], identity=identity, batch=1) for i in range(len(positions))]
    return torch.cat([q for q, _ in runs], dim=2), torch.cat([k for _, k in runs], dim=2)


def applied_rotations(att: Attention, positions: np.ndarray) -> Applied | None:
    """What the layer's first apply call does to unit vectors of its input at ``positions`` (None: no call)."""
    calls: list[Applied] = []
    att.run(positions, calls=calls, batch=1)
    return calls[0] if calls else None


#: identify_rope's seq_len in the probes (it measures positions 0..7 and verifies at 8..15 and far blocks)
PROBE_SEQ = 8


def probe_positions(max_position: int = 1 << 24) -> np.ndarray:
    blocks = [np.arange(2 * PROBE_SEQ)]
    start = 4 * PROBE_SEQ
    while start + 3 <= max_position:
        blocks.append(np.arange(start, start + 4))
        start *= 4
    return np.concatenate(blocks).astype(np.int64)


def _permutation(m0: np.ndarray) -> np.ndarray | None:
    """``m0`` as a permutation matrix other than the identity, else None."""
    rounded = np.round(m0)
    if (
        np.max(np.abs(m0 - rounded)) < 1e-6
        and np.all(np.isin(rounded, (0.0, 1.0)))
        and np.all(rounded.sum(0) == 1)
        and np.all(rounded.sum(1) == 1)
        and not np.array_equal(rounded, np.eye(len(m0)))
    ):
        return rounded
    return None


class Layer:
    """What one attention layer's apply function does at each of identify_rope's probe positions.

    ``applied[p]`` (``R x R``) is the apply function on unit vectors of its input width ``R``;
    ``permutation`` is set where that output at position 0 is a permutation of the input (DeepSeek's
    interleaved kernel writes half-split order), which ``applied`` then has undone. The layer is called as
    ``fn(x, positions)`` of :func:`arrayrope.testing.identify_rope` with ``x`` of width ``R``.
    """

    def __init__(self, att: Attention, max_position: int = 1 << 24) -> None:
        self.att = att
        self.applied: dict[int, np.ndarray] = {}
        self.apply_name = ""
        self.stopped = ""
        positions = probe_positions(max_position)
        try:
            self._measure(positions)
        except Exception:
            splits = [2 * PROBE_SEQ, *range(2 * PROBE_SEQ + 4, len(positions), 4)]
            blocks = np.split(positions, splits)
            try:
                self._measure(blocks[0])
            except Exception:  # a layer that runs one token at a time: one position per run
                blocks = np.split(positions, len(positions))
            for block in blocks:
                try:
                    self._measure(block)
                except Exception as exc:
                    self.stopped = f"{type(exc).__name__}: {exc}"
                    break
        if 0 not in self.applied:
            raise RuntimeError(
                f"{type(att.layer).__name__} calls no apply function it was probed with ({self.stopped or 'no call'})"
            )
        self.permutation = _permutation(self.applied[0])
        if self.permutation is not None:
            self.applied = {p: self.permutation.T @ m for p, m in self.applied.items()}

    def _measure(self, positions: np.ndarray) -> None:
        got = applied_rotations(self.att, positions)
        if got is not None:
            self.apply_name = got.name
            for s, p in enumerate(positions.tolist()):
                self.applied[p] = got.matrices[s]

    @property
    def width(self) -> int:
        """Features of the apply function's input."""
        return len(self.applied[0])

    def __call__(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        try:
            mats = np.stack([self.applied[int(p)] for p in positions])
        except KeyError as exc:
            raise IndexError(f"position {exc} was not measured ({self.stopped or 'no apply call'})") from None
        return np.einsum("sij,...sj->...si", mats, np.asarray(x, dtype=np.float64))


def module_frequencies(rotary: Any, layer_type: str | None) -> tuple[np.ndarray | None, float]:
    """A rotary module's ``inv_freq`` (float64 of its float32 values; None for a table without one) and the
    factor it scales cos and sin by, for ``layer_type`` where it keeps several."""
    buffers = dict(rotary.named_buffers())
    inv = buffers.get(f"{layer_type}_inv_freq") if layer_type else None
    if inv is None:
        inv = buffers.get("inv_freq")
    scale = getattr(rotary, f"{layer_type}_attention_scaling", None) if layer_type else None
    if scale is None:
        scale = getattr(rotary, "attention_scaling", 1.0)
    return (None if inv is None else inv.detach().double().cpu().numpy()), float(scale)


def module_tables(rotary: Any, positions: np.ndarray, layer_type: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The cos and sin tables a rotary module gives for ``positions`` (``(S, W)`` float64 of its float32 values):
    its own columns, in its own order (halves repeated, pairs repeated, or one per pair)."""
    x = torch.zeros(1, 1, 4, dtype=torch.float32)
    pos = torch.from_numpy(np.asarray(positions, dtype=np.int64))[None]
    params = inspect.signature(rotary.forward).parameters
    with quiet(), torch.no_grad():
        out = rotary(x, pos, layer_type) if "layer_type" in params and layer_type else rotary(x, pos)
    if isinstance(out, torch.Tensor) and out.is_complex():
        a, b = out.real, out.imag
    else:
        a, b = out
    a = a.double().reshape(-1, a.shape[-1]).numpy()
    b = b.double().reshape(-1, b.shape[-1]).numpy()
    zero = int(np.argmin(np.abs(np.asarray(positions))))
    if np.max(np.abs(a[zero])) < np.max(np.abs(b[zero])):  # GPT-J and CodeGen return (sin, cos)
        a, b = b, a
    return a, b
