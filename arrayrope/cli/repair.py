"""``arrayrope repair MODEL --config CONFIG -o OUT``: rewrite the rotations the audit finds wrong to the config's."""

from __future__ import annotations

import argparse

from ._output import check_output

HELP = "rewrite every rotary embedding of an ONNX model that differs from its config to the config's, and audit it"
VERDICT = True
EPILOG = """\
exit status (that of the audit of the repaired model):
  0  verified: every rotation of the repaired model matches the config; the model was written
  1  failed: a rotation still differs (one that could not be rewritten: the report says why); the model
     was written with the rotations that could be, or not at all where none could
  2  usage or input error (one line on stderr: 'arrayrope repair: error: ...'); nothing was written
  3  not verified: nothing was repaired because every rotation already matches (nothing written), or a
     rotation could not be measured, or a layer the config gives RoPE has none found (the model was
     written if a rotation was rewritten)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file to read (it is not changed)")
    parser.add_argument(
        "--config", required=True, help="the checkpoint's config.json, or the folder holding it (required)"
    )
    parser.add_argument("-o", "--output", required=True, help="where to write the repaired model (required)")
    parser.add_argument(
        "--max-positions",
        type=int,
        default=None,
        help="a bound on the positions: tables of this many rows are stored (default: cos/sin computed in "
        "the graph from the position ids, right at every position below 2**30; dynamic NTK's for calls up to "
        "the context the config implies, which this bound extends)",
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 repaired and verified, 1 a rotation still differs, 3 not verified; 2 (raised) before anything."""
    from .audit import check_model_and_config

    check_model_and_config(args)
    check_output(args.output, args.model)
    if args.max_positions is not None and args.max_positions < 1:
        raise ValueError(f"--max-positions must be a positive int, got {args.max_positions}")
    from arrayrope.export import repair_rotary

    from ._verdict import NOT_VERIFIED

    result = repair_rotary(args.model, args.config, max_positions=args.max_positions)
    report = result.report
    print(report)
    if not report.repaired:  # nothing repaired: the repair itself is not verified, whatever the model is
        n = len(report.changes)
        kept = f"{args.output} not written ({n} of {n} rotations kept)"
        if report.status == "verified":
            audit = report.after.verdict().split(": ", 1)[1]
            print(f"verdict: not verified: nothing to repair, the model needs none ({audit}); {kept}")
            return NOT_VERIFIED
        why = (
            "no rotation could be rewritten (each line above says why)"
            if report.status == "failed"
            else ("no rotation was found wrong, and none rewritten")
        )
        print(f"verdict: {report.after.verdict()}; {why}: {kept}")
        return report.exit_status
    result.save(args.output)
    data = "" if report.data_folder is None else f" (its weights in {args.output}.data)"
    print(f"verdict: {report.verdict()}")
    print(f"wrote {args.output}{data}: {report.repaired} of {len(report.changes)} rotations rewritten")
    return report.exit_status
