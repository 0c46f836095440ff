"""validate() and the export/check commands: they pass good models and catch broken ones."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import numpy_helper  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope import cli  # noqa: E402
from arrayrope.cli.demo import _export_case  # noqa: E402
from arrayrope.export import ValidationError, rotary_model, validate  # noqa: E402
from arrayrope.export.build._spec import onnx_dtype  # noqa: E402
from arrayrope.testing import tolerance_at  # noqa: E402


@pytest.mark.parametrize(
    "target,dtype,tables",
    [
        ("onnx23", "float32", "stored"),
        ("ort", "float16", "stored"),
        ("portable", "float16", "stored"),
        ("portable", "float32", "computed"),
        ("portable", "bfloat16", "stored"),
        ("portable", "float64", "computed"),
        ("onnx23", "float16", "computed"),
        ("ort", "float32", "computed"),
    ],
)
def test_validate_passes_good_models(target, dtype, tables):
    model = rotary_model(
        32,
        target=target,
        dtype=dtype,
        tables=tables,
        num_heads=2,
        max_positions=128 if tables == "stored" else None,
        layout="interleaved",
    )
    report = validate(model, providers="cpu")
    assert report.ok
    assert any(r.case == "onnx.checker (full)" and r.ok for r in report.rows)
    assert {r.device for r in report.rows if r.backend == "onnxruntime"} == {
        "CPU (optimisation off)",
        "CPU (optimisation all)",
    }
    numeric = [r for r in report.rows if r.backend != "onnx"]
    assert all(r.max_abs_error <= r.tolerance for r in numeric)


#: Where ONNX Runtime has no bfloat16 kernel: its CPU provider runs neither rotary node in bfloat16.
NO_BFLOAT16_KERNEL = {("cpu", "onnx23"), ("cpu", "ort")}


@pytest.mark.parametrize("provider", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("target", ["onnx23", "ort", "portable"])
@pytest.mark.parametrize("tables", ["stored", "computed"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_low_precision_graphs_on_onnx_runtime(provider, dtype, target, tables, layout):
    """float16 and bfloat16 graphs of every target and table kind, on ONNX Runtime's CPU and CUDA providers
    (bfloat16 values in and out through an I/O binding): verified within 4 ulps of the float64 core, or, where
    the provider has no kernel for the dtype, skipped with the runtime's own reason (never a failure). The
    tables are computed in float32 and cast once: no arithmetic op of the graph runs in the narrow dtype but a
    fused rotary node (whose caches are of x's dtype, by its definition)."""
    if provider == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider here (onnxruntime-gpu and a GPU)")
    model = rotary_model(
        64,
        target=target,
        dtype=dtype,
        tables=tables,
        layout=layout,
        num_heads=2,
        max_positions=4096 if tables == "stored" else None,
    )
    report = validate(model, providers=provider, reference_evaluator=False, raise_on_failure=False)
    rows = [r for r in report.rows if r.backend == "onnxruntime"]
    if dtype == "bfloat16" and (provider, target) in NO_BFLOAT16_KERNEL:
        assert report.status == "not verified" and not rows, report
        assert all("session not created" in why for case, why in report.skipped if "onnxruntime" in case)
        return
    assert report.ok and len(rows) == 2, report
    assert all(r.max_abs_error <= r.tolerance for r in rows)
    if target == "ort":  # onnx infers no types past the contrib op: nothing to check the types of
        return
    inferred = onnx.shape_inference.infer_shapes(model).graph
    typed = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.output]}
    assert all(o in typed for n in model.graph.node for o in n.output if o)
    narrow = {n.op_type for n in model.graph.node if any(typed.get(o) == onnx_dtype(dtype) for o in n.output)}
    assert narrow <= {"Cast", "Reshape", "RotaryEmbedding"}, narrow  # no arithmetic in the narrow dtype


def _tamper(model, row):
    """Flip the sign of one row of the sin table: rotation by the wrong angle at that position."""
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for t in bad.graph.initializer:
        if "sin" in t.name:
            a = numpy_helper.to_array(t).copy()
            a[row] = -a[row]
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    return bad


@pytest.mark.parametrize("target", ["onnx23", "portable"])
def test_validate_catches_a_wrong_table_row_at_the_end(target):
    model = rotary_model(16, target=target, max_positions=64)
    with pytest.raises(ValidationError, match=r"max error .* > tolerance") as info:
        validate(_tamper(model, 63), providers="cpu")
    assert not info.value.report.ok
    report = validate(_tamper(model, 63), providers="cpu", raise_on_failure=False)
    assert report.worst() is not None and "FAIL" in str(report)


