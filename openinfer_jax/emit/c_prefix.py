"""Prefix tables (`W(l): f32[D, D] @pattern("W.{l}")`) in emitted C: entry lookup and writes.

An entry is the model tensor its pattern names, read in place from the loaded model. A node
that writes an entry (`op ... >> W[l]`, `cache.read ... >> W[l]`, `transfer ... >> W[l]`)
overrides it for the rest of the step (docs/semantics.md), like the simulator: the value goes
to an overlay in the arena, one slot per entry the step overrides, keyed by the indices the
pattern uses; later reads of that entry in the step see the slot, and every step starts with
an empty overlay so the model tensor is the entry's value again. The overlay has one slot per
model tensor matching the pattern (at least one); a step that overrides more distinct entries
fails with OI_ERR_INDEX naming the table.
"""

from __future__ import annotations

import math

from openinfer_jax.emit.analysis import Analysis, resolve_dims
from openinfer_jax.emit.c_types import ctype

__all__ = ["overlay_buffers", "overlay_resets", "prefix_functions"]


def _entry_bytes(an: Analysis, name: str) -> tuple[tuple[int, ...], int]:
    decl = an.prefixes[name]
    shape = resolve_dims(decl.dims, an.sizevars, f"variable {name!r}")
    return shape, math.prod(shape) * ctype(decl.dtype, f"prefix table {name!r}").size


def overlay_buffers(an: Analysis) -> list[tuple[str, int]]:
    """(arena buffer name, bytes) of the overlay of every prefix table a node writes."""
    out = []
    for name in sorted(an.prefix_writes):
        _shape, nbytes = _entry_bytes(an, name)
        out.append((f"overlay:{name}", an.prefix_writes[name] * nbytes))
    return out


def overlay_resets(an: Analysis) -> list[str]:
    """Statements at the start of `oi_step`: no entry is overridden yet."""
    return [f"    OW_{name}_n = 0;" for name in sorted(an.prefix_writes)]


def _dims_init(shape: tuple[int, ...]) -> str:
    return "{" + (", ".join(f"INT64_C({d})" for d in shape) or "0") + "}"


def prefix_functions(
    an: Analysis, offsets: dict[str, int], formats: dict[str, tuple[str, list[int]]]
) -> list[str]:
    """C functions of every prefix table: ``oi_prefix_<P>(t, slot, i...)`` points `t` at an
    entry (copied into `slot` when not NULL: the Vulkan target's arena slots), and for a
    written table ``oi_prefix_<P>_write(t, i...)`` points `t` at the entry's overlay slot.

    `offsets` maps overlay buffer names (`overlay_buffers`) to their arena offsets;
    `formats` each table's printf format of its model names and the order of the indices in it.
    """
    out: list[str] = []
    for pname in sorted(an.prefixes):
        fmt, order = formats[pname]
        if pname in an.prefix_writes:
            out += _overlay_functions(an, pname, order, offsets[f"overlay:{pname}"])
        out += _lookup_function(an, pname, fmt, order)
    return out


def _key(order: list[int]) -> tuple[str, int]:
    """The overlay key of an entry: the indices the pattern uses (the simulator keys it by
    name), as a C initializer, and its length."""
    return ", ".join(f"i{k}" for k in order) or "0", max(len(order), 1)


def _params(an: Analysis, pname: str) -> str:
    return ", ".join(f"int64_t i{k}" for k in range(len(an.prefixes[pname].table_indices)))


def _overlay_functions(an: Analysis, pname: str, order: list[int], offset: int) -> list[str]:
    """``oi_overlay_<P>`` (find or add an entry's slot) and ``oi_prefix_<P>_write``."""
    shape, nbytes = _entry_bytes(an, pname)
    key, n_key = _key(order)
    slots = an.prefix_writes[pname]
    base = f"(A + {offset})"
    return [
        f"/* {pname}: entries overridden in this step, {slots} slot(s) of {nbytes} bytes */",
        f"static int64_t OW_{pname}_key[{slots}][{n_key}];",
        f"static int OW_{pname}_n;",
        "",
        f"static unsigned char *oi_overlay_{pname}(const int64_t *key, int add) {{",
        "    int s, k;",
        f"    for (s = 0; s < OW_{pname}_n; s++) {{",
        f"        for (k = 0; k < {n_key} && OW_{pname}_key[s][k] == key[k]; k++) {{}}",
        f"        if (k == {n_key}) return {base} + (size_t)s * {nbytes};",
        "    }",
        f"    if (!add || OW_{pname}_n == {slots}) return NULL;",
        f"    for (k = 0; k < {n_key}; k++) OW_{pname}_key[OW_{pname}_n][k] = key[k];",
        f"    return {base} + (size_t)(OW_{pname}_n++) * {nbytes};",
        "}",
        "",
        f"static int oi_prefix_{pname}_write(oi_tensor *t, {_params(an, pname)}) {{",
        f"    const int64_t key[{n_key}] = {{{key}}};",
        f"    static const int64_t dims[{max(len(shape), 1)}] = {_dims_init(shape)};",
        f"    unsigned char *p = oi_overlay_{pname}(key, 1);",
        "    int d;",
        "    if (!p) {",
        f'        oi_set_error("prefix table {pname}: a step overrides more than {slots} entries '
        f'(the C target keeps one slot per model tensor of the pattern)");',
        "        return OI_ERR_INDEX;",
        "    }",
        "    t->data = p;",
        f"    t->ndim = {len(shape)};",
        f"    for (d = 0; d < {len(shape)}; d++) t->dims[d] = dims[d];",
        f"    t->cap = {math.prod(shape)};",
        "    return OI_OK;",
        "}",
        "",
    ]


