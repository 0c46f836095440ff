"""Make the exporters' fixtures: tiny random checkpoints exported by the tools users deploy with.

    python tools/exporters.py                         # every family, both exporters, into tests/fixtures/exporters
    python tools/exporters.py --families llama3,glm   # some families
    python tools/exporters.py --venvs DIR             # keep the exporters' virtual environments in DIR

Each exporter runs in a virtual environment of its own, made here from the package index (``--venvs``,
default a folder under the system's temporary directory, reused when it exists):

* optimum-onnx (``optimum-cli export onnx --task text-generation-with-past``): ``optimum-onnx[onnxruntime]``
  0.1, which pins transformers 4.57;
* ONNX Runtime GenAI's model builder (``python -m onnxruntime_genai.models.builder -p fp32 -e cpu``): 0.18,
  with ``onnx-ir`` (which it needs and does not declare) and transformers 5.24.

The checkpoints (2 layers, hidden 128, 4 query and 2 key/value heads, vocabulary 128, random weights from a
fixed seed) are written by transformers 4.57's config and model classes in the optimum environment, in the
config form of transformers 4.x (``rope_theta``, ``rope_scaling``) that both exporters read. Every family
sets the scaling or layout that makes its RoPE differ from the default one, or what makes an exporter write
another form of attention (:data:`FAMILIES`).

For each family and exporter the fixture folder keeps ``model.onnx`` (weights inside: the models are small)
and the checkpoint's ``config.json``; ``checkpoints/`` keeps the whole checkpoint of the families in
:data:`CHECKPOINTS`, whose GenAI exports keep their ``genai_config.json`` (for onnxruntime-genai's own
generation loop); ``VERSIONS.json`` records the exporters' versions, the commands and
what each export did (or why it failed). Regenerate after changing :data:`FAMILIES` or the pinned versions,
and commit the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "exporters"

#: What each exporter's environment installs (torch first, from the index's CPU build where the machine has it).
ENVIRONMENTS = {
    "optimum": ["torch==2.13.0", "optimum-onnx[onnxruntime]==0.1.*"],
    "genai": ["torch==2.13.0", "onnxruntime-genai==0.18.0", "onnx-ir", "transformers>=5.24,<5.25"],
}

_SMALL = dict(
    hidden_size=128,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=1024,
)

#: family -> (transformers 4.57 config class, its keyword arguments). Each family's RoPE differs from the
#: default in the way its real checkpoints do: llama3 and YaRN scaling, LongRoPE with partial rotary, local
#: and global bases (Gemma 3), interleaved partial pairs (GLM). Scaled families extend an original context of
#: 256 positions to 1024 (the GenAI builder stores cos/sin caches of every position up to the larger).
FAMILIES: dict[str, tuple[str, dict[str, object]]] = {
    "llama3": (
        "LlamaConfig",
        dict(
            _SMALL,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256,
            },
        ),
    ),
    "qwen2": ("Qwen2Config", dict(_SMALL, rope_theta=1000000.0)),
    "qwen2_yarn": (  # an original context long enough that the fastest pairs keep their frequencies, as in Qwen2.5
        "Qwen2Config",
        dict(
            _SMALL,
            max_position_embeddings=16384,
            rope_theta=1000000.0,
            # beta_fast and beta_slow at transformers' defaults, stated: the GenAI builder 0.18 divides by
            # beta_fast and takes 0 where the config leaves it out (ZeroDivisionError)
            rope_scaling={
                "type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
            },
        ),
    ),
    "phi3_longrope": (
        "Phi3Config",
        dict(
            _SMALL,
            partial_rotary_factor=0.75,
            original_max_position_embeddings=256,
            rope_theta=10000.0,
            rope_scaling={
                "type": "longrope",
                "short_factor": [1.0 + 0.05 * i for i in range(12)],
                "long_factor": [1.0 + 0.5 * i for i in range(12)],
            },
            pad_token_id=0,
        ),
    ),
    "mistral": ("MistralConfig", dict(_SMALL, rope_theta=1000000.0, sliding_window=None)),
    "gemma2": ("Gemma2Config", dict(_SMALL, head_dim=32, rope_theta=10000.0, sliding_window=64)),
    "gemma3": (
        "Gemma3TextConfig",
        dict(
            _SMALL,
            head_dim=32,
            rope_theta=1000000.0,
            rope_local_base_freq=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            sliding_window=64,
            layer_types=["sliding_attention", "full_attention"],  # a local and a global layer, as in 5 : 1
        ),
    ),
    "glm": (
        "GlmConfig",
        dict(
            _SMALL,
            head_dim=32,
            partial_rotary_factor=0.5,
            rope_theta=10000.0,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    "granite": ("GraniteConfig", dict(_SMALL, rope_theta=10000.0)),
    # dynamic NTK: the base grows once a call passes max_position_embeddings (512 here, extended 4 times)
    "llama_dynamic": (
        "LlamaConfig",
        dict(_SMALL, max_position_embeddings=512, rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 4.0}),
    ),
    # q/k norms: the GenAI builder writes GroupQueryAttention with separate query, key and value inputs
    "qwen3": ("Qwen3Config", dict(_SMALL, head_dim=32, rope_theta=1000000.0)),
    "olmo2": ("Olmo2Config", dict(_SMALL, rope_theta=500000.0)),
    # partial rotation of the leading features, half layout: 32 of 80 (Phi-2's heads), 16 of 32, 8 of 32
    "phi": (
        "PhiConfig",
        dict(
            _SMALL,
            hidden_size=160,
            num_attention_heads=2,
            num_key_value_heads=2,  # optimum's Phi export takes no grouped key/value heads
            partial_rotary_factor=0.4,
            rope_theta=10000.0,
        ),
    ),
    "nemotron": ("NemotronConfig", dict(_SMALL, partial_rotary_factor=0.5, rope_theta=10000.0)),
    "stablelm": ("StableLmConfig", dict(_SMALL, partial_rotary_factor=0.25, rope_theta=10000.0)),
    "gpt_neox": ("GPTNeoXConfig", dict(_SMALL, rotary_pct=0.25, rotary_emb_base=10000.0)),
    # interleaved pairs: partial (GPT-J, 16 of 32) and whole (Cohere)
    "gptj": (
        "GPTJConfig",
        dict(n_embd=128, n_inner=128, n_layer=2, n_head=4, rotary_dim=16, vocab_size=128, n_positions=1024),
    ),
    "cohere": ("CohereConfig", dict(_SMALL, rope_theta=10000.0)),
    # rotation in some layers only (SmolLM3's NoPE layers): layer 1 takes no rotary embedding
    "smollm3": (
        "SmolLM3Config",
        dict(_SMALL, rope_theta=2000000.0, no_rope_layers=[1, 0], use_sliding_window=False, pad_token_id=0),
    ),
}

#: Families whose checkpoint (config and weights) is kept too, in ``checkpoints/``: the oracle of tests that
#: compare a model's logits with transformers' (a repaired export against the checkpoint it came from).
CHECKPOINTS = ("phi3_longrope", "qwen2_yarn", "llama_dynamic")

_CHECKPOINT = textwrap.dedent(
    """
    import json, sys, torch, transformers
    name, config_class, kwargs, folder = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**kwargs)
    config.architectures = None
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder, safe_serialization=True)
    # a word-level tokenizer of the model's vocabulary: the GenAI builder saves one beside the model
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(config.vocab_size)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokens = dict(unk_token="t0", pad_token="t0", bos_token="t1", eos_token="t2")
    transformers.PreTrainedTokenizerFast(tokenizer_object=words, **tokens).save_pretrained(folder)
    print(transformers.__version__)
    """
)


def environment(folder: pathlib.Path, name: str) -> pathlib.Path:
    """The Python of exporter ``name``'s virtual environment, made and installed once."""
    python = folder / name / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *ENVIRONMENTS[name]], check=True)
    return python