def test_validate_bad_input():
    with pytest.raises(ValueError, match=r"model='/no/such.onnx' does not exist"):
        validate("/no/such.onnx")
    plain = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    with pytest.raises(ValueError, match=r"arrayrope.rotary"):
        validate(plain)
    with pytest.raises(ValueError, match=r"unknown provider 'tpu'"):
        validate(rotary_model(8, max_positions=8), providers="tpu")


def test_cuda_provider_is_tried_first_or_skipped_cleanly():
    model = rotary_model(16, max_positions=16)
    report = validate(model, providers=["cuda", "cpu"])
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        cuda = [(what, why) for what, why in report.skipped if "CUDA" in what]
        assert len(cuda) == 2 and all("not available" in why for _, why in cuda)
    else:
        devices = [r.device for r in report.rows if r.backend == "onnxruntime"]
        assert len(devices) == 4 and all(d.startswith("CUDA") for d in devices[:2])
        assert all(r.ok for r in report.rows)


def test_cli_export_then_check(tmp_path, capsys):
    path = tmp_path / "rope.onnx"
    assert (
        cli.main(
            [
                "export",
                "--head-dim",
                "64",
                "--num-heads",
                "4",
                "--layout",
                "half",
                "--target",
                "portable",
                "--max-positions",
                "512",
                "--dtype",
                "float16",
                "-o",
                str(path),
            ]
        )
        == 0
    )
    assert "12 nodes, opsets ai.onnx 17, IR version 8" in capsys.readouterr().out  # 10 + two float32 casts
    assert cli.main(["check", str(path), "--provider", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "verdict: verified: " in out and "CPU (optimisation all)" in out
    has_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert cli.main(["check", str(path), "--provider", "cuda"]) == (0 if has_cuda else 3)
    out = capsys.readouterr().out.splitlines()[-1]
    if not has_cuda:  # the reference evaluator ran, the provider asked for did not: not verified, and it says so
        assert out.startswith("verdict: not verified: --provider cuda could not run here"), out
        assert "what ran: 1 numeric check agrees (onnx reference evaluator)" in out, out


def test_cli_export_from_config(tmp_path, capsys):
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 256,
                "num_attention_heads": 4,
                "rope_theta": 500000.0,
                "partial_rotary_factor": 0.5,
                "max_position_embeddings": 256,
            }
        )
    )
    path = tmp_path / "rope.onnx"
    args = [
        "export",
        "--config",
        str(cfg),
        "--rank",
        "3",
        "--target",
        "onnx23",
        "--layout",
        "half",
        "--max-positions",
        "256",
        "-o",
        str(path),
    ]
    assert cli.main(args) == 0  # a config of no model type: the layout from the command
    model = onnx.load(path)
    node = model.graph.node[-1]
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs["num_heads"] == 4 and attrs["rotary_embedding_dim"] == 32  # head_dim 64, half of it rotates
    cos = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(cos[1, 1], np.cos(500000.0 ** (-2 / 32)), rtol=1e-6)
    assert cli.main(["check", str(path), "--provider", "cpu"]) == 0


