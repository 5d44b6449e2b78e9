"""The sharding options of `openinfer run`: `--devices N`, `--mesh`, `--shard PATTERN=SPEC`.

    openinfer run --model m.oinf --graph g.graph --devices 4 [--mesh data=2,model=2]
                  [--shard 'W*=None,model' --shard 'K=None,None,model,None'] [--trace t.json]

Without `--shard`, the automatic tensor-parallel plan (`sharding="auto"`) splits one fixed
dim of every weight and cache over the mesh's last axis. On CPU the N devices are emulated:
`XLA_FLAGS=--xla_force_host_platform_device_count=N` is set here when jax has not started
its backend yet (set it yourself otherwise).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from openinfer_jax.core.errors import ShardingError

__all__ = ["add_arguments", "emulate_cpu_devices", "mesh_and_plan", "mesh_platform", "summary"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--devices`, `--mesh` and `--shard` to a subcommand's parser."""
    parser.add_argument(
        "--devices",
        type=int,
        default=0,
        metavar="N",
        help="run sharded over N devices (docs/sharding.md); CPU devices are emulated",
    )
    parser.add_argument(
        "--mesh",
        default="",
        metavar="AXIS=SIZE,...",
        help="mesh axes, e.g. data=2,model=2 (default: model=N)",
    )
    parser.add_argument(
        "--shard",
        action="append",
        default=[],
        metavar="PATTERN=SPEC",
        help="plan entry: variable name, glob or re:regex = comma-separated axes/None",
    )


def mesh_platform(device: str) -> str:
    """The JAX platform a mesh for simulator device `device` is made of (gpu or cpu)."""
    return {"gpu": "gpu", "cuda": "gpu"}.get(device.lower(), "cpu")


def emulate_cpu_devices(devices: int) -> None:
    """Ask XLA for `devices` emulated CPU devices unless XLA_FLAGS already sets a count.

    XLA reads the flag when its CPU backend starts; afterwards this has no effect (then
    `device_mesh` says how many there are and how to get more).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_force_host_platform_device_count={devices}".strip()
        )


def _axes(text: str) -> dict[str, int]:
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit():
            raise ShardingError(f"--mesh {text!r}: expected AXIS=SIZE[,AXIS=SIZE...]")
        axes[name.strip()] = int(size)
    return axes


def mesh_and_plan(args: argparse.Namespace, device: str) -> tuple[Any, Any]:
    """(mesh, plan) for `Simulator(mesh=, sharding=)`, or (None, None) without `--devices`.

    Raises:
        ShardingError: `--shard`/`--mesh` without `--devices`, malformed entries, or fewer
            devices than asked.
    """
    if not args.devices:
        if args.shard or args.mesh:
            raise ShardingError("--shard and --mesh need --devices N")
        return None, None
    if args.devices < 1:
        raise ShardingError(f"--devices must be >= 1, got {args.devices}")
    platform = mesh_platform(device)
    if platform == "cpu":
        emulate_cpu_devices(args.devices)
    from openinfer_jax.sim.sharding import AUTO, device_mesh

    axes = _axes(args.mesh) if args.mesh else None
    mesh = device_mesh(args.devices, axes, platform)
    plan: Any = AUTO
    if args.shard:
        plan = {}
        for entry in args.shard:
            key, sep, spec = entry.partition("=")
            if not sep or not key.strip():
                raise ShardingError(f"--shard {entry!r}: expected PATTERN=SPEC")
            plan[key.strip()] = spec
    return mesh, plan


def summary(sim: Any) -> list[str]:
    """Lines describing where a sharded simulator put things (empty on one device)."""
    sharded = getattr(sim, "sharded", None)
    if sharded is None:
        return []
    from openinfer_jax.sim.sharding_plan import spec_text

    lines = [f"sharded over {sharded.text}: {len(sharded.specs)} variable(s) split"]
    for name, spec in sorted(sharded.specs.items()):
        lines.append(f"  {name}: {spec_text(spec)}")
    for label, info in sorted(sharded.regions.items()):
        stats = info["collectives"]
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(stats["counts"].items())) or "none"
        took = f", {stats['time_ns'] / 1e3:.1f} us standalone" if "time_ns" in stats else ""
        lines.append(f"  {label}: collectives {kinds} ({stats['total_bytes']} bytes{took})")
    return lines
