"""Hypothesis strategies for random, syntactically valid IR graphs.

`graphs()` draws a `Graph` that the `graph{}` printer can express: names are identifiers
that do not collide with literal words (true/false/inf/nan) or dtype names, counts are
non-negative where the grammar has no sign, and `nan` is the `math.nan` object (the parser
returns that object, so equality by identity holds). The graphs are not semantically
valid (undeclared names, wrong dtypes): they exercise the printer, parser and JSON, not
validation.

Tests in tests/ir import it relatively (``from .strategies import graphs``); elsewhere use
``from tests.ir.strategies import graphs`` (tests/ is a package).
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    Return,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)

__all__ = [
    "blocks",
    "dims",
    "dtypes",
    "graphs",
    "names",
    "nodes",
    "param_values",
    "scalars",
    "var_decls",
]

TENSOR_DTYPES = [d for d in DType if d.is_tensor_type]
# Words that mean something else where a name may appear as a setting value.
RESERVED = {"true", "false", "inf", "nan"} | {d.short for d in TENSOR_DTYPES}

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True).filter(
    lambda s: s not in RESERVED
)
dotted_names = st.lists(names, min_size=1, max_size=3).map(".".join)
dtypes = st.sampled_from(TENSOR_DTYPES)
small_ints = st.integers(min_value=0, max_value=10**6)
signed_ints = st.integers(min_value=-(10**6), max_value=10**6)

# A product has two or more factors ("3*D", "B*D", "2*B*H"); one factor is an int or a name.
_factor = st.one_of(small_ints, names)
_product = st.lists(_factor, min_size=2, max_size=3).map(lambda fs: "*".join(str(f) for f in fs))
dim = st.one_of(small_ints, names, _product)
dims = st.lists(dim, max_size=4).map(tuple)

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True),
    st.just(math.nan),
)
scalars = st.one_of(st.booleans(), signed_ints, floats)
param_values = st.one_of(
    scalars,
    st.text(max_size=8),
    dtypes,
    st.lists(signed_ints, max_size=4).map(tuple),
    st.lists(dtypes, min_size=1, max_size=3).map(tuple),
    names.map(VarName),
)


@st.composite
def params(draw: st.DrawFn) -> tuple[tuple[str, object], ...]:
    """Named settings; `to`/`acc` only ever carry dtypes, as the grammar requires."""
    out = []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(names)
        if any(key == seen for seen, _ in out):
            continue  # the grammar takes each setting once
        if key in ("to", "acc"):
            value = draw(st.one_of(dtypes, st.lists(dtypes, min_size=1, max_size=2).map(tuple)))
        else:
            value = draw(param_values)
        out.append((key, value))
    return tuple(out)


index_value = st.one_of(small_ints, names)
var_refs = st.builds(VarRef, names, st.lists(index_value, max_size=3).map(tuple))
_bound = st.one_of(st.none(), signed_ints, names)
cache_items = st.one_of(
    st.builds(CacheIndex, st.one_of(signed_ints, names)),
    st.builds(CacheSlice, _bound, _bound),
)
cache_accesses = st.builds(
    CacheAccess, names, st.lists(cache_items, max_size=3).map(tuple), st.booleans()
)
_name_list = st.lists(names, min_size=1, max_size=3).map(tuple)


def _leaf_nodes() -> st.SearchStrategy[Node]:
    return st.one_of(
        st.builds(Assign, names, dtypes, dims),
        st.builds(Op, names, st.lists(var_refs, max_size=3).map(tuple), params(), var_refs),
        st.builds(Transfer, var_refs, var_refs),
        st.builds(CacheRead, cache_accesses, var_refs),
        st.builds(CacheWrite, var_refs, cache_accesses),
        st.builds(CacheIncrement, names, small_ints),
        st.builds(CacheDecrement, names, small_ints),
        st.builds(CacheReset, cache_accesses),
        st.builds(Branch, names),
        st.builds(lambda c, t, e: Branch(t, cond=c, else_block=e), names, names, names),
        st.builds(Yield, _name_list),
        st.builds(Await, _name_list),
        st.just(Barrier()),
        st.builds(Dep, dotted_names, dotted_names),
        st.builds(Return, st.one_of(st.none(), names)),
    )


def _loop(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    bound = st.one_of(small_ints, names)
    return st.builds(Loop, names, names, bound, bound, st.lists(children, max_size=4).map(tuple))


nodes: st.SearchStrategy[Node] = st.recursive(_leaf_nodes(), _loop, max_leaves=12)

var_decls = st.builds(
    VarDecl,
    name=names,
    kind=st.sampled_from(list(MemoryKind)),
    dtype=dtypes,
    dims=dims,
    init=st.one_of(st.none(), scalars),
    ref=st.one_of(st.none(), st.text(max_size=10)),
    pattern=st.one_of(st.none(), st.text(max_size=10)),
    table_indices=st.lists(names, max_size=3).map(tuple),
    table=st.booleans(),
    auto_dim=st.lists(names, max_size=2).map(tuple),
    fixed=st.lists(st.tuples(names, small_ints), max_size=2).map(tuple),
)
blocks = st.builds(Block, names, st.lists(nodes, max_size=6).map(tuple))


def graphs(max_vars: int = 6, max_blocks: int = 3) -> st.SearchStrategy[Graph]:
    """Random graphs with up to `max_vars` declarations and `max_blocks` blocks."""
    return st.builds(
        Graph,
        st.lists(var_decls, max_size=max_vars).map(tuple),
        st.lists(blocks, max_size=max_blocks).map(tuple),
    )
