"""The graph JSON schema (docs/graph-json.md): `to_json` / `from_json`.

One table (`_NODE_FIELDS`, `_DECL_FIELDS`) lists each class's fields with a codec; both
directions read it, so a field added to the IR is added here once. Values keep their
Python type exactly: params and `@init` values are tagged (``{"float": 1.0}`` vs
``{"int": 1}``), non-finite floats are the strings ``"inf"``, ``"-inf"``, ``"nan"`` (plain
JSON has no such numbers). Source locations are optional (``"loc": [line, column]`` and
``"file"``) and never part of IR equality.

`from_json` checks every field and raises `DslSyntaxError` naming the JSON path
(``blocks[1].nodes[3].op``), what it found and what it expected.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dims import dim_factors
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import DslSyntaxError, GraphValidationError
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
    SourceLoc,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)

__all__ = [
    "GRAPH_JSON_FORMAT",
    "GRAPH_JSON_VERSION",
    "from_json",
    "from_json_text",
    "to_json",
    "to_json_text",
]

GRAPH_JSON_FORMAT = "openinfer-graph"
GRAPH_JSON_VERSION = 1

_DTYPES: dict[str, DType] = {d.short: d for d in DType if d.is_tensor_type}
_KINDS: dict[str, MemoryKind] = {k.value: k for k in MemoryKind}
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Fail(Exception):
    """Internal: a decode failure at a JSON path, turned into DslSyntaxError at the top."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _show(value: Any) -> str:
    """A short rendering of a JSON value for error messages."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind_of(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "an object", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def _fail(path: str, expected: str, value: Any) -> _Fail:
    return _Fail(path, f"expected {expected}, got {_kind_of(value)} {_show(value)}")


# ---- codecs: (encode(python) -> json, decode(json, path) -> python) --------------------------
def _encodable(value: str) -> bool:
    # A lone surrogate ("\ud800") survives json.loads but no encoder can write it back.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# What the graph{} text can spell (docs/dsl.md, Lexical structure; setting names may be
# dotted like node keywords, the op registry then judges them): JSON must not hold a
# graph that prints to text that does not parse back.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _dec_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise _fail(path, "a name ([A-Za-z_][A-Za-z0-9_]*)", value)
    return value


def _dec_dotted(value: Any, path: str) -> str:
    if not isinstance(value, str) or not _DOTTED_IDENT.fullmatch(value):
        raise _fail(path, "a dotted name like matmul or cache.write", value)
    return value


def _dec_opt_name(value: Any, path: str) -> str | None:
    return None if value is None else _dec_name(value, path)


def _dec_int(value: Any, path: str) -> int:
    if type(value) is not int:
        raise _fail(path, "an integer", value)
    return value


def _dec_bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _fail(path, "true or false", value)
    return value


def _dec_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, "a list", value)
    return value


def _dec_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    return value


def _dec_names(value: Any, path: str) -> tuple[str, ...]:
    return tuple(_dec_name(v, f"{path}[{i}]") for i, v in enumerate(_dec_list(value, path)))


def _dec_some_names(value: Any, path: str) -> tuple[str, ...]:
    # `yield;` / `await;` with no variable is no statement of the text form either
    names = _dec_names(value, path)
    if not names:
        raise _fail(path, "at least one variable name", value)
    return names


def _dec_int_or_name(value: Any, path: str) -> int | str:
    if type(value) is int:
        return value
    if isinstance(value, str) and _IDENT.fullmatch(value):
        return value
    raise _fail(path, "an integer or a name", value)


def _dec_dtype(value: Any, path: str) -> DType:
    if isinstance(value, str) and value in _DTYPES:
        return _DTYPES[value]
    raise _fail(path, f"a dtype name ({', '.join(_DTYPES)})", value)


def _dec_kind(value: Any, path: str) -> MemoryKind:
    if isinstance(value, str) and value in _KINDS:
        return _KINDS[value]
    raise _fail(path, "one of dynamic, volatile, constant, persistent", value)


def _enc_dims(dims: tuple[int | str, ...]) -> list[int | str]:
    return list(dims)


def _is_dim_text(dim: str) -> bool:
    try:
        dim_factors(dim)
    except GraphValidationError:
        return False
    return True


def _dec_dims(value: Any, path: str) -> tuple[int | str, ...]:
    out: list[int | str] = []
    for i, dim in enumerate(_dec_list(value, path)):
        if (type(dim) is int and dim >= 0) or (isinstance(dim, str) and _is_dim_text(dim)):
            out.append(dim)
        else:
            raise _fail(
                f"{path}[{i}]", "a non-negative integer, a sizevar name or a product like 3*D", dim
            )
    return tuple(out)


def _enc_float(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _dec_float(value: Any, path: str) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _fail(path, 'a number or "inf", "-inf", "nan"', value)


def _dec_str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not _encodable(value):
        raise _fail(path, "a string of characters", value)
    return value


# Tagged values: tag -> (python type test, encode, decode). Order matters for encoding:
# bool before int (bool is an int subclass), VarName/DType before str.
_TAGS: list[tuple[str, Callable[[Any], bool], Callable[[Any], Any], Callable[[Any, str], Any]]] = [
    ("bool", lambda v: isinstance(v, bool), lambda v: v, _dec_bool),
    ("int", lambda v: isinstance(v, int), lambda v: v, _dec_int),
    ("float", lambda v: isinstance(v, float), _enc_float, _dec_float),
    ("dtype", lambda v: isinstance(v, DType), lambda v: v.short, _dec_dtype),
    ("var", lambda v: isinstance(v, VarName), lambda v: v.name, lambda v, p: VarName(_dec_name(v, p))),
    ("str", lambda v: isinstance(v, str), lambda v: v, _dec_str),
    ("dtypes", lambda v: isinstance(v, tuple) and bool(v) and isinstance(v[0], DType),
     lambda v: [d.short for d in v],
     lambda v, p: tuple(_dec_dtype(d, f"{p}[{i}]") for i, d in enumerate(_dec_list(v, p)))),
    ("ints", lambda v: isinstance(v, tuple), lambda v: list(v),
     lambda v, p: tuple(_dec_int(d, f"{p}[{i}]") for i, d in enumerate(_dec_list(v, p)))),
]  # fmt: skip
_TAG_DECODERS = {tag: dec for tag, _, _, dec in _TAGS}
_SCALAR_TAGS = ("bool", "int", "float")


def _enc_tagged(value: Any) -> dict[str, Any]:
    for tag, test, enc, _ in _TAGS:
        if test(value):
            return {tag: enc(value)}
    raise TypeError(f"cannot serialize param value {value!r} of type {type(value).__name__}")


def _dec_tagged(value: Any, path: str, allowed: tuple[str, ...] | None = None) -> Any:
    tags = allowed or tuple(_TAG_DECODERS)
    expected = "an object with one key: " + ", ".join(f'"{t}"' for t in tags)
    if not isinstance(value, dict) or len(value) != 1:
        raise _fail(path, expected, value)
    ((tag, inner),) = value.items()
    if tag not in tags:
        raise _Fail(path, f"unknown value tag {_show(tag)}; expected {expected}")
    return _TAG_DECODERS[tag](inner, f"{path}.{tag}")


def _enc_init(value: Any) -> Any:
    return None if value is None else _enc_tagged(value)


def _dec_init(value: Any, path: str) -> Any:
    return None if value is None else _dec_tagged(value, path, _SCALAR_TAGS)


def _enc_params(params: tuple[tuple[str, Any], ...]) -> list[dict[str, Any]]:
    return [{"name": key, "value": _enc_tagged(value)} for key, value in params]


def _dec_params(value: Any, path: str) -> tuple[tuple[str, Any], ...]:
    out = []
    for i, item in enumerate(_dec_list(value, path)):
        item_path = f"{path}[{i}]"
        obj = _check_keys(item, item_path, ("name", "value"), ())
        out.append(
            (
                _dec_dotted(obj["name"], f"{item_path}.name"),
                _dec_tagged(obj["value"], f"{item_path}.value"),
            )
        )
    return tuple(out)


def _enc_varref(ref: VarRef) -> dict[str, Any]:
    return {"name": ref.name, "indices": list(ref.indices)} if ref.indices else {"name": ref.name}


def _dec_varref(value: Any, path: str) -> VarRef:
    obj = _check_keys(value, path, ("name",), ("indices",))
    indices = tuple(
        _dec_int_or_name(v, f"{path}.indices[{i}]")
        for i, v in enumerate(_dec_list(obj.get("indices", []), f"{path}.indices"))
    )
    return VarRef(_dec_name(obj["name"], f"{path}.name"), indices)


def _enc_varrefs(refs: tuple[VarRef, ...]) -> list[dict[str, Any]]:
    return [_enc_varref(r) for r in refs]


def _dec_varrefs(value: Any, path: str) -> tuple[VarRef, ...]:
    return tuple(_dec_varref(v, f"{path}[{i}]") for i, v in enumerate(_dec_list(value, path)))


def _enc_cache(acc: CacheAccess) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for item in acc.indices:
        if isinstance(item, CacheSlice):
            items.append({"slice": [item.start, item.end]})
        else:
            items.append({"index": item.value})
    return {"name": acc.name, "indices": items, "bracketed": acc.bracketed}


def _dec_bound(value: Any, path: str) -> int | str | None:
    return None if value is None else _dec_int_or_name(value, path)


def _dec_cache(value: Any, path: str) -> CacheAccess:
    obj = _check_keys(value, path, ("name",), ("indices", "bracketed"))
    items: list[CacheIndex | CacheSlice] = []
    for i, item in enumerate(_dec_list(obj.get("indices", []), f"{path}.indices")):
        item_path = f"{path}.indices[{i}]"
        if isinstance(item, dict) and set(item) == {"slice"}:
            bounds = _dec_list(item["slice"], f"{item_path}.slice")
            if len(bounds) != 2:
                raise _fail(
                    f"{item_path}.slice",
                    "a list [start, end] (each an integer, a name or null)",
                    bounds,
                )
            items.append(CacheSlice(_dec_bound(bounds[0], f"{item_path}.slice[0]"),
                                    _dec_bound(bounds[1], f"{item_path}.slice[1]")))  # fmt: skip
        elif isinstance(item, dict) and set(item) == {"index"}:
            items.append(CacheIndex(_dec_int_or_name(item["index"], f"{item_path}.index")))
        else:
            raise _fail(item_path, 'an object {"index": i} or {"slice": [start, end]}', item)
    bracketed = _dec_bool(obj.get("bracketed", bool(items)), f"{path}.bracketed")
    return CacheAccess(_dec_name(obj["name"], f"{path}.name"), tuple(items), bracketed)


def _enc_fixed(fixed: tuple[tuple[str, int], ...]) -> list[list[Any]]:
    return [[k, v] for k, v in fixed]


def _dec_fixed(value: Any, path: str) -> tuple[tuple[str, int], ...]:
    out = []
    for i, pair in enumerate(_dec_list(value, path)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _fail(f"{path}[{i}]", 'a pair ["index", capacity]', pair)
        out.append((_dec_name(pair[0], f"{path}[{i}][0]"), _dec_int(pair[1], f"{path}[{i}][1]")))
    return tuple(out)


def _ident(value: Any) -> Any:
    return value


def _enc_tuple(value: tuple[Any, ...]) -> list[Any]:
    return list(value)


def _enc_body(nodes: tuple[Node, ...]) -> list[dict[str, Any]]:
    return [_enc_node(n, True) for n in nodes]


def _dec_body(value: Any, path: str) -> tuple[Node, ...]:
    return tuple(_dec_node(n, f"{path}[{i}]") for i, n in enumerate(_dec_list(value, path)))


# A field: (attribute/JSON key, encode, decode).
_Field = tuple[str, Callable[[Any], Any], Callable[[Any, str], Any]]
_NAME: tuple[Callable[[Any], Any], Callable[[Any, str], Any]] = (_ident, _dec_name)
_OPT_NAME = (_ident, _dec_opt_name)
_DOTTED = (_ident, _dec_dotted)
_OPT_STR = (_ident, lambda v, p: None if v is None else _dec_str(v, p))
_NAMES = (_enc_tuple, _dec_names)
_SOME_NAMES = (_enc_tuple, _dec_some_names)
_DTYPE = (lambda d: d.short, _dec_dtype)


def _dec_quant(value: Any, path: str) -> BlockScheme | None:
    if value is None:
        return None
    try:
        return BlockScheme(value)
    except ValueError:
        known = ", ".join(_show(s.value) for s in BlockScheme)
        raise _Fail(
            path, f"found {_show(value)}; expected a block scheme ({known}) or null"
        ) from None


_DIMS = (_enc_dims, _dec_dims)
_INT = (_ident, _dec_int)
_BOUND = (_ident, _dec_int_or_name)
_VARREF = (_enc_varref, _dec_varref)
_CACHE = (_enc_cache, _dec_cache)


def _fields(
    *specs: tuple[str, tuple[Callable[[Any], Any], Callable[[Any, str], Any]]],
) -> list[_Field]:
    return [(name, enc, dec) for name, (enc, dec) in specs]


# Node kind (as in the DSL) -> class and fields. The JSON key of a field is its IR name.
_NODE_FIELDS: dict[str, tuple[type[Node], list[_Field]]] = {
    "assign": (Assign, _fields(("name", _NAME), ("dtype", _DTYPE), ("dims", _DIMS))),
    "op": (Op, _fields(("op", _DOTTED), ("inputs", (_enc_varrefs, _dec_varrefs)),
                       ("params", (_enc_params, _dec_params)), ("output", _VARREF))),
    "transfer": (Transfer, _fields(("src", _VARREF), ("dst", _VARREF))),
    "cache.read": (CacheRead, _fields(("src", _CACHE), ("dst", _VARREF))),
    "cache.write": (CacheWrite, _fields(("src", _VARREF), ("dst", _CACHE))),
    "cache.increment": (CacheIncrement, _fields(("name", _NAME), ("amount", _INT))),
    "cache.decrement": (CacheDecrement, _fields(("name", _NAME), ("amount", _INT))),
    "cache.reset": (CacheReset, _fields(("target", _CACHE))),
    "branch": (Branch, _fields(("then_block", _NAME), ("cond", _OPT_NAME), ("else_block", _OPT_NAME))),
    "loop": (Loop, _fields(("name", _NAME), ("index", _NAME), ("start", _BOUND), ("end", _BOUND),
                           ("body", (_enc_body, _dec_body)))),
    "yield": (Yield, _fields(("vars", _SOME_NAMES))),
    "await": (Await, _fields(("vars", _SOME_NAMES))),
    "barrier": (Barrier, []),
    "dep": (Dep, _fields(("after", _DOTTED), ("before", _DOTTED))),
    "return": (Return, _fields(("value", _OPT_NAME))),
}  # fmt: skip
_KIND_OF_CLASS: dict[type[Node], str] = {cls: kind for kind, (cls, _) in _NODE_FIELDS.items()}

_DECL_FIELDS: list[_Field] = _fields(
    ("name", _NAME),
    ("kind", (lambda k: k.value, _dec_kind)),
    ("dtype", _DTYPE),
    ("dims", _DIMS),
    ("init", (_enc_init, _dec_init)),
    ("ref", _OPT_STR),
    ("pattern", _OPT_STR),
    ("table_indices", _NAMES),
    ("table", (_ident, _dec_bool)),
    ("auto_dim", _NAMES),
    ("fixed", (_enc_fixed, _dec_fixed)),
    ("quant", (lambda q: None if q is None else q.value, _dec_quant)),
)
_LOC_KEYS = ("loc", "file")


def _required(cls: type[Any], fields: list[_Field]) -> tuple[str, ...]:
    """Fields without a default must appear in JSON; the rest may be omitted."""
    info = {f.name: f for f in dataclasses.fields(cls)}
    missing = dataclasses.MISSING
    return tuple(
        name for name, _, _ in fields
        if info[name].default is missing and info[name].default_factory is missing
    )  # fmt: skip


def _keys(
    cls: type[Any], fields: list[_Field], extra: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) JSON keys of a class; computed once per class at import."""
    required = _required(cls, fields)
    optional = tuple(n for n, _, _ in fields if n not in required)
    return extra + required, optional + _LOC_KEYS