def _lookup_function(an: Analysis, pname: str, fmt: str, order: list[int]) -> list[str]:
    """``oi_prefix_<P>``: the entry's overlay slot when this step wrote it, else the model
    tensor the pattern names (copied into `slot` when not NULL)."""
    decl = an.prefixes[pname]
    if pname in an.prefix_layouts:
        return _block_lookup_function(an, pname, fmt, order)
    shape, nbytes = _entry_bytes(an, pname)
    args = ", ".join(f"(long long)i{k}" for k in order)
    out = [
        f"static int oi_prefix_{pname}(oi_tensor *t, unsigned char *slot, {_params(an, pname)}) {{",
        f"    static const int64_t dims[{max(len(shape), 1)}] = {_dims_init(shape)};",
        "    char nm[256];",
        "    const void *p;",
        "    int d, rc;",
    ]
    if pname in an.prefix_writes:
        key, n_key = _key(order)
        out.append(f"    const int64_t key[{n_key}] = {{{key}}};")
        out.append(f"    p = oi_overlay_{pname}(key, 0);")
        out.append("    if (!p) {")
    else:
        out.append("    {")
    return [
        *out,
        f'        snprintf(nm, sizeof nm, "{fmt}"{", " + args if args else ""});',
        f"        rc = oi_model_get(&oi_m, nm, {decl.dtype.code}u, {len(shape)}, dims, &p);",
        "        if (rc) return rc;",
        '        if (!p) { oi_set_error("model tensor %s has no data", nm); return OI_ERR_MODEL; }',
        "    }",
        f"    if (slot) memcpy(slot, p, {nbytes});",
        "    t->data = slot ? (void *)slot : (void *)p;",
        f"    t->ndim = {len(shape)};",
        f"    for (d = 0; d < {len(shape)}; d++) t->dims[d] = dims[d];",
        f"    t->cap = {math.prod(shape)};",
        "    (void)rc;",
        "    return OI_OK;",
        "}",
        "",
    ]


def _block_lookup_function(an: Analysis, pname: str, fmt: str, order: list[int]) -> list[str]:
    """``oi_prefix_<P>`` of a block-quantized table: the entry's `oi_block_tensor` in the model
    (validation rejects writes into such entries, so there is no overlay and no slot)."""
    decl = an.prefixes[pname]
    layout = an.prefix_layouts[pname]
    shape = resolve_dims(decl.dims, an.sizevars, f"variable {decl.name!r}")
    args = ", ".join(f"(long long)i{k}" for k in order)
    return [
        f"static int oi_prefix_{pname}(oi_tensor *t, unsigned char *slot, {_params(an, pname)}) {{",
        f"    static const int64_t dims[{max(len(shape), 1)}] = {_dims_init(shape)};",
        "    char nm[256];",
        "    const oi_block_tensor *p;",
        "    int d, rc;",
        f'    snprintf(nm, sizeof nm, "{fmt}"{", " + args if args else ""});',
        f"    rc = oi_model_get_block(&oi_m, nm, {layout.data_dtype.code}u, {layout.block_size}u, "
        f"{layout.scale_dtype.code}u, {len(shape)}, dims, &p);",
        "    if (rc) return rc;",
        "    (void)slot;",
        "    t->data = (void *)p;",
        f"    t->ndim = {len(shape)};",
        f"    for (d = 0; d < {len(shape)}; d++) t->dims[d] = dims[d];",
        f"    t->cap = {math.prod(shape)};",
        "    return OI_OK;",
        "}",
        "",
    ]
