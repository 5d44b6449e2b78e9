"""`Synthesizer`: a validated graph plus its model become a `Plan` of C (or Vulkan) sources.

Every check happens in `synthesize`, before any file exists: graph validation against the
model, the device limits (memory), the bounded shapes, and every node's C rendering.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from openinfer_jax.core.errors import GraphValidationError, SynthesisError
from openinfer_jax.emit.analysis import Analysis, analyze
from openinfer_jax.emit.c_epilogue import fusable, is_anchor, strided_attention
from openinfer_jax.emit.c_program import generate_c
from openinfer_jax.emit.device import DeviceArch, host_arch, load_arch
from openinfer_jax.emit.plan import Plan
from openinfer_jax.emit.runtime_files import kernel_files, runtime_files, vulkan_files
from openinfer_jax.emit.vk_kernels import device_features, matmul_tiles
from openinfer_jax.emit.vk_program import VkOptions, runtime_shaped
from openinfer_jax.emit.vk_variants import max_variants, prefix_counts, shape_variants
from openinfer_jax.ir.nodes import Graph
from openinfer_jax.passes import optimize, prepare
from openinfer_jax.passes.context import PassContext
from openinfer_jax.passes.epilogue import EpiloguePlan, plan_epilogues
from openinfer_jax.trace.load import load_graph

__all__ = ["TARGETS", "Synthesizer"]

#: Targets and what they emit.
TARGETS: dict[str, str] = {
    "c": "plain C99 (libc + libm): <name>.h, <name>.c, oi_runtime.[ch], a test driver",
    "vulkan": "C99 host code on the Vulkan API + GLSL compute shaders (SPIR-V embedded, from glslc): "
    "op nodes with a GPU kernel run on the device, the rest as in the C target on the host",
}


def _load_model(model: Any) -> tuple[Any, bytes | None, bool]:
    """(ModelLoader, raw bytes or None, whether we opened it)."""
    from openinfer_jax.oinf import ModelLoader

    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            return ModelLoader.open(path), None, True
        except OSError as err:
            raise SynthesisError(f"cannot open model {path.name}: {err.strerror}") from None
    return model, None, False


class Synthesizer:
    """Turns (model, graph) into source code for one device.

    ``Synthesizer("c")`` / ``Synthesizer("vulkan")`` use a generic host description;
    ``Synthesizer(arch)`` / `from_arch` take a device JSON (path, dict or `DeviceArch`).

    Raises:
        SynthesisError: an unknown target or an invalid device JSON.
    """

    def __init__(
        self, device: str | DeviceArch | Mapping[str, Any] | os.PathLike[str] = "c"
    ) -> None:
        if isinstance(device, str) and device in TARGETS:
            self.arch = host_arch(device)
        elif isinstance(device, str) and not device.endswith(".json"):
            raise SynthesisError(
                f"unknown target {device!r}; use one of {', '.join(TARGETS)} or a device JSON path"
            )
        else:
            self.arch = load_arch(device)
        self.target = self.arch.api

    @classmethod
    def from_arch(
        cls, arch: str | os.PathLike[str] | Mapping[str, Any] | DeviceArch
    ) -> Synthesizer:
        """A synthesizer for the device described by a JSON file path or a decoded dict.

        Raises:
            SynthesisError: the JSON misses a section/field or holds a wrong value (named).
        """
        return cls(load_arch(arch))

    def with_target(self, target: str) -> Synthesizer:
        """The same device description, emitting for `target` (``"c"`` or ``"vulkan"``)."""
        if target not in TARGETS:
            raise SynthesisError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
        clone = Synthesizer(self.arch)
        clone.target = target
        return clone

    def synthesize(
        self,
        model: Any,
        graph: Graph | str | os.PathLike[str],
        *,
        name: str = "model",
        outputs: Iterable[str] | None = None,
        embed_weights: bool = False,
        strict: bool = False,
    ) -> Plan:
        """Check and generate; nothing is written (call `Plan.emit`).

        `outputs` names the variables the API can fetch (default: every declared variable
        and every assigned temporary the passes keep: a temporary folded away, such as the
        transposed weight of a `matmul` that became `linear`, is not fetchable unless named
        here), nor are the temporaries of expanded composite ops; buffers outside it are
        reused by lifetime. `Plan.passes` lists what the passes (`openinfer_jax.passes`)
        expanded, folded and fused.
        `embed_weights` compiles the model file into the program as a C array.
        `strict` (Vulkan target): every op node must run on the GPU; one that would run on
        the host raises SynthesisError naming it and why.

        Raises:
            SynthesisError: an op/dtype the target cannot express, an unbounded cache axis,
                a graph that does not validate against the model, a device memory limit the
                program exceeds, naming the node or variable and the limit; in strict mode
                an op node the Vulkan target would run on the host.
            DslSyntaxError: the graph file cannot be read, or its text does not parse.
        """
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise SynthesisError(f"program name {name!r} must be a C identifier")
        loader, _raw, opened = _load_model(model)
        try:
            g = load_graph(graph)
            try:
                from openinfer_jax.ir import validate

                validate(g, loader)
                # Composite ops become registry ops with kernels (openinfer_jax/passes).
                g, expanded = prepare(g, loader)
            except GraphValidationError as err:
                raise SynthesisError(
                    f"the graph does not validate against the model: {err}"
                ) from None
            outputs = None if outputs is None else tuple(outputs)
            source = g
            g, passes = optimize(g, loader.sizevars, outputs)
            an = analyze(g, loader, self.arch)
            an.source, an.origins = source, dict(passes.origins)
            # The expansions' temporaries are not the user's variables: not outputs by default.
            chosen = _outputs(an, outputs, expanded.temporaries)
            epilogues = None
            if self.target == "c":
                epilogues = self._epilogues(g, loader, an, outputs)
                if outputs is None:  # values that never reach memory are not fetchable
                    chosen = tuple(n for n in chosen if n not in epilogues.hidden)
                passes = dataclasses.replace(passes, fused=(*passes.fused, *epilogues.report))
            embed = _model_bytes(loader) if embed_weights else None
            vk = self._vk_options(g, loader, an, strict) if self.target == "vulkan" else None
            dense = self.arch.dense
            program = generate_c(
                an, name, chosen, embed, self.arch.describe(), self.target, vk, dense, epilogues
            )
            limit = self.arch.memory("global_bytes")
            if program.memory.arena_bytes > limit:
                raise SynthesisError(
                    f"the program needs an arena of {program.memory.arena_bytes} bytes; device "
                    f"{self.arch.name!r} has memory.global_bytes={limit}"
                )
            files = {
                **runtime_files(),
                **kernel_files(program.runtime_headers, dense.threads),
                **program.files,
            }
            if self.target == "vulkan":
                files.update(vulkan_files())
            return Plan(
                self.target,
                name,
                dict(sorted(files.items())),
                program.memory,
                program.kernels,
                program.outputs,
                program.vulkan,
                expanded.then(passes),
            )
        finally:
            if opened:
                loader.close()

    def _epilogues(
        self, graph: Graph, loader: Any, an: Analysis, outputs: tuple[str, ...] | None
    ) -> EpiloguePlan:
        """The elementwise chains the C kernels run fused; with the device JSON's
        ``preferences.prefer_fusion`` one that cannot be fused exactly is a SynthesisError."""
        ctx = PassContext.of(graph, loader.sizevars, outputs)
        return plan_epilogues(
            graph,
            ctx,
            anchor=lambda op: is_anchor(an.ops[id(op)]),
            fusable=lambda op: fusable(an.ops[id(op)]),
            strict=bool(self.arch.raw["preferences"].get("prefer_fusion", False)),
            strided=lambda op: strided_attention(an.ops[id(op)]),
        )

    def _vk_options(self, graph: Graph, loader: Any, an: Analysis, strict: bool) -> VkOptions:
        """What the Vulkan target reads from the device JSON, plus the shape variants of
        cache-slice consumers and the preloadable prefix tables."""
        prefs = self.arch.raw["preferences"]
        variants = (
            shape_variants(graph, loader, self.arch, max_variants(prefs))
            if runtime_shaped(an)
            else {}
        )
        return VkOptions(
            device_features(self.arch.raw["features"]),
            matmul_tiles(prefs),
            strict,
            variants,
            prefix_counts(an, loader),
            int(self.arch.limit("max_shared_memory_bytes")),
            self.arch.raw["device"]["type"] == "gpu",
        )


def _outputs(
    an: Analysis, outputs: Iterable[str] | None, internal: frozenset[str]
) -> tuple[str, ...]:
    """The fetchable variables: `outputs` checked against the graph, or all of them except
    the `internal` temporaries of the passes."""
    names = set(an.vars) | set(an.tables)
    chosen = tuple(sorted(names - internal)) if outputs is None else tuple(sorted(set(outputs)))
    for out in chosen:
        if out not in names:
            raise SynthesisError(
                f"output {out!r} is not a variable of the graph (known: {', '.join(sorted(names))})"
            )
    return chosen


def _model_bytes(loader: Any) -> bytes:
    path = getattr(loader, "path", None)
    if path is None:
        raise SynthesisError("--embed-weights needs a model opened from a file")
    return Path(path).read_bytes()
