"""``arrayrope audit MODEL --config CONFIG``: does every rotation of a deployed ONNX model match its config?"""

from __future__ import annotations

import argparse
import os

HELP = "compare every rotary embedding of an ONNX model with the one its checkpoint's config describes"
VERDICT = True
EPILOG = """\
exit status:
  0  verified: every rotation found was measured and matches its layer's in the config
  1  failed: a rotation differs from the config (the report names the first property that differs)
  2  usage or input error (one line on stderr: 'arrayrope audit: error: ...'): not ONNX, a truncated file,
     no config, a config without RoPE, a config of another model (a head dim other than the model's key
     caches'), external data outside the model's folder
  3  not verified: a rotation could not be measured, or a layer the config gives RoPE has none found
     (the verdict says which, and why)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file (read without its external data; it is not changed)")
    parser.add_argument(
        "--config",
        required=True,
        help="the checkpoint's config.json, or the folder holding it (required)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of text")


def check_model_and_config(args: argparse.Namespace) -> None:
    """The model and the config exist, and the model is a file (the commands that read both: audit, repair)."""
    for option, path in (("model", args.model), ("--config", args.config)):
        if not os.path.exists(path):
            raise ValueError(f"{option} {path}: does not exist")
    if os.path.isdir(args.model):
        raise ValueError(f"model {args.model}: is a folder; name the .onnx file")


def run(args: argparse.Namespace) -> int:
    """Exit 0 every rotation matches, 1 one differs, 3 one could not be measured or a layer has none."""
    check_model_and_config(args)
    from arrayrope.export import audit_rotary

    report = audit_rotary(args.model, args.config)
    if args.json:
        print(report.to_json())
        return report.exit_status
    print(report)
    print(f"verdict: {report.verdict()}")
    return report.exit_status
