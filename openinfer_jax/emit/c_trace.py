"""The trace you can diff: per-node records of the emitted program, built with ``-DOI_TRACE``.

After every node that writes a variable (op, transfer, cache.read) the step calls
``OI_TRACE_NODE(site, &tensor, scope)``. Without ``OI_TRACE`` the macro expands to nothing
(zero cost: no code, no data). With it, ``oi_trace_node`` (oi_runtime.c) writes one JSON line
in the simulator's trace schema (`openinfer_jax.sim.events.TraceEvent`: step, block, node
index, kind, printed node, location, loop indices, output, shapes) plus the value's summary
(`openinfer_jax.sim.summaries`), so ``openinfer trace-diff sim.json c.json`` can name the
first node whose output differs. The fixed fields of each call site are a table of
`oi_trace_site` built at synthesis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit.analysis import Analysis
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.ir.nodes import Node
from openinfer_jax.ir.numbering import number_nodes

__all__ = ["TraceSites"]


def _c_text(text: str) -> str:
    """`text` as the inside of a C string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class _Site:
    head: str  # JSON members, C-escaped
    keys: tuple[str, ...]  # loop index names
    dtype: DType


class TraceSites:
    """The trace call sites of one program, numbered as lowering meets them."""

    def __init__(self, an: Analysis, device: str) -> None:
        self.device = device
        # The simulator's node numbering (ir.numbering): pre-order over the blocks, loop bodies, of
        # the graph as given. The passes keep the nodes they do not rewrite (same objects); a
        # node they made (a folded or fused one) is traced under the number of the node whose
        # output it writes (`Analysis.origins`).
        graph = an.source or an.graph
        self.index = number_nodes(graph)
        self.origins = an.origins
        self.sites: list[_Site] = []

    def original(self, node: Node) -> Node | None:
        """The node of the graph as given that `node` stands for (None: none)."""
        seen = 0
        while id(node) not in self.index:
            origin = self.origins.get(id(node))
            if origin is None or seen > len(self.origins):
                return None
            node, seen = origin, seen + 1
        return node

    def call(
        self,
        node: Node,
        block: str,
        output: str,
        tensor: str,
        dtype: DType,
        loops: tuple[tuple[str, str], ...],
    ) -> str:
        """The ``OI_TRACE_NODE(...)`` statement after `node` wrote `tensor` (a C pointer
        expression); `loops` are the (index name, C variable) of the enclosing loops the
        simulator reports in the event's scope. "" for a node with no number."""
        original = self.original(node)
        if original is None:
            return ""
        node = original
        info = self.index[id(node)]
        members = {
            "block_name": block,
            "node_index": info.index,
            "kind": info.kind,
            "node_desc": info.desc,
            "node_loc": info.loc,
            "output": [output],
            "output_dtypes": [dtype.short],
            "device": self.device,
        }
        head = json.dumps(members)[1:-1]
        keys = tuple(name for name, _var in loops)
        self.sites.append(_Site(_c_text(head), keys, dtype))
        scope = f"((const int64_t[]){{{', '.join(var for _n, var in loops)}}})" if loops else "NULL"
        return f"OI_TRACE_NODE({len(self.sites) - 1}, {tensor}, {scope});"

    def table(self, vulkan: bool) -> list[str]:
        """The site table and the macros: records with ``-DOI_TRACE``, nothing without."""
        if not self.sites:
            return [
                "#define OI_TRACE_NODE(site, value, scope) ((void)0)",
                "#define OI_TRACE_STEP_END() ((void)0)",
                "#define OI_TRACE_CLOSE() ((void)0)",
                "",
            ]
        out = ["#ifdef OI_TRACE", "static int64_t oi_trace_step;"]
        key_arrays: dict[tuple[str, ...], str] = {}
        for site in self.sites:
            if site.keys and site.keys not in key_arrays:
                name = f"oi_trace_keys{len(key_arrays)}"
                key_arrays[site.keys] = name
                quoted = ", ".join(f'"{_c_text(json.dumps(k))}"' for k in site.keys)
                out.append(f"static const char *const {name}[{len(site.keys)}] = {{{quoted}}};")
        out.append(f"static const oi_trace_site oi_trace_sites[{len(self.sites)}] = {{")
        for site in self.sites:
            ct = ctype(site.dtype)
            keys = key_arrays.get(site.keys, "NULL")
            dtype = _c_text(json.dumps(site.dtype.short))
            out.append(
                f'    {{"{site.head}", {len(site.keys)}, {keys}, {site.dtype.code}u, {ct.size}u, '
                f'{int(site.dtype.is_float)}, "{dtype}"}},'
            )
        out.append("};")
        # Vulkan: dispatches still recorded must finish before the host reads the value.
        sync = "oi_vk_sync(), " if vulkan else ""
        out += [
            "#define OI_TRACE_NODE(site, value, scope) "
            f"({sync}oi_trace_node(&oi_trace_sites[site], oi_trace_step, (scope), (value)))",
            "#define OI_TRACE_STEP_END() (oi_trace_step++)",
            "#define OI_TRACE_CLOSE() (oi_trace_close(), oi_trace_step = 0)",
            "#else",
            "#define OI_TRACE_NODE(site, value, scope) ((void)0)",
            "#define OI_TRACE_STEP_END() ((void)0)",
            "#define OI_TRACE_CLOSE() ((void)0)",
            "#endif",
            "",
        ]
        return out
