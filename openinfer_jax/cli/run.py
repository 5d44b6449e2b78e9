"""`openinfer run`: simulate steps of a graph on a model and print or save the results.

    openinfer run --model m.oinf (--graph g.graph | --arch llama|bert [--chunk N ...])
                  [--steps N] [--input x=x.npy ...] [--stream] [--output out.npz]
                  [--trace out.json [--trace-summaries]] [--chrome-trace out.json]
                  [--fetch y ...] [--device cpu] [--target sim|c|vulkan]
                  [--devices N [--mesh data=2,model=2] [--shard PATTERN=SPEC ...]]

Inputs are `.npy` files inserted before every step. With `--stream` each input is a
stream instead: step i gets slice i of the first axis of a `.npy` (or the i-th array of an
`.npz`), and the run has as many steps as the streams. Without `--fetch`, every variable
written by the entry block is printed after the last step (summarized); `--output` saves
the fetched values of every step.

`--target c` (or `vulkan`) runs the same steps through the emitted program instead: it is
synthesized, built with the system compiler (`CC`, default ``cc``) in a temporary directory
and driven by its generated driver (openinfer_jax.emit.driver_run), so the C program runs on
the same `.npy` inputs and its outputs are saved the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.cli import model_graph
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.core.limits import DEFAULT_LIMITS
from openinfer_jax.sim import sharding_cli

__all__ = ["register", "run_command"]


def register(subparsers: Any) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="simulate a graph on a model",
        description="Run steps of a graph{} program on a .oinf model with the simulator.",
    )
    parser.add_argument("--model", required=True, help="the .oinf model")
    model_graph.add_arguments(
        parser, arch_help="build the graph of this architecture (llama, bert) from the model"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="steps to run (default 1, or the stream length)"
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="insert a dynamic input each step",
    )
    parser.add_argument(
        "--stream", action="store_true",
        help="each --input is a stream: step i inserts slice i of its first axis (.npy) or array i (.npz)",
    )  # fmt: skip
    parser.add_argument(
        "--fetch", action="append", default=[], metavar="NAME", help="variable to print"
    )
    parser.add_argument(
        "--output", metavar="OUT.npz", help="save the fetched variables of every step (.npz)"
    )
    parser.add_argument("--trace", metavar="OUT.json", help="write the trace as JSON")
    parser.add_argument(
        "--trace-summaries",
        action="store_true",
        help="with --trace: summarize every node's output (for openinfer trace-diff); runs node by node",
    )
    parser.add_argument("--chrome-trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    parser.add_argument("--device", default="cpu", help="cpu (default), gpu, vulkan or numpy")
    parser.add_argument(
        "--target", choices=("sim", "c", "vulkan"), default="sim",
        help="sim: the simulator (default); c, vulkan: the emitted program, built with cc",
    )  # fmt: skip
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="raise or lower a resource limit (max_loop_depth, max_unrolled_iterations, "
        "max_tensor_elements, max_cache_entries; docs/simulator.md, Limits)",
    )
    sharding_cli.add_arguments(parser)  # --devices/--mesh/--shard (docs/sharding.md)
    parser.set_defaults(handler=run_command)


def _load(spec: str, stream: bool) -> tuple[str, np.ndarray | list[np.ndarray]]:
    name, sep, file = spec.partition("=")
    if not sep or not name or not file:
        raise SimulationError(f"--input {spec!r}: expected NAME=FILE.npy")
    path = Path(file)
    if not path.is_file():
        raise SimulationError(f"--input {spec!r}: {path} does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                arrays = [loaded[key] for key in loaded.files]
            if not stream:
                raise SimulationError(
                    f"--input {spec!r}: an .npz holds one array per step; add --stream"
                )
            return name, arrays
    except (OSError, ValueError) as err:
        raise SimulationError(f"--input {spec!r}: cannot read {path} as .npy: {err}") from None
    if stream and loaded.ndim == 0:
        raise SimulationError(
            f"--input {spec!r}: a stream needs a first axis to step over; {path} holds a scalar"
        )
    return name, (list(loaded) if stream else loaded)


def _parse_inputs(
    specs: list[str], stream: bool
) -> tuple[dict[str, np.ndarray], dict[str, list[np.ndarray]]]:
    """(inputs inserted every step, streams: one value per step).

    Raises:
        SimulationError: a malformed spec, an unreadable file, streams of different lengths,
            or a stream whose steps change shape (names the input and the step).
    """
    fixed: dict[str, np.ndarray] = {}
    streams: dict[str, list[np.ndarray]] = {}
    for spec in specs:
        name, value = _load(spec, stream)
        if isinstance(value, list):
            for step, item in enumerate(value):
                if item.shape != value[0].shape or item.dtype != value[0].dtype:
                    raise SimulationError(
                        f"--input {name}: step {step} of the stream is {item.dtype}{list(item.shape)} "
                        f"but step 0 was {value[0].dtype}{list(value[0].shape)}; every step of a "
                        "stream must have the input's declared shape and dtype"
                    )
            streams[name] = value
        else:
            fixed[name] = value
    lengths = {name: len(items) for name, items in streams.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{n}: {k}" for n, k in lengths.items())
        raise SimulationError(f"--stream inputs have different lengths ({listed}); give equal ones")
    return fixed, streams


def _steps(requested: int | None, streams: dict[str, list[np.ndarray]]) -> int:
    length = len(next(iter(streams.values()))) if streams else None
    steps = requested if requested is not None else (length or 1)
    if steps < 1:
        raise SimulationError(f"--steps must be >= 1, got {steps}")
    if length is not None and steps > length:
        raise SimulationError(f"--steps {steps} exceeds the {length} steps of the --stream inputs")
    return steps


def _save(path: str, per_step: dict[str, list[np.ndarray]]) -> None:
    """One array per variable, steps on the first axis; `name.STEP` keys when shapes vary."""
    arrays: dict[str, np.ndarray] = {}
    for name, values in per_step.items():
        if all(v.shape == values[0].shape for v in values):
            arrays[name] = np.stack(values)
        else:
            arrays.update({f"{name}.{step}": v for step, v in enumerate(values)})
    try:
        np.savez(path, **arrays)
    except OSError as err:
        raise SimulationError(f"--output {path}: cannot write: {err.strerror or err}") from None


def _summary(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    head = np.array2string(flat[:8], precision=5, separator=", ")
    more = f" ... ({flat.size} values)" if flat.size > 8 else ""
    return f"{value.dtype}{list(value.shape)} {head}{more}"


def _entry_outputs(entry: Any) -> list[str]:
    """The variables the entry block writes with an op or a transfer, in order."""
    from openinfer_jax.ir.nodes import Op, Transfer

    return list(dict.fromkeys(
        n.output.name if isinstance(n, Op) else n.dst.name
        for n in entry.nodes
        if isinstance(n, (Op, Transfer))
    ))  # fmt: skip


def _report(names: list[str], last: dict[str, np.ndarray]) -> None:
    for name in names:
        print(f"{name} = {_summary(np.asarray(last[name]))}")


def _run_emitted(
    args: argparse.Namespace,
    model_path: Path,
    graph: Any,
    fixed: dict[str, np.ndarray],
    streams: dict[str, list[np.ndarray]],
    steps: int,
) -> int:
    """`run --target c|vulkan`: synthesize, build in a temporary directory, drive it."""
    import tempfile
    import time

    from openinfer_jax.core.errors import SynthesisError
    from openinfer_jax.emit import Synthesizer
    from openinfer_jax.emit.driver_run import build_driver, run_driver
    from openinfer_jax.ir import infer_var_types
    from openinfer_jax.trace import load_graph

    graph = load_graph(graph)
    unsupported = [flag for flag, given in (
        ("--trace", args.trace), ("--chrome-trace", args.chrome_trace),
        ("--devices", args.devices), ("--limit", args.limit),
    ) if given]  # fmt: skip
    if unsupported:
        raise SimulationError(
            f"{', '.join(unsupported)}: simulator options; drop them with --target {args.target} "
            "(a -DOI_TRACE build traces the emitted program: docs/synthesis.md)"
        )
    entry = graph.block("entry") or (graph.blocks[0] if graph.blocks else None)
    names = args.fetch or (_entry_outputs(entry) if entry is not None else [])
    declared = {v.name: v for v in graph.vars}
    feeds: list[dict[str, np.ndarray]] = []
    for step in range(steps):
        feed = {**fixed, **{name: items[step] for name, items in streams.items()}}
        for name, value in feed.items():
            var = declared.get(name)
            if var is None or var.kind.value != "dynamic":
                raise SimulationError(f"--input {name}: the graph has no dynamic variable {name!r}")
            if value.dtype != var.dtype.numpy:
                raise SimulationError(
                    f"--input {name}: dtype {value.dtype} does not match the declaration "
                    f"{var.dtype.short}; save it as {var.dtype.numpy}"
                )
        feeds.append(feed)
    types = infer_var_types(graph)
    missing = [n for n in names if n not in types]
    if missing:
        raise SynthesisError(f"--fetch {', '.join(missing)}: no such variable in the graph")
    start = time.perf_counter()
    plan = Synthesizer(args.target).synthesize(model_path, graph, name="model", outputs=names)
    with tempfile.TemporaryDirectory(prefix="openinfer-run-") as tmp:
        exe = build_driver(plan, Path(tmp) / "src")
        built = time.perf_counter() - start
        results = run_driver(exe, model_path, feeds, Path(tmp), {n: types[n].dtype for n in names})
    _report(names, results[-1])
    print(f"ran {steps} step(s) through the emitted {args.target} program (built in {built:.1f} s)")
    if args.output:
        _save(args.output, {n: [r[n] for r in results] for n in names})
        print(f"saved {len(names)} variable(s) x {steps} step(s): {args.output}")
    return 0


def run_command(args: argparse.Namespace) -> int:
    """Handler of `openinfer run`; returns the exit code."""
    from openinfer_jax.sim import Simulator, write_chrome_trace, write_trace_json

    model_path = Path(args.model)
    if not model_path.is_file():
        raise SimulationError(f"--model {model_path} does not exist")
    arch = args.arch[-1] if args.arch else None
    graph = model_graph.program(args, model_path, arch)
    fixed, streams = _parse_inputs(args.input, args.stream)
    steps = _steps(args.steps, streams)
    if args.target != "sim":
        return _run_emitted(args, model_path, graph, fixed, streams, steps)
    mesh, plan = sharding_cli.mesh_and_plan(args, args.device)
    limits = DEFAULT_LIMITS.with_overrides(args.limit)
    sim = Simulator(
        str(model_path), graph, device=args.device, mesh=mesh, sharding=plan, limits=limits
    )
    if args.trace or args.chrome_trace:
        sim.with_trace(summaries=args.trace_summaries).with_timer()
    ex = sim.make_executor()
    names = args.fetch or _entry_outputs(sim.entry)
    saved: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for step in range(steps):
        ex.insert(fixed)
        ex.insert({name: items[step] for name, items in streams.items()})
        ex.step()
        if args.output:
            for name in names:
                saved[name].append(np.asarray(ex.fetch(name)))
    _report(names, {name: ex.fetch(name) for name in names})
    stats = ex.stats
    print(f"ran {stats['steps']} step(s); {stats['compilations']} XLA compilation(s)")
    if args.output:
        _save(args.output, saved)
        print(f"saved {len(names)} variable(s) x {steps} step(s): {args.output}")
    for line in sharding_cli.summary(sim):
        print(line)
    if args.trace:
        write_trace_json(ex.trace(), args.trace)
        print(f"trace: {args.trace}")
    if args.chrome_trace:
        write_chrome_trace(ex.trace(), args.chrome_trace)
        print(f"chrome trace: {args.chrome_trace} (open in https://ui.perfetto.dev)")
    return 0