def version(python: pathlib.Path, package: str) -> str:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "missing"


def export(
    exporter: str, python: pathlib.Path, checkpoint: pathlib.Path, work: pathlib.Path
) -> tuple[list[str], pathlib.Path]:
    """Run ``exporter`` on ``checkpoint``: its command and the folder it wrote."""
    out = work / exporter
    if exporter == "optimum":
        cli = python.parent / "optimum-cli"
        command = [str(cli), "export", "onnx", "--model", str(checkpoint), "--task", "text-generation-with-past"]
        command.append(str(out))
    else:
        cache = work / "genai-cache"
        command = [str(python), "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(out)]
        command += ["-p", "fp32", "-e", "cpu", "-c", str(cache)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
    return command, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--exporters", default="optimum,genai")
    parser.add_argument("--venvs", default=os.path.join(tempfile.gettempdir(), "arrayrope-exporters"))
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    exporters = [e for e in args.exporters.split(",") if e]
    venvs, out = pathlib.Path(args.venvs), pathlib.Path(args.out)
    pythons = {name: environment(venvs, name) for name in {"optimum", *exporters}}
    record_path = out / "VERSIONS.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"exports": {}}
    record["versions"] = {
        "optimum": {p: version(pythons["optimum"], p) for p in ("optimum-onnx", "optimum", "transformers", "torch")},
        **(
            {"genai": {p: version(pythons["genai"], p) for p in ("onnxruntime-genai", "onnx-ir", "transformers")}}
            if "genai" in pythons
            else {}
        ),
    }
    for family in families:
        config_class, kwargs = FAMILIES[family]
        with tempfile.TemporaryDirectory(prefix=f"arrayrope-{family}-") as tmp:
            work = pathlib.Path(tmp)
            checkpoint = work / "checkpoint"
            subprocess.run(
                [str(pythons["optimum"]), "-c", _CHECKPOINT, family, config_class, json.dumps(kwargs), str(checkpoint)],
                check=True,
            )
            if family in CHECKPOINTS:  # the weights themselves, for tests that run transformers' model on them
                kept = out / "checkpoints" / family
                shutil.rmtree(kept, ignore_errors=True)
                kept.mkdir(parents=True)
                for name in ("config.json", "model.safetensors"):
                    shutil.copy(checkpoint / name, kept / name)
            for exporter in exporters:
                target = out / exporter / family
                shutil.rmtree(target, ignore_errors=True)
                key = f"{exporter}/{family}"
                try:
                    command, written = export(exporter, pythons[exporter], checkpoint, work)
                except subprocess.CalledProcessError as exc:
                    lines = (exc.stderr or exc.stdout or "").strip().splitlines()
                    said = (
                        lines[-1].replace(str(checkpoint), "CHECKPOINT") if lines else f"exit status {exc.returncode}"
                    )
                    record["exports"][key] = {"failed": said}
                    print(f"{key}: failed: {record['exports'][key]['failed']}", file=sys.stderr)
                    continue
                target.mkdir(parents=True)
                shutil.copy(written / "model.onnx", target / "model.onnx")
                if (written / "model.onnx.data").exists():  # weights beside the graph: kept inside instead
                    import onnx

                    onnx.save(onnx.load(str(written / "model.onnx")), str(target / "model.onnx"))
                shutil.copy(checkpoint / "config.json", target / "config.json")
                if family in CHECKPOINTS and (written / "genai_config.json").exists():  # for GenAI's own loop
                    shutil.copy(written / "genai_config.json", target / "genai_config.json")
                record["exports"][key] = {
                    "command": " ".join(
                        "CHECKPOINT"
                        if c == str(checkpoint)
                        else "OUT"
                        if c == str(written)
                        else "CACHE"
                        if c.startswith(str(work))  # a temporary folder: named, so that a rerun writes the same
                        else c
                        for c in command
                    )
                }
                size = (target / "model.onnx").stat().st_size
                print(f"{key}: {size / 1e6:.1f} MB", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
