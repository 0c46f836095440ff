"""``arrayrope plot``: what a frequency scaling does, as a PNG (matplotlib, the ``plot`` extra).

Left: the wavelength ``2 pi / theta_i`` of every rotary pair against the original
context length: pairs whose wavelength exceeds it never complete a turn in training,
and these are the ones the scalings stretch. Right: RoFormer's long-range bound, the
mean over ``j`` of ``|sum_{k<j} exp(i r theta_k)|`` against the relative distance ``r``;
the attention score ``|sum_j h_j exp(i r theta_j)|`` is at most this times
``2 * max |h_j - h_{j+1}|``, so it shows how fast attention can decay with distance.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import numpy as np

HELP = "plot per-pair wavelengths and the long-range decay bound for configs or rope types (PNG)"

_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="*", metavar="CONFIG", help="config.json files (or folders) to compare")
    parser.add_argument(
        "--types",
        default=None,
        help=f"comma-separated rope types to compare on one head ({', '.join(_TYPES)}); "
        "default: all of them when no CONFIG is given",
    )
    parser.add_argument(
        "--layer-type",
        default=None,
        help="the layer type of each CONFIG to plot, where its rope differs per layer type (full_attention, "
        "sliding_attention; default: none, for configs with one set)",
    )
    parser.add_argument("--head-dim", type=int, default=128, help="head dim for --types (default 128)")
    parser.add_argument("--base", type=float, default=10000.0, help="rope_theta for --types (default 10000)")
    parser.add_argument("--factor", type=float, default=8.0, help="scaling factor for --types (default 8)")
    parser.add_argument(
        "--original-length",
        type=int,
        default=4096,
        help="original (pretraining) context length for --types (default 4096)",
    )
    parser.add_argument(
        "--max-distance",
        type=int,
        default=None,
        help="largest relative distance on the decay plot (default: 4 x the scaled context)",
    )
    parser.add_argument("-o", "--output", default="rope.png", help="PNG to write (default rope.png)")


def relative_decay_bound(inv_freq: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """RoFormer's bound ``mean_j |sum_{k<j} exp(i r theta_k)|`` (``j = 1..d/2``) for each distance ``r``.

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.cli.plot import relative_decay_bound
    >>> relative_decay_bound(np.array([1.0, 0.1, 0.01]), np.array([0.0])).tolist()  # (1 + 2 + 3) / 3
    [2.0]
    """
    inv_freq = np.asarray(inv_freq, dtype=np.float64)
    r = np.asarray(distances, dtype=np.float64)
    partial = np.cumsum(np.exp(1j * r[:, None] * inv_freq[None, :]), axis=1)
    bound: np.ndarray = np.abs(partial).mean(axis=1)
    return bound


def _curves(args: argparse.Namespace) -> list[tuple[str, Any, int]]:
    """(label, RopeFrequencies, original context length) for each requested curve."""
    import arrayrope
    from arrayrope.config import rope_config

    curves = []
    for path in args.configs:
        kw = rope_config(path, layer_type=args.layer_type)
        sc = kw["scaling"] or {}
        max_len = kw["max_position_embeddings"]
        original = sc.get("original_max_position_embeddings") or max_len or args.original_length
        # sequence-dependent types are shown at the longest context the config allows
        f = arrayrope.rope_frequencies(**kw, seq_len=max_len)
        curves.append((f"{path} ({f.rope_type})", f, int(original)))
    types = args.types.split(",") if args.types else ([] if args.configs else list(_TYPES))
    s, l0, d = args.factor, args.original_length, args.head_dim
    if types and not (s >= 1 and math.isfinite(s)):
        raise ValueError(f"--factor must be a number >= 1, got {s:g}")
    if types and l0 < 1:
        raise ValueError(f"--original-length must be a positive int, got {l0}")
    for t in types:
        t = t.strip()
        scaling: dict[str, Any] | str | None = {
            "default": None,
            "linear": {"rope_type": "linear", "factor": s},
            "dynamic": {"rope_type": "dynamic", "factor": s},
            "yarn": {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": l0},
            "llama3": {
                "rope_type": "llama3",
                "factor": s,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": l0,
            },
        }.get(t, "unknown")
        if isinstance(scaling, str):
            raise ValueError(f"--types: {t!r} is not one of {_TYPES} (longrope needs its factor lists: use a config)")
        f = arrayrope.rope_frequencies(
            d, base=args.base, scaling=scaling, max_position_embeddings=l0, seq_len=int(l0 * s)
        )
        curves.append((t if t == "default" else f"{t} x{s:g}", f, l0))
    return curves


def run(args: argparse.Namespace) -> int:
    """Errors (a bad config or value, no matplotlib: the ``plot`` extra) reach :func:`arrayrope.cli.main`."""
    folder = os.path.dirname(os.path.abspath(args.output))
    if not args.output.lower().endswith(".png"):
        raise ValueError(f"-o {args.output}: the plot is written as PNG; name a .png file")
    if not os.path.isdir(folder):
        raise ValueError(f"-o {args.output}: the folder {folder!r} does not exist")
    curves = _curves(args)
    if args.max_distance is not None and args.max_distance < 1:
        raise ValueError(f"--max-distance must be a positive int, got {args.max_distance}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    longest = max(l0 * max(1.0, args.factor) for _, _, l0 in curves)
    max_r = args.max_distance or int(4 * longest)
    distances = np.unique(np.round(np.geomspace(1, max_r, 600)))

    fig, (ax_w, ax_b) = plt.subplots(2, 1, figsize=(8, 9))  # stacked: legible at a page's width
    print(f"{'curve':<40} {'pairs':>5} {'attn factor':>11} {'pairs with wavelength > L0':>27}")
    for label, f, l0 in curves:
        wavelength = 2 * np.pi / f.inv_freq
        ax_w.semilogy(np.arange(len(wavelength)), wavelength, marker=".", label=label)
        ax_b.semilogx(distances, relative_decay_bound(f.inv_freq, distances), label=label)
        print(f"{label:<40} {len(wavelength):>5} {f.attention_factor:>11.4f} {int(np.sum(wavelength > l0)):>27}")
    for l0 in sorted({l0 for _, _, l0 in curves}):
        ax_w.axhline(l0, color="gray", linestyle="--", linewidth=0.8)
        ax_w.text(0, l0, f" L0 = {l0}", va="bottom", color="gray")
        ax_b.axvline(l0, color="gray", linestyle="--", linewidth=0.8)
    ax_w.set(xlabel="rotary pair i", ylabel="wavelength 2π/θᵢ (positions)", title="Per-pair wavelengths")
    ax_b.set(
        xlabel="relative distance m − n",
        ylabel=r"$\mathrm{mean}_j\,|\sum_{k<j} e^{i(m-n)\theta_k}|$",
        title="Long-range decay bound (RoFormer)",
    )
    ax_w.legend(fontsize=9)
    ax_b.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0