def test_cli_errors_and_help_without_onnx(tmp_path, capsys):
    garbage = tmp_path / "bad.onnx"
    garbage.write_bytes(b"not a model")
    assert cli.main(["check", str(garbage)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arrayrope check: error: model=") and "does not load" in err and err.count("\n") == 1
    out = str(tmp_path / "x")
    assert cli.main(["export", "--head-dim", "8", "--target", "onnx23", "--opset", "17", "-o", out]) == 2
    assert "--opset 17 is too old" in capsys.readouterr().err
    code = "import sys; from arrayrope import cli; cli.build_parser(); print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_demo_export_row():
    report = _export_case()
    assert report.ok and len(report.rows) >= 3  # ONNX Runtime at two optimisation levels, reference evaluator
    # float32 within 4 ulps at the scale of a standard normal input (|y| < 8)
    assert all(r.max_abs_error <= r.tolerance <= tolerance_at("float32", 8.0) for r in report.rows)
    assert "RotaryEmbedding, 3 node(s)" in report.rows[0].case


@pytest.mark.parametrize("opset", [13, 21])
def test_portable_runs_from_opset_13(opset):
    for kw in (
        {},
        {"rotary_dim": 8, "layout": "interleaved"},
        {"position_ids": False, "rank": 3, "num_heads": 2},
        {"tables": "computed"},
    ):
        bound = {} if kw.get("tables") == "computed" else {"max_positions": 64}
        model = rotary_model(16, target="portable", opset=opset, **bound, **kw)
        assert model.opset_import[0].version == opset
        report = validate(model, providers="cpu")
        assert report.ok and not report.skipped


@pytest.mark.parametrize("target", ["onnx23", "ort"])
def test_float16_fused_models_are_valid_for_every_seed(target):
    """Fused float16 models are one op reading caches that are the float64 tables rounded to float16:
    correct, and validated as such for every seed (their error is the dtype's rounding of inputs,
    caches, intermediate steps and output, which the 4-ulp rule at the scale of the result covers with
    room to spare), while a cache one position off is caught."""
    from arrayrope.export import rotary_model, validate

    worst = 0.0
    for layout in ("half", "interleaved"):
        for rotary_dim in (None, 16):
            model = rotary_model(
                64, rotary_dim=rotary_dim, target=target, layout=layout, num_heads=4, dtype="float16", max_positions=512
            )
            for seed in range(12):
                report = validate(model, providers="cpu", reference_evaluator=False, seed=seed, raise_on_failure=False)
                assert report.ok, report
                worst = max(worst, *(r.max_abs_error / r.tolerance for r in report.rows if r.tolerance == r.tolerance))
    assert worst < 0.5, worst
    shifted = rotary_model(64, target=target, num_heads=4, dtype="float16", max_positions=512)
    for t in shifted.graph.initializer:
        if "cache" in t.name:
            table = numpy_helper.to_array(t).copy()
            table[1:-1] = table[:-2].copy()  # every row one position late
            t.CopyFrom(numpy_helper.from_array(table, t.name))
    assert not validate(shifted, providers="cpu", raise_on_failure=False).ok


@pytest.mark.parametrize("target", ["onnx23", "portable"])
def test_validate_requires_nan_for_ids_outside_the_tables(target):
    """A model that answers an id outside its table with some row's rotation is invalid."""
    from arrayrope.export import rotary_model, validate

    model = rotary_model(16, target=target, max_positions=32)
    assert validate(model, providers="cpu").ok
    for t in model.graph.initializer:
        table = numpy_helper.to_array(t)
        if table.ndim >= 2 and table.shape[0] == 33:  # (max_positions + 1, ...): its last row is NaN
            table = table.copy()
            table[-1] = table[0]  # as if outside ids were position 0
            t.CopyFrom(numpy_helper.from_array(table, t.name))
    report = validate(model, providers="cpu", raise_on_failure=False)
    assert not report.ok and all(not r.ok for r in report.rows if r.backend != "onnx"), report


def test_a_model_nothing_could_run_is_not_verified(tmp_path, capsys):
    """bfloat16 for ONNX Runtime's contrib op: no CPU kernel, and the reference evaluator has no contrib ops."""
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA runs bfloat16 contrib ops: the model is verified here")
    path = tmp_path / "rope.onnx"
    assert (
        cli.main(
            [
                "export",
                "--head-dim",
                "16",
                "--target",
                "ort",
                "--dtype",
                "bfloat16",
                "--max-positions",
                "64",
                "-o",
                str(path),
            ]
        )
        == 0
    )
    report = validate(str(path), raise_on_failure=False)
    assert report.status == "not verified" and not report.ok and not report.failures
    assert [r.case for r in report.rows] == ["onnx.checker (full)", "metadata frequencies"]
    assert not any(r.numeric for r in report.rows)
    with pytest.raises(ValidationError, match=r"^not verified: no numeric check could run here"):
        validate(str(path))
    capsys.readouterr()
    assert cli.main(["check", str(path)]) == 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(
        "verdict: not verified: no numeric check could run here (2 structural checks passed); "
        "not run here: shape inference (strict), onnxruntime CPU (optimisation off)"
    ), last


@pytest.mark.parametrize("target", ["onnx23", "ort", "portable"])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"rank": 3, "num_heads": 2, "rotary_dim": 16, "layout": "interleaved"},
        {"position_ids": False, "qk": True, "num_heads": 4, "num_kv_heads": 2},
    ],
)
def test_computed_tables_on_every_target(target, kw):
    """No bound: every target computes cos/sin from the ids and validates (ids to 2**30, NaN beyond)."""
    model = rotary_model(32, target=target, **kw)
    assert not any(n.op_type in ("Cos", "Sin") for n in model.graph.node)
    report = validate(model, providers="cpu")
    assert report.ok and "positions<1073741824" in report.title, report


