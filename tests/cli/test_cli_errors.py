"""Every CLI error is exit status 2 and one line on stderr naming the problem, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

HAS_ONNX = importlib.util.find_spec("onnx") is not None


def arrayrope(*args: str, cwd=None, block: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m arrayrope ARGS`` (with the module ``block`` made unimportable), as a user runs it."""
    code = "import runpy, sys\n"
    if block:
        code += f"sys.modules[{block!r}] = None\n"
    code += f"sys.argv = ['arrayrope', *{list(args)!r}]\nrunpy.run_module('arrayrope', run_name='__main__')\n"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess, command: str, *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"arrayrope {command}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 5e5}))
    return path


def test_export_output_errors(tmp_path):
    pytest.importorskip("onnx")
    one_line_error(
        arrayrope("export", "--head-dim", "8", "-o", str(tmp_path / "missing" / "x.onnx")),
        "export",
        "does not exist",
        "missing",
    )
    if os.path.exists("/dev/full"):
        one_line_error(
            arrayrope("export", "--head-dim", "8", "-o", "/dev/full"),
            "export",
            "-o /dev/full: cannot write the model: No space left on device",
        )


def test_export_reads_a_config_folder_and_refuses_flags_it_would_ignore(config, tmp_path):
    pytest.importorskip("onnx")
    out = tmp_path / "rope.onnx"
    # a config of no model type names no pair layout: the command says what to pass
    one_line_error(
        arrayrope("export", "--config", str(config.parent), "-o", str(out)),
        "export",
        "the config has no model_type; pass --layout half or --layout interleaved",
    )
    done = arrayrope("export", "--config", str(config.parent), "--layout", "half", "-o", str(out))
    assert done.returncode == 0 and out.exists(), done.stderr
    assert "head_dim=64" in done.stdout
    glm = tmp_path / "glm.json"  # GLM pairs features (2i, 2i + 1): the family's layout, not half
    glm.write_text(json.dumps({"model_type": "glm", "hidden_size": 256, "num_attention_heads": 4}))
    done = arrayrope("export", "--config", str(glm), "-o", str(out))
    assert done.returncode == 0 and "interleaved" in done.stdout, done.stdout
    one_line_error(
        arrayrope(
            "export", "--config", str(config), "--head-dim", "32", "--base", "5e5", "--rotary-dim", "16", "-o", str(out)
        ),
        "export",
        "not combined with --base, --head-dim, --rotary-dim",
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    one_line_error(
        arrayrope("export", "--config", str(fifo), "-o", str(tmp_path / "x.onnx"), timeout=20),
        "export",
        "is not a regular file (a FIFO)",
    )
    if HAS_ONNX:
        one_line_error(arrayrope("check", str(fifo), timeout=20), "check", "is not a regular file (a FIFO)")
    one_line_error(
        arrayrope("plot", str(fifo), "-o", str(tmp_path / "x.png"), timeout=20),
        "plot",
        "is not a regular file (a FIFO)",
    )


@pytest.mark.parametrize(
    "args, needles",
    [
        (["export", "--head-dim", "8", "--max-positions", "-5"], ["--max-positions must be positive, got -5"]),
        (["export", "--head-dim", "0"], ["--head-dim must be positive, got 0"]),
        (["export", "--head-dim", "7"], ["--head-dim must be even"]),
        (["export", "--head-dim", "8", "--base", "nan"], ["--base must be a finite number > 0, got nan"]),
        (
            ["export", "--head-dim", "8", "--target", "onnx23", "--opset", "17"],
            ["--opset 17 is too old for --target onnx23"],
        ),
        (["export", "--head-dim", "8", "--rank", "5"], ["argument --rank: invalid choice: 5"]),
        (["export", "--head-dim", "eight"], ["argument --head-dim: invalid int value: 'eight'"]),
        (["export"], ["-o/--output is required"]),
        (
            ["export", "--max-positions", "8388608", "--head-dim", "128"],
            ["--max-positions 8388608 needs 4.29 GB", "use --max-positions <="],
        ),
        (["check", "missing.onnx"], ["model='missing.onnx' does not exist"]),
        (["parity", "--backends", "nmupy"], ["--backends: unknown backends ['nmupy']"]),
        (["parity", "--dtypes", "float8"], ["--dtypes must be a non-empty selection"]),
        (["demo", "--backends", "nmupy"], ["--backends: unknown backends ['nmupy']"]),
        (["plot", "--types", "bogus"], ["--types: 'bogus' is not one of"]),
        (["plot", "--types", "linear", "--factor", "0.5"], ["--factor must be a number >= 1, got 0.5"]),
        (["plot", "--types", "default", "--max-distance", "-3"], ["--max-distance must be a positive int, got -3"]),
        (["nonsense"], ["argument command: invalid choice: 'nonsense'"]),
    ],
)
def test_bad_values_are_one_line_and_status_2(args, needles, tmp_path):
    if args[0] in ("export", "check"):
        pytest.importorskip("onnx")
    if args[0] == "plot":
        pytest.importorskip("matplotlib")
    if args[0] in ("export", "plot") and "-o" not in args and args[1:]:
        args = [*args, "-o", str(tmp_path / ("x.onnx" if args[0] == "export" else "x.png"))]
    done = arrayrope(*args, cwd=tmp_path)
    command = args[0] if args[0] != "nonsense" else ""
    if not command:  # an argument error of the top-level parser
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and needles[0] in done.stderr, done.stderr
        return
    one_line_error(done, command, *needles)


def test_a_model_arrayrope_did_not_make_and_garbage(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    foreign = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [vi],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
    )
    onnx.save(foreign, tmp_path / "foreign.onnx")
    one_line_error(
        arrayrope("check", str(tmp_path / "foreign.onnx")), "check", "'arrayrope.rotary' metadata", "arrayrope audit"
    )
    (tmp_path / "garbage.onnx").write_bytes(b"\x00\xff" * 100)
    one_line_error(arrayrope("check", str(tmp_path / "garbage.onnx")), "check", "does not load as an ONNX model")
    one_line_error(arrayrope("check", str(tmp_path)), "check", "is not a regular file (a folder)")


@pytest.mark.parametrize(
    "command, module, extra",
    [
        (["export", "--head-dim", "8", "-o", "x.onnx"], "onnx", "onnx"),
        (["check", "x.onnx"], "onnx", "onnx"),
        (["plot", "--types", "default", "-o", "x.png"], "matplotlib", "plot"),
    ],
)
def test_a_missing_extra_is_named(command, module, extra, tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"")
    done = arrayrope(*command, cwd=tmp_path, block=module)
    one_line_error(done, command[0], f"this needs {module}, which is not installed: pip install 'arrayrope[{extra}]'")


def test_version():
    from arrayrope import __version__

    done = arrayrope("--version")
    assert (done.returncode, done.stdout) == (0, f"arrayrope {__version__}\n")


def _parsers():
    """Every command's parser, ``export fuse`` included, by its prog."""
    import argparse

    from arrayrope.cli import build_parser

    todo, seen = [build_parser()], {}
    while todo:
        parser = todo.pop()
        seen[parser.prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return seen


def test_every_option_shows_its_default_and_verdict_commands_their_exit_statuses():
    parsers = _parsers()
    assert {
        "arrayrope check",
        "arrayrope demo",
        "arrayrope parity",
        "arrayrope export fuse",
        "arrayrope audit",
        "arrayrope plot",
        "arrayrope export",
    } <= set(parsers)
    for prog, parser in parsers.items():
        text = parser.format_help()
        for action in parser._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                assert action.help, (prog, action.option_strings)
                text_of = parser._get_formatter()._expand_help(action)
                assert "default" in text_of or "required" in text_of, (prog, action.option_strings, text_of)
                assert "None" not in text_of, (prog, action.option_strings, text_of)
        if prog.split(" ", 1)[-1] in ("check", "demo", "parity", "export fuse", "audit", "repair"):
            for status in ("0  verified", "1  failed", "2  usage or input error", "3  not verified"):
                assert status in text, (prog, status)
        elif prog != "arrayrope":
            assert "exit status: 0 done, 2 usage or input error" in text, prog


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["check", "x.onnx", "--provider", "gpu"],
            "arrayrope check: error: argument --provider: invalid choice: 'gpu'",
        ),
        (
            ["export", "fuse", "x.onnx"],
            "arrayrope export fuse: error: the following arguments are required: -o/--output",
        ),
        (["parity", "--dtypes", "float8"], "arrayrope parity: error: --dtypes must be a non-empty selection of"),
        (
            ["export", "--head-dim", "8", "--layout", "half", "--target", "ort", "--dtype", "float64", "-o", "x.onnx"],
            "arrayrope export: error: --dtype float64 cannot be carried by --target ort",
        ),
        (  # an unknown flag is the command's error, not the top-level parser's
            ["audit", "x.onnx", "--config", "c.json", "--bogus", "1"],
            "arrayrope audit: error: unrecognized arguments: --bogus 1",
        ),
        (
            ["export", "fuse", "x.onnx", "-o", "y.onnx", "--frob"],
            "arrayrope export fuse: error: unrecognized arguments",
        ),
        (  # a path ending like an option's name stays as typed (audit has a --json flag)
            ["audit", "x.onnx", "--config", "missing.json"],
            "arrayrope audit: error: --config missing.json: does not exist",
        ),
        (  # what to pass, named as the option a user types
            ["export", "--head-dim", "64", "--tables", "stored", "-o", "x.onnx"],
            "arrayrope export: error: --tables stored stores max_positions rows: pass --max-positions",
        ),
        (["export", "--head-dim", "64", "--rank", "3", "-o", "x.onnx"], "arrayrope export: error: --rank 3 input"),
        (["export", "--head-dim", "64", "--layer-type", "full_attention", "-o", "x.onnx"], "arrayrope export: "),
        (["plot", "--types", "default", "-o", "missing/x.png"], "arrayrope plot: error: -o missing/x.png: the folder"),
        (["plot", "--types", "default", "-o", "x.txt"], "arrayrope plot: error: -o x.txt: the plot is written as PNG"),
        (["demo", "--backends", ""], "arrayrope demo: error: --backends '' names none"),
        (["parity", "--backends", " , "], "arrayrope parity: error: --backends ' , ' names none"),
        ([], "arrayrope: error: name a command: demo, parity, export, check, audit, repair, plot"),
    ],
)
def test_one_error_form_naming_the_option_as_typed(args, expected, tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"")
    if args[:1] in (["export"], ["check"], ["audit"]):
        pytest.importorskip("onnx")
    if args[:1] == ["plot"]:
        pytest.importorskip("matplotlib")
    done = arrayrope(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stdout == "", done
    assert done.stderr.startswith(expected), done.stderr
    assert "needs num_heads" not in done.stderr and "pass max_positions" not in done.stderr


def test_a_bad_backend_in_the_environment_is_named_there(tmp_path):
    env = {**os.environ, "ARRAYROPE_BACKENDS": "bogus"}
    code = "import runpy, sys\nsys.argv = ['arrayrope', 'parity']\nrunpy.run_module('arrayrope', run_name='__main__')\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    one_line_error(done, "parity", "unknown backends ['bogus'] (from the environment variable ARRAYROPE_BACKENDS)")


def test_a_config_with_rope_per_layer_type_exports_one_layer_type(tmp_path):
    pytest.importorskip("onnx")
    gemma3 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "exporters", "optimum", "gemma3")
    out = str(tmp_path / "g.onnx")
    one_line_error(arrayrope("export", "--config", gemma3, "-o", out), "export", "pass --layer-type")
    done = arrayrope("export", "--config", gemma3, "--layer-type", "sliding_attention", "-o", out)
    assert done.returncode == 0 and "rope_type=default" in done.stdout, done
    done = arrayrope("export", "--config", gemma3, "--layer-type", "full_attention", "-o", out)
    assert done.returncode == 0 and "rope_type=linear" in done.stdout, done


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    """``arrayrope demo | head -1``: the command stops at its next write, with the status a shell gives a process
    ended by SIGPIPE (141) and nothing on stderr, not 'error: Broken pipe'."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "arrayrope", "demo", "--backends", "numpy"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    status = proc.wait(timeout=120)
    assert first.startswith(b"arrayrope demo") and status == 141, (first, status)
    assert proc.stderr.read() == b""


def test_a_config_whose_frequencies_follow_the_length_exports_with_a_note(tmp_path):
    """Dynamic NTK and LongRoPE change their frequencies with the sequence length, which one graph of stored
    frequencies cannot: the export says up to which length it holds, on stderr; a fixed type says nothing."""
    pytest.importorskip("onnx")
    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures", "exporters", "optimum")
    for family, length in (("llama_dynamic", 512), ("phi3_longrope", 256), ("llama3", None)):
        done = arrayrope("export", "--config", os.path.join(fixtures, family), "-o", str(tmp_path / "m.onnx"))
        assert done.returncode == 0, done
        said = f"changes its frequencies past sequences of {length}; this graph holds those of sequences up to"
        assert (said in done.stderr) == (length is not None), done.stderr
