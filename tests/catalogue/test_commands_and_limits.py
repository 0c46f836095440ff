"""The catalogue, commands and limits: every CLI error, and risky inputs in a subprocess with limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from catalogue_cases import HAS

from arrayrope import cli

# -- the command line: every error is exit status 2 and one line ------------------------------------------


def _commands():
    yield ["nonsense"], "argument command: invalid choice"
    yield ["parity", "--backends", "nmupy"], "unknown backends ['nmupy']"
    yield ["parity", "--dtypes", "float8"], "dtypes must be a non-empty selection"
    yield ["demo", "--backends", "x,y"], "unknown backends ['x', 'y']"
    if HAS["matplotlib"]:
        yield ["plot", "--types", "bogus"], "'bogus' is not one of"
        yield ["plot", "--types", "linear", "--factor", "-1"], "--factor must be a number >= 1, got -1"
        yield ["plot", "--head-dim", "7", "--types", "default"], "--head-dim must be even"
        yield ["plot", "/no/such/config.json"], "does not exist"
    if HAS["onnx"] and HAS["onnxruntime"]:
        for flags, message in [
            (["--head-dim", "8", "--max-positions", "0"], "--max-positions must be positive"),
            (["--head-dim", "8", "--num-heads", "-2"], "--num-heads must be positive"),
            (["--head-dim", "8", "--rotary-dim", "10"], "--rotary-dim must be <= --head-dim 8"),
            (
                ["--head-dim", "8", "--tables", "computed", "--max-positions", "64"],
                "--max-positions 64 bounds stored tables, and --tables computed stores none",
            ),
            (["--head-dim", "8", "--dtype", "float64", "--target", "ort"], "cannot be carried by --target ort"),
            (["--head-dim", "8", "--rank", "3"], "--rank 3 input"),
            (["--head-dim", "8", "--num-kv-heads", "2"], "--num-kv-heads applies to k and needs --qk"),
            (["--head-dim", "8", "--opset", "100"], "newer than the installed onnx knows"),
            (["--config", "/no/such/config.json"], "does not exist"),
            (["--head-dim", "8", "--base", "inf"], "base must be a finite number > 0"),
        ]:
            yield ["export", *flags, "-o", "{tmp}/x.onnx"], message
        yield ["export", "--head-dim", "8", "-o", "{tmp}/missing/x.onnx"], "does not exist"
        yield ["check", "{tmp}/missing.onnx"], "does not exist"
        yield ["check", "{tmp}"], "is not a regular file (a folder)"
        yield ["check", "{tmp}/empty.onnx", "--provider", "tpu"], "argument --provider: invalid choice"
        config = os.path.join(os.path.dirname(__file__), "..", "fixtures", "exporters", "optimum", "qwen2")
        for command in (["audit"], ["check"], ["export", "fuse"]):  # protobuf reads no bytes as an empty model
            extra = ["--config", config] if command == ["audit"] else ["-o", "{tmp}/out.onnx"] * (command != ["check"])
            yield [*command, "{tmp}/empty.onnx", *extra], "does not load as an ONNX model: the file is empty"
        for command in (["export", "fuse"], ["repair"]):  # the input is never written over
            extra = ["--config", config] if command == ["repair"] else []
            yield [*command, "{tmp}/empty.onnx", *extra, "-o", "{tmp}/empty.onnx"], "is the model read"


@pytest.mark.parametrize("argv, message", list(_commands()), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_command_answers_an_error_with_status_2_and_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "empty.onnx").write_bytes(b"")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err, err


# -- risky inputs: in a subprocess, with a memory limit and a timeout ---------------------------------------

RISKY_MEMORY = 1 << 30  # bytes of address space beyond what the interpreter has mapped at start
RISKY_SECONDS = 30


LIMITED = textwrap.dedent("""
    import json, resource, sys, time, warnings
    warnings.simplefilter("ignore")
    import numpy as np, arrayrope as ar
    with open("/proc/self/statm") as fh:
        limit = int(fh.read().split()[0]) * resource.getpagesize() + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    space = {"np": np, "ar": ar}
    t = time.perf_counter()
    try:
        exec(sys.argv[1], space)
        out = {"outcome": "ok", "result": repr(space["result"])[:200]}
    except (ValueError, TypeError, MemoryError) as exc:
        out = {"outcome": type(exc).__name__, "message": str(exc)}
    out["seconds"] = time.perf_counter() - t
    print(json.dumps(out))