def test_bfloat16_values_pass_through_the_binding_with_their_shapes():
    """0-d and empty inputs keep their shapes; bfloat16 outputs come back as the bits ONNX Runtime wrote."""
    import ml_dtypes
    from onnx import TensorProto, helper

    from arrayrope.export._validate import _run_bound

    bf16 = TensorProto.BFLOAT16
    graph = helper.make_graph(
        [helper.make_node("Cast", ["s"], ["t"], to=bf16), helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, []), helper.make_tensor_value_info("x", bf16, ["N"])],
        [helper.make_tensor_value_info("t", bf16, []), helper.make_tensor_value_info("y", bf16, ["N"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 0):
        x = (np.arange(n) * 0.5 + 1.0).astype(ml_dtypes.bfloat16)
        t, y = _run_bound(sess, {"s": np.array(1.0 / 3.0, dtype=np.float32), "x": x})
        assert t.shape == () and t.dtype == ml_dtypes.bfloat16 and float(t) == float(ml_dtypes.bfloat16(1.0 / 3.0))
        assert (
            y.shape == (n,) and y.dtype == ml_dtypes.bfloat16 and np.array_equal(y.view(np.uint16), x.view(np.uint16))
        )


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        {
            "rope_type": "longrope",
            "short_factor": [1.0] * 8,
            "long_factor": [2.0] * 8,
            "original_max_position_embeddings": 64,
        },
    ],
)
def test_check_of_an_attention_factor_other_than_1(scaling, tmp_path, capsys):
    """YaRN and LongRoPE scale cos and sin (the factor transformers computes from the config): the export checks as
    verified; with the factor dropped from its tables, the check fails."""
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_theta": 10000.0,
                "max_position_embeddings": 256,
                "rope_scaling": scaling,
            }
        )
    )
    factor = arrayrope.rope_frequencies_from_config(json.loads(cfg.read_text()), seq_len=256).attention_factor
    assert factor > 1.05  # the oracle: 0.1 ln 4 + 1 for YaRN, sqrt(1 + ln 4 / ln 64) for LongRoPE
    path = tmp_path / "rope.onnx"
    args = ["export", "--config", str(cfg), "--layout", "half", "--target", "onnx23", "--max-positions", "256"]
    args += ["-o", str(path)]
    assert cli.main(args) == 0
    assert cli.main(["check", str(path), "--provider", "cpu"]) == 0
    model = onnx.load(path)
    scaled = 0
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and a.ndim == 2:
            t.CopyFrom(numpy_helper.from_array((a / factor).astype(a.dtype), t.name))
            scaled += 1
    onnx.save(model, path)
    assert scaled == 2 and cli.main(["check", str(path), "--provider", "cpu"]) == 1
    capsys.readouterr()
    # the factor dropped from the metadata as well: graph and metadata agree, the stated scaling does not
    for p in model.metadata_props:
        if p.key == "arrayrope.rotary":
            stated = json.loads(p.value)
            assert stated["made_from"]["scaling"] == scaling
            p.value = json.dumps(stated | {"attention_factor": 1.0})
    onnx.save(model, path)
    assert cli.main(["check", str(path), "--provider", "cpu"]) == 1
    said = capsys.readouterr().out
    assert f"attention factor 1 stated, {factor:.6g} computed from the stated arguments" in said, said


def test_check_of_frequencies_given_directly_says_their_source_is_not_checked(tmp_path, capsys):
    """Frequencies not made by rope_frequencies carry no arguments to compute them from: the graph is checked
    against them, and the report says the metadata was taken as stated."""
    freqs = arrayrope.RopeFrequencies(inv_freq=[1.0, 0.1, 0.01, 0.001], head_dim=8, rotary_dim=8)
    report = validate(rotary_model(freqs, target="onnx23"), providers=["cpu"], raise_on_failure=False)
    assert report.status == "verified" and [w for w, _ in report.skipped] == ["metadata frequencies"], str(report)
    made = validate(rotary_model(8, target="onnx23"), providers=["cpu"], raise_on_failure=False)
    assert any(r.backend == "onnx" and r.ok and "computes them" in r.note for r in made.rows), str(made)