_NODE_KEYS = {kind: _keys(cls, fields, ("kind",)) for kind, (cls, fields) in _NODE_FIELDS.items()}
_DECL_KEYS = _keys(VarDecl, _DECL_FIELDS)


def _check_keys(
    value: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    obj = _dec_object(value, path)
    for key in required:
        if key not in obj:
            raise _Fail(path, f"missing key {_show(key)}; expected keys {', '.join(required)}")
    if len(obj) > len(required):
        for key in obj:
            if key not in required and key not in optional:
                allowed = sorted({*required, *optional})
                raise _Fail(f"{path}.{key}", f"unknown key; expected one of {', '.join(allowed)}")
    return obj


# ---- locations ---------------------------------------------------------------------------
def _enc_loc(loc: SourceLoc | None, out: dict[str, Any]) -> None:
    if loc is None:
        return
    out["loc"] = [loc.line, loc.column]
    if loc.file is not None:
        out["file"] = loc.file


def _dec_loc(obj: dict[str, Any], path: str) -> SourceLoc | None:
    if "loc" not in obj:
        if "file" in obj:
            raise _Fail(f"{path}.file", 'a file without "loc"; expected "loc": [line, column] too')
        return None
    pair = obj["loc"]
    if (
        not isinstance(pair, list)
        or len(pair) != 2
        or any(type(v) is not int or v < 1 for v in pair)
    ):
        raise _fail(f"{path}.loc", "[line, column] with positive integers", pair)
    file = obj.get("file")
    if file is not None and not isinstance(file, str):
        raise _fail(f"{path}.file", "a string", file)
    return SourceLoc(pair[0], pair[1], file)


# ---- encode --------------------------------------------------------------------------------
def _enc_node(node: Node, with_loc: bool) -> dict[str, Any]:
    kind = _KIND_OF_CLASS.get(type(node))
    if kind is None:
        raise TypeError(f"not an IR node: {type(node).__name__}")
    out: dict[str, Any] = {"kind": kind}
    for name, enc, _ in _NODE_FIELDS[kind][1]:
        value = getattr(node, name)
        out[name] = _enc_body_loc(value, with_loc) if name == "body" else enc(value)
    if with_loc:
        _enc_loc(getattr(node, "loc", None), out)
    return out


def _enc_body_loc(nodes: tuple[Node, ...], with_loc: bool) -> list[dict[str, Any]]:
    return [_enc_node(n, with_loc) for n in nodes]


def to_json(graph: Graph, *, include_loc: bool = True) -> dict[str, Any]:
    """The graph as a JSON-ready dict (docs/graph-json.md), `include_loc` adds "loc"/"file"."""
    decls = []
    for decl in graph.vars:
        out = {name: enc(getattr(decl, name)) for name, enc, _ in _DECL_FIELDS}
        if out["quant"] is None:
            del out["quant"]  # only block-quantized weights carry the key
        if include_loc:
            _enc_loc(decl.loc, out)
        decls.append(out)
    blocks = []
    for block in graph.blocks:
        entry: dict[str, Any] = {
            "name": block.name,
            "nodes": [_enc_node(n, include_loc) for n in block.nodes],
        }
        if include_loc:
            _enc_loc(block.loc, entry)
        blocks.append(entry)
    return {
        "format": GRAPH_JSON_FORMAT,
        "version": GRAPH_JSON_VERSION,
        "vars": decls,
        "blocks": blocks,
    }


def to_json_text(graph: Graph, *, include_loc: bool = True, indent: int | None = 2) -> str:
    """`to_json` as a JSON string (strict JSON: no NaN/Infinity literals)."""
    return json.dumps(to_json(graph, include_loc=include_loc), indent=indent, allow_nan=False)


# ---- decode --------------------------------------------------------------------------------
def _dec_node(value: Any, path: str) -> Node:
    obj = _dec_object(value, path)
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in _NODE_FIELDS:
        kinds = ", ".join(_NODE_FIELDS)
        raise _Fail(f"{path}.kind", f"unknown node kind {_show(kind)}; expected one of {kinds}")
    cls, fields = _NODE_FIELDS[kind]
    required, optional = _NODE_KEYS[kind]
    _check_keys(obj, path, required, optional)
    kwargs = {name: dec(obj[name], f"{path}.{name}") for name, _, dec in fields if name in obj}
    return cls(**kwargs, loc=_dec_loc(obj, path))  # type: ignore[call-arg]


def _dec_decl(value: Any, path: str) -> VarDecl:
    required, optional = _DECL_KEYS
    obj = _check_keys(value, path, required, optional)
    kwargs = {
        name: dec(obj[name], f"{path}.{name}") for name, _, dec in _DECL_FIELDS if name in obj
    }
    return VarDecl(**kwargs, loc=_dec_loc(obj, path))


def _dec_block(value: Any, path: str) -> Block:
    obj = _check_keys(value, path, ("name", "nodes"), _LOC_KEYS)
    nodes = tuple(
        _dec_node(n, f"{path}.nodes[{i}]")
        for i, n in enumerate(_dec_list(obj["nodes"], f"{path}.nodes"))
    )
    return Block(_dec_name(obj["name"], f"{path}.name"), nodes, loc=_dec_loc(obj, path))


def from_json(data: Any) -> Graph:
    """The `Graph` of a dict produced by `to_json` (or read from a graph JSON file).

    Raises:
        DslSyntaxError: the data breaks the schema; the message names the JSON path
            (``blocks[1].nodes[3].op``), what was found and what was expected.
    """
    try:
        obj = _check_keys(data, "$", ("format", "version", "vars", "blocks"), ())
        if obj["format"] != GRAPH_JSON_FORMAT:
            raise _fail("format", f'"{GRAPH_JSON_FORMAT}"', obj["format"])
        version = _dec_int(obj["version"], "version")
        if version != GRAPH_JSON_VERSION:
            raise _Fail(
                "version",
                f"unsupported graph JSON version {version}; expected {GRAPH_JSON_VERSION}",
            )
        decls = tuple(
            _dec_decl(d, f"vars[{i}]") for i, d in enumerate(_dec_list(obj["vars"], "vars"))
        )
        blocks = tuple(
            _dec_block(b, f"blocks[{i}]") for i, b in enumerate(_dec_list(obj["blocks"], "blocks"))
        )
    except _Fail as err:
        raise DslSyntaxError(f"graph JSON at {err.path}: {err.message}") from None
    except RecursionError:
        raise DslSyntaxError("graph JSON: loops nested too deeply to read") from None
    return Graph(decls, blocks)


def from_json_text(text: str, filename: str | None = None) -> Graph:
    """Parse graph JSON text; a JSON syntax error is reported as ``file:line:col``.

    Raises:
        DslSyntaxError: invalid JSON or a schema violation (see `from_json`).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"{filename}:" if filename else ""
        raise DslSyntaxError(f"{where}{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    except RecursionError:
        raise DslSyntaxError("graph JSON nested too deeply to read") from None
    except ValueError as err:  # e.g. an integer of more than 4300 digits (int max_str_digits)
        where = f"{filename}: " if filename else ""
        raise DslSyntaxError(f"{where}invalid JSON: {err}") from None
    try:
        return from_json(data)
    except DslSyntaxError as err:
        if filename:
            raise DslSyntaxError(f"{filename}: {err}") from None
        raise
