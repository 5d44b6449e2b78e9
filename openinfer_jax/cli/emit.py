"""`openinfer emit`: synthesize C (or Vulkan) sources for a graph and its model.

    openinfer emit c|vulkan --model M.oinf (--graph G.graph | --arch llama|bert [--chunk N ...])
                  [--arch DEVICE] -o DIR [--name NAME] [--output VAR ...] [--embed-weights]
                  [--force]

`--arch` names a model architecture (llama, bert: the graph is built from the model, no
graph file needed) or a device (cortex-a53, ada-mock, or a device JSON file); give it twice
for both.

Every check runs before anything is written. A new output directory appears atomically; one
that emit wrote before is updated (its manifest says which files are emit's); a non-empty
directory emit did not write is refused without --force, and no file emit did not write is
ever deleted.
"""

from __future__ import annotations

import argparse
from typing import Any

from openinfer_jax.cli import model_graph
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit import TARGETS, Synthesizer
from openinfer_jax.emit.driver_run import build_command

__all__ = ["emit_command", "register"]


def register(subparsers: Any) -> None:
    """Add the `emit` subcommand."""
    parser = subparsers.add_parser(
        "emit",
        help="synthesize C/Vulkan sources for a graph and model",
        description="Emit plain source code for a graph{} program bound to a .oinf model (docs/synthesis.md).",
    )
    parser.add_argument("target", choices=sorted(TARGETS), help="what to emit")
    parser.add_argument("--model", required=True, help="the .oinf model")
    model_graph.add_arguments(
        parser,
        arch_help="a model architecture (llama, bert) to build the graph from the model, and/or a "
        "device: cortex-a53, ada-mock or a device JSON file (default: a generic host); repeatable",
    )
    parser.add_argument(
        "-o", "--out", required=True, metavar="DIR",
        help="output directory: new, empty, or written by emit before (other files are kept)",
    )  # fmt: skip
    parser.add_argument(
        "--force", action="store_true",
        help="write into a non-empty directory emit did not write (its other files are kept)",
    )  # fmt: skip
    parser.add_argument(
        "--name", default="model", help="program name: <name>.h, <name>.c (default: model)"
    )
    parser.add_argument(
        "--output", action="append", default=None, metavar="VAR",
        help="a variable the API can fetch (repeatable; default: all); others share memory by lifetime",
    )  # fmt: skip
    parser.add_argument(
        "--embed-weights", action="store_true", help="compile the model into the program"
    )
    parser.add_argument(
        "--strict", action="store_true",
        help="vulkan: fail (SynthesisError naming the node) instead of running an op on the host",
    )  # fmt: skip
    parser.set_defaults(handler=emit_command)


def emit_command(args: argparse.Namespace) -> int:
    """Synthesize and write; prints the plan summary. Errors are SynthesisError (exit 1)."""
    model_arch, devices = model_graph.split_arch(args.arch)
    if len(devices) > 1:
        raise SynthesisError(f"--arch names two devices: {', '.join(devices)}; give one")
    synth = (
        Synthesizer.from_arch(devices[0]).with_target(args.target)
        if devices
        else Synthesizer(args.target)
    )
    plan = synth.synthesize(
        args.model,
        model_graph.program(args, args.model, model_arch),
        name=args.name,
        outputs=args.output,
        embed_weights=args.embed_weights,
        strict=args.strict,
    )
    out = plan.emit(args.out, force=args.force)
    print(plan.summary())
    print(f"wrote {len(plan.files)} files to {out}")
    print(f"build the test driver: cd {out} && {' '.join(build_command(plan, 'cc'))}")
    print(
        f"run it: ./driver {args.model} STEPS IN_DIR OUT_DIR (docs/synthesis.md), or on .npy "
        "inputs: openinfer run --target " + ("c" if plan.target == "c" else "vulkan") + " ..."
    )
    return 0