""")


def run_limited(code: str, tmp_path) -> dict:
    """Run ``code`` (which sets ``result``) with RISKY_MEMORY more bytes of address space and a timeout."""
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, code, str(RISKY_MEMORY)],
        capture_output=True,
        text=True,
        timeout=RISKY_SECONDS,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # no crash
    return json.loads(done.stdout.strip().splitlines()[-1])


RISKY = {
    # name: (code setting ``result``, outcome, text in the message or result)
    "config: /dev/zero": ("result = ar.rope_frequencies_from_config('/dev/zero')", "ValueError", "character device"),
    "config: a FIFO": (
        "import os; os.mkfifo('fifo.json'); result = ar.rope_frequencies_from_config('fifo.json')",
        "ValueError",
        "a FIFO",
    ),
    "config: 1 GB of zeros (sparse)": (
        "open('big.json', 'wb').truncate(1 << 30); result = ar.rope_frequencies_from_config('big.json')",
        "ValueError",
        "bytes",
    ),
    "config: nested a million deep": (
        "open('deep.json', 'w').write('[' * 10**6 + ']' * 10**6); "
        "result = ar.rope_frequencies_from_config('deep.json')",
        "ValueError",
        "deeply",
    ),
    "offset 2**24 + 3 (an 8 GiB cache before)": (
        "r = ar.RotaryEmbedding(128); q = np.ones((1, 32, 1, 128), np.float32)\nresult = r(q, offset=2**24 + 3).shape",
        "ok",
        "(1, 32, 1, 128)",
    ),
    "offset 2**62": (
        "result = ar.RotaryEmbedding(128)(np.ones((1, 8, 1, 128), np.float32), offset=2**62).shape",
        "ok",
        "(1, 8, 1, 128)",
    ),
    "t5: 2**17 buckets, distance 2**40": (
        "result = ar.t5_relative_buckets(np.arange(-16, 17) * 2**36, num_buckets=2**17, max_distance=2**40).max()",
        "ok",
        "131071",
    ),
    "t5 bias: a large table and distance": (
        "result = ar.t5_relative_bias(np.zeros((16384, 1), np.float32), 64, 64, max_distance=2**40).shape",
        "ok",
        "(1, 64, 64)",
    ),
    "rope_tables of 2**40 positions (an output larger than memory)": (
        "result = ar.rope_tables(ar.rope_frequencies(8), 2**40)",
        "MemoryError",
        "",
    ),
    "alibi_bias of 2**20 x 2**20 (an output larger than memory)": (
        "result = ar.alibi_bias(4, 2**20, 2**20)",
        "MemoryError",
        "",
    ),
    "axial grid of 2**40 tokens (an output larger than memory)": (
        "result = ar.axial_rope_tables(8, (2**20, 2**20))",
        "MemoryError",
        "",
    ),
    "sinusoidal of 2**40 positions (an output larger than memory)": (
        "result = ar.sinusoidal_embedding(8, 2**40)",
        "MemoryError",
        "",
    ),
}
if HAS["onnx"]:
    RISKY.update(
        {
            "export: max_positions 2**23": (
                "from arrayrope.export import rotary_model\nresult = rotary_model(128, max_positions=2**23)",
                "ValueError",
                "2 GiB limit",
            ),
            "validate: /dev/zero": (
                "from arrayrope.export import validate\nresult = validate('/dev/zero')",
                "ValueError",
                "character device",
            ),
            "validate: a FIFO": (
                "import os; os.mkfifo('m.onnx')\nfrom arrayrope.export import validate\nresult = validate('m.onnx')",
                "ValueError",
                "a FIFO",
            ),
            "add_rotary: 1 GB model file (sparse zeros)": (
                "open('m.onnx', 'wb').truncate(1 << 30)\nfrom arrayrope.export import add_rotary\n"
                "result = add_rotary('m.onnx', q='q', freqs=8)",
                "ValueError",
                "does not load",
            ),
        }
    )


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")),
    reason="memory limits of a subprocess: Linux only",
)
@pytest.mark.parametrize("name", list(RISKY))
def test_a_risky_input_is_answered_within_limits(name, tmp_path):
    code, outcome, text = RISKY[name]
    got = run_limited(code, tmp_path)
    assert got["outcome"] == outcome, got
    assert text in got.get("message", got.get("result", "")), got
    assert got["seconds"] < 10, got
