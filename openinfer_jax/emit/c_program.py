"""The C target: a graph's analysis becomes `<name>.h`, `<name>.c` and a test driver.

Generation runs in stages, each over the previous one's typed output:

1. **lowering** (`c_lower.lower`): the nodes become typed statements of `oi_step`, each
   with the buffer accesses it makes; the kernels they call are rendered once each;
2. **lifetimes** (`lifetimes.lifetimes`): live intervals of every buffer, and the assigns
   whose zeros are overwritten before any read;
3. **memory** (`memory.plan_memory`): one arena, buffers placed by lifetime;
4. **rendering**: `<name>.c` (`c_source`), `<name>.h` (here), the driver (`c_driver`).

On the Vulkan target, lowering places op nodes on the GPU (`vk_program.VkState`) and the
renderers add its dispatch tables; the control flow and API are the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.analysis import Analysis
from openinfer_jax.emit.c_driver import driver_file, weights_file
from openinfer_jax.emit.c_lower import Lowered, lower
from openinfer_jax.emit.c_options import DenseOptions
from openinfer_jax.emit.c_prefix import overlay_buffers
from openinfer_jax.emit.c_source import (
    SourceInput,
    fetchable,
    in_place,
    source_file,
    typed_setters,
    undo_vars,
)
from openinfer_jax.emit.c_stmt import RenderContext
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.emit.lifetimes import Lifetimes, lifetimes
from openinfer_jax.emit.memory import Buffer, MemoryPlan, plan_memory
from openinfer_jax.emit.vk_program import ALIGN as VK_ALIGN
from openinfer_jax.emit.vk_program import VkOptions, VkReport
from openinfer_jax.passes.epilogue import EpiloguePlan

__all__ = ["CProgram", "generate_c"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class CProgram:
    """The generated sources (file name -> text) and the memory plan behind them."""

    files: dict[str, str]
    memory: MemoryPlan
    kernels: int
    outputs: tuple[str, ...]
    vulkan: VkReport | None = None
    runtime_headers: tuple[str, ...] = ()  # kernel headers <name>.c includes


def _c_ident_check(names: list[str]) -> None:
    for name in names:
        if not _IDENT.match(name):
            raise SynthesisError(f"variable {name!r} is not a valid C identifier; rename it")


def generate_c(
    an: Analysis,
    name: str,
    outputs: tuple[str, ...],
    embed: bytes | None,
    device: str,
    target: str = "c",
    vk: VkOptions | None = None,
    dense: DenseOptions | None = None,
    epilogues: EpiloguePlan | None = None,
) -> CProgram:
    """Generate the C program for `an` (see the module docstring); `target` ``"vulkan"`` runs
    the op nodes that have GPU kernels as Vulkan dispatches (`openinfer_jax.emit.vk_program`,
    options `vk`) and the rest on the host. `dense` sets the threads and blocking of the f32
    GEMM/GEMV kernels (`openinfer_jax.emit.c_dense`), `epilogues` the elementwise chains fused
    into them (`openinfer_jax.passes.epilogue`).

    Raises:
        SynthesisError: a node the C target cannot express, naming the node and the limit
            (with ``vk.strict``: any op node that would run on the host).
    """
    _c_ident_check(sorted(an.vars) + sorted(an.tables) + sorted(an.prefixes))
    low = lower(an, target, vk, dense, epilogues)
    life = lifetimes(low.body)
    if low.vk is not None:  # a live assign zeroes arena memory on the host: a sync first
        low.vk.syncs += len(life.assigns) - len(life.dead_assigns)
    mem = plan_memory(_buffers(an, low, life, outputs), VK_ALIGN if low.vk is not None else None)
    vk_globals, vk_files = low.vk.globals(mem) if low.vk is not None else ([], {})
    src = SourceInput(
        an,
        low,
        RenderContext(life.dead_assigns, vulkan=low.vk is not None),
        mem,
        name,
        outputs,
        embed is not None,
        device,
        tuple(vk_globals),
    )
    files = {
        f"{name}.h": _header(an, name, outputs, embed is not None),
        f"{name}.c": source_file(src),
        f"{name}_driver.c": driver_file(an, name, outputs, low.vk is not None),
        **vk_files,
    }
    if embed is not None:
        files[f"{name}_weights.c"] = weights_file(name, embed)
    report = low.vk.report() if low.vk is not None else None
    headers = tuple(sorted(low.kernels.headers))
    return CProgram(files, mem, len(low.kernels), outputs, report, headers)


def _buffers(an: Analysis, low: Lowered, life: Lifetimes, outputs: tuple[str, ...]) -> list[Buffer]:
    """Every arena buffer with its size and live interval (None: pinned, never shared)."""
    target = "vulkan" if low.vk is not None else "c"
    bufs: list[Buffer] = []
    for vname in sorted(an.vars):
        info = an.vars[vname]
        if in_place(info, an, target):
            continue
        nbytes = info.bound * ctype(info.dtype).size
        pinned = (
            info.kind in ("persistent", "dynamic", "constant")
            or vname in outputs
            or not life.accessed(vname)
        )
        interval = life.live_interval(vname) or (0, 0)
        # Volatile variables are written at the start of every step (their reset).
        first = 0 if info.kind == "volatile" else interval[0]
        bufs.append(
            Buffer(vname, nbytes, None if pinned else first, None if pinned else interval[1])
        )
    for tname in sorted(an.tables):
        t = an.tables[tname]
        bufs.append(Buffer(f"table:{tname}", t.numel * ctype(t.dtype).size))
    for cname in sorted(low.shadows):
        _blk, var = low.shadows[cname]
        info = an.vars[var]
        bufs.append(Buffer(f"shadow:{cname}", info.bound * ctype(info.dtype).size))
    for slot, nbytes in low.prefix_slots:
        bufs.append(Buffer(f"prefix:{slot}", nbytes))
    bufs += [Buffer(bname, nbytes) for bname, nbytes in overlay_buffers(an)]
    if low.vk is not None:
        bufs += [Buffer(bname, nbytes) for bname, nbytes in low.vk.buffers()]
    scratch = max((n * ctype(d).size for d, n in low.scratch_elems.items()), default=0)
    if scratch:
        bufs.append(Buffer("scratch", scratch))
    if low.kernels.pack_bytes:
        bufs.append(Buffer("pack", low.kernels.pack_bytes))
    if an.tables and low.journal_bytes:
        bufs.append(Buffer("journal", low.journal_bytes))
    for vname in undo_vars(an):
        info = an.vars[vname]
        bufs.append(Buffer(f"undo:{vname}", info.bound * ctype(info.dtype).size))
    return bufs


def _header(an: Analysis, name: str, outputs: tuple[str, ...], embedded: bool) -> str:
    """The text of `<name>.h`: the program's API."""
    guard = re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_H"
    lines = [
        f"/* {name}.h: API of the program synthesized by OpenInfer-JAX. Generated; do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "oi_runtime.h"',
        "",
        "/* Load and check the model (docs/oinf.md rules), bind weights, initialize persistent state."
        if not embedded
        else "/* Load the model (NULL: the weights embedded at synthesis) and initialize persistent state.",
        " * Returns OI_OK or an OI_ERR_* code; oi_last_error() says why. */",
        "int oi_init(const char *oinf_path);",
        "/* Run one step; dynamic inputs must be inserted before every step. */",
        "int oi_step(void);",
        "/* Release the model; oi_init may be called again. */",
        "void oi_free(void);",
        "/* A short text for an error code (oi_last_error() has the details). */",
        "const char *oi_error_string(int code);",
        "/* Between steps: every persistent variable back to its initial value, every cache table",
        " * emptied (as after oi_init, without reloading the model). */",
        "int oi_reset(void);",
        "/* Between steps: set persistent variable `name` to `bytes` of `data` (its whole declared",
        " * value, elements as in oi_insert_*), or a cache table with one index to bytes / entry",
        " * bytes entries. OI_ERR_ARGUMENT: unknown name; OI_ERR_SHAPE: a size that does not fit;",
        " * OI_ERR_CACHE_FULL: more entries than the table's capacity. */",
        "int oi_set_persistent(const char *name, const void *data, size_t bytes);",
        "",
    ]
    for vname in sorted(n for n, v in an.vars.items() if v.kind == "dynamic"):
        info = an.vars[vname]
        ct = ctype(info.dtype)
        lines.append(f"/* {vname}: {info.dtype.short}{list(info.shape)} */")
        lines.append(
            f"int oi_insert_{vname}(const {ct.storage} *data, int ndim, const int64_t *dims);"
        )
    setters = typed_setters(an)
    if setters:
        lines.append("")
        lines.append(
            "/* Set a persistent variable (its declared dims) or a cache table ([counts per index...,"
        )
        lines.append(" * entry dims]: a prefill) between steps, checked like an insert. */")
    for pname in setters:
        dtype = an.tables[pname].dtype if pname in an.tables else an.vars[pname].dtype
        lines.append(
            f"int oi_set_persistent_{pname}(const {ctype(dtype).storage} *data, int ndim, const int64_t *dims);"
        )
    lines.append("")
    lines.append(
        "/* Fetch after a step: `capacity` elements at `out`; `dims` receives up to OI_MAX_DIMS sizes. */"
    )
    for vname in fetchable(an, outputs):
        if vname in an.tables:
            t = an.tables[vname]
            ct, bound = ctype(t.dtype), t.numel
        else:
            info = an.vars[vname]
            ct, bound = ctype(info.dtype), info.bound
        lines.append(f"#define OI_BOUND_{vname} {bound}")
        lines.append(
            f"int oi_fetch_{vname}({ct.storage} *out, int64_t capacity, int *ndim, int64_t *dims);"
        )
    lines += ["", "#endif", ""]
    return "\n".join(lines)
