"""Recursive-descent parser of the `graph{}` text DSL into the IR (docs/dsl.md).

`parse(text)` accepts ``graph { ... }``, ``graph! { ... }`` (the seeds' macro form, with an
optional trailing ``;``) or the sections and blocks bare at top level. Every `VarDecl`,
`Block` and node carries a `SourceLoc` with the line's text, so later stages can point a
caret at it. Syntax errors raise `DslSyntaxError` reading ``file:line:col: what is wrong;
expected what`` followed by the source line and a caret.

Decisions where the seeds contradict themselves (docs/dsl.md, "Seed compatibility"):
- ``pattern("W.{l}")`` without ``@``: an attribute that takes arguments may omit the ``@``;
  it means the same as ``@pattern("W.{l}")``.
- ``constants { ... }`` (seed 002's spelling) is accepted as ``constant``.
- ``return h;`` (seed 002) parses; the name is kept in `Return.value`.
- ``dep after(matmul) before(cache.write)``: dotted names are single names.
- Unknown op names (``fill_nan_like``, ``attn``) are a validation matter, not syntax.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import DslSyntaxError
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
    Dim,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    ParamValue,
    Return,
    ScalarValue,
    SourceLoc,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.trace.lexer import (
    EOF,
    FLOAT,
    INT,
    NAME,
    PUNCT,
    STRING,
    SourceText,
    Token,
    syntax_error,
    tokenize,
)

__all__ = ["ATTRIBUTES", "DSL_DTYPES", "MAX_LOOP_DEPTH", "NODE_KEYWORDS", "parse"]

# Dtype spellings of the DSL: the short name of every type a tensor may have.
DSL_DTYPES: dict[str, DType] = {d.short: d for d in DType if d.is_tensor_type}
# Block-quantized weight types: only in declarations (`W: q4_1[N, K]`), values are f32.
BLOCK_SCHEMES: dict[str, BlockScheme] = {s.value: s for s in BlockScheme}

# Memory section keywords; "constants" is seed 002's spelling of "constant".
_SECTIONS: dict[str, MemoryKind] = {kind.value: kind for kind in MemoryKind}
_SECTIONS["constants"] = MemoryKind.CONSTANT

# Names with a fixed meaning as a setting value or @init literal.
_BOOL_WORDS = {"true": True, "false": False}
# math.nan itself (not float("nan")) so two parses of `nan` give the same object and the
# IR compares equal (tuple equality checks identity before ==).
_FLOAT_WORDS = {"inf": math.inf, "nan": math.nan}

# Settings whose identifier value must be a dtype (`to=f16`, `acc=i32`).
_DTYPE_SETTINGS = frozenset({"to", "acc"})

# Loops nest recursively; a cap turns absurd nesting into a syntax error, not a RecursionError.
MAX_LOOP_DEPTH = 64

_SECTION_LIST = "dynamic, volatile, constant, persistent or block"

# Node keyword -> parser method; the keyword is the node's first token.
_NODE_METHODS: dict[str, str] = {
    "assign": "parse_assign",
    "op": "parse_op",
    "transfer": "parse_transfer",
    "cache.read": "parse_cache_read",
    "cache.write": "parse_cache_write",
    "cache.increment": "parse_cache_increment",
    "cache.decrement": "parse_cache_decrement",
    "cache.reset": "parse_cache_reset",
    "branch": "parse_branch",
    "loop": "parse_loop",
    "yield": "parse_yield",
    "await": "parse_await",
    "barrier": "parse_barrier",
    "dep": "parse_dep",
    "return": "parse_return",
}
# Attribute name (after '@') -> parser method.
_ATTRIBUTE_METHODS: dict[str, str] = {
    "init": "parse_attr_init",
    "ref": "parse_attr_ref",
    "pattern": "parse_attr_pattern",
    "table": "parse_attr_table",
    "auto_dim": "parse_attr_auto_dim",
    "fixed": "parse_attr_fixed",
}
NODE_KEYWORDS: tuple[str, ...] = tuple(_NODE_METHODS)
ATTRIBUTES: tuple[str, ...] = tuple(_ATTRIBUTE_METHODS)


def _did_you_mean(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or "" if none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


class _Parser:
    """Parser state: the token list and a cursor. One instance parses one program."""

    def __init__(self, source: SourceText) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.pos = 0
        self.loop_depth = 0
        self.node_parsers: dict[str, Callable[[Token], Node]] = {
            keyword: getattr(self, method) for keyword, method in _NODE_METHODS.items()
        }
        self.attribute_parsers: dict[str, Callable[[Token, dict[str, object]], None]] = {
            name: getattr(self, method) for name, method in _ATTRIBUTE_METHODS.items()
        }

    # ---- token helpers --------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token:
        """The token `ahead` positions past the cursor (EOF at the end)."""
        index = self.pos + ahead
        tokens = self.tokens
        return tokens[index] if index < len(tokens) else tokens[-1]

    def advance(self) -> Token:
        """Consume and return the current token."""
        tok = self.tokens[self.pos]
        if tok.kind != EOF:
            self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        """True if the current token is punctuation `text`."""
        tok = self.tokens[self.pos]
        return tok.kind == PUNCT and tok.text == text

    def at_name(self, text: str) -> bool:
        """True if the current token is the name `text`."""
        tok = self.tokens[self.pos]
        return tok.kind == NAME and tok.text == text

    def error(self, tok: Token, message: str) -> DslSyntaxError:
        """A syntax error located at `tok`."""
        return syntax_error(self.source, tok.line, tok.column, message)

    def loc(self, tok: Token) -> SourceLoc:
        """The source location of `tok`."""
        return self.source.loc(tok.line, tok.column)

    def expect(self, text: str, context: str) -> Token:
        """Consume punctuation `text` or raise "found X <context>; expected 'text'"."""
        tok = self.tokens[self.pos]
        if tok.kind == PUNCT and tok.text == text:
            self.pos += 1
            return tok
        if text == ";" and self.pos > 0:
            # A missing ';' is best shown right after the previous token, on its line.
            prev = self.tokens[self.pos - 1]
            raise syntax_error(
                self.source,
                prev.line,
                prev.column + len(prev.text),
                f"missing ';' {context}, found {tok.describe()}; expected ';'",
            )
        raise self.error(tok, f"found {tok.describe()} {context}; expected '{text}'")

    def expect_name(self, what: str, *, dotted: bool = False) -> Token:
        """Consume a name (a `what`, e.g. "a variable name") or raise."""
        tok = self.tokens[self.pos]
        if tok.kind != NAME:
            raise self.error(tok, f"found {tok.describe()}; expected {what}")
        if not dotted and "." in tok.text:
            raise self.error(tok, f"'{tok.text}' contains '.'; expected {what} without '.'")
        self.pos += 1
        return tok

    def expect_keyword(self, word: str, context: str) -> Token:
        """Consume the name `word` (e.g. `in`, `after`) or raise."""
        tok = self.tokens[self.pos]
        if tok.kind == NAME and tok.text == word:
            self.pos += 1
            return tok
        raise self.error(tok, f"found {tok.describe()} {context}; expected '{word}'")

    def name_list(self, what: str, closer: str) -> tuple[str, ...]:
        """One or more comma-separated names up to (not including) punctuation `closer`."""
        names = [self.expect_name(what).text]
        while self.at(","):
            self.advance()
            names.append(self.expect_name(what).text)
        if not self.at(closer):
            tok = self.peek()
            raise self.error(
                tok, f"found {tok.describe()} in a list of names; expected ',' or '{closer}'"
            )
        return tuple(names)

    # ---- program --------------------------------------------------------------------
    def parse_program(self) -> Graph:
        """program := ('graph' ['!'] '{' item* '}' [';'] | item*) EOF."""
        decls: list[VarDecl] = []
        blocks: list[Block] = []
        if self.at_name("graph"):
            opener = self.advance()
            if self.at("!"):
                self.advance()
            self.expect("{", "after 'graph'")
            while not self.at("}"):
                if self.peek().kind == EOF:
                    raise self.error(
                        self.peek(),
                        f"unexpected end of input inside 'graph'; expected '}}' to close the "
                        f"graph opened at {opener.line}:{opener.column}",
                    )
                self.parse_item(decls, blocks)
            self.advance()
            if self.at(";"):
                self.advance()
            tok = self.peek()
            if tok.kind != EOF:
                raise self.error(
                    tok,
                    f"found {tok.describe()} after the graph's closing '}}'; expected end of input",
                )
        else:
            while self.peek().kind != EOF:
                self.parse_item(decls, blocks)
        return Graph(tuple(decls), tuple(blocks))

    def parse_item(self, decls: list[VarDecl], blocks: list[Block]) -> None:
        """item := section | block."""
        tok = self.peek()
        if tok.kind == NAME and tok.text in _SECTIONS:
            self.advance()
            self.parse_section(_SECTIONS[tok.text], tok, decls)
        elif tok.kind == NAME and tok.text == "block":
            blocks.append(self.parse_block())
        elif tok.kind == NAME:
            hint = _did_you_mean(tok.text, [*_SECTIONS, "block"])
            raise self.error(tok, f"unknown section '{tok.text}'; expected {_SECTION_LIST}{hint}")
        else:
            raise self.error(tok, f"found {tok.describe()} at top level; expected {_SECTION_LIST}")

    # ---- declarations -----------------------------------------------------------------
    def parse_section(self, kind: MemoryKind, opener: Token, decls: list[VarDecl]) -> None:
        """section := KIND '{' vardecl* '}'."""
        self.expect("{", f"after '{opener.text}'")
        while not self.at("}"):
            tok = self.peek()
            if tok.kind == EOF:
                raise self.error(
                    tok,
                    f"unexpected end of input in section '{opener.text}'; expected '}}' to "
                    f"close the section opened at {opener.line}:{opener.column}",
                )
            if tok.kind != NAME:
                raise self.error(
                    tok,
                    f"found {tok.describe()} in section '{opener.text}'; expected a variable declaration 'name: dtype[dims];' or '}}'",
                )
            decls.append(self.parse_vardecl(kind))
        self.advance()

    def parse_vardecl(self, kind: MemoryKind) -> VarDecl:
        """vardecl := NAME ['(' NAME,+ ')'] ':' DTYPE [dims] attr* ';'."""
        name_tok = self.expect_name("a variable name")
        indices: tuple[str, ...] = ()
        if self.at("("):
            self.advance()
            indices = self.name_list("a table index name", ")")
            self.advance()
        self.expect(":", f"after variable '{name_tok.text}'")
        quant = self.parse_block_scheme()
        dtype = DType.F32 if quant is not None else self.parse_dtype()
        dims = self.parse_dims() if self.at("[") else ()
        attrs: dict[str, object] = {}
        while True:
            tok = self.peek()
            if tok.kind == PUNCT and tok.text == "@":
                self.advance()
                attr_tok = self.expect_name("an attribute name after '@'")
            elif (
                tok.kind == NAME and tok.text in self.attribute_parsers and self.peek(1).text == "("
            ):
                # Seed 002 writes `pattern("W.{l}")` without '@'; see the module docstring.
                attr_tok = self.advance()
            else:
                break
            parser = self.attribute_parsers.get(attr_tok.text)
            if parser is None:
                known = ", ".join(f"@{n}" for n in self.attribute_parsers)
                raise self.error(
                    attr_tok,
                    f"unknown attribute '@{attr_tok.text}'; expected one of {known}"
                    + _did_you_mean(attr_tok.text, self.attribute_parsers, prefix="@"),
                )
            if attr_tok.text in attrs:
                raise self.error(
                    attr_tok,
                    f"duplicate attribute '@{attr_tok.text}' on variable '{name_tok.text}'; expected each attribute at most once",
                )
            parser(attr_tok, attrs)
        self.expect(";", f"after the declaration of '{name_tok.text}'")
        fixed = attrs.get("fixed", ())
        return VarDecl(
            name=name_tok.text,
            kind=kind,
            dtype=dtype,
            dims=dims,
            init=attrs.get("init"),  # type: ignore[arg-type]
            ref=attrs.get("ref"),  # type: ignore[arg-type]
            pattern=attrs.get("pattern"),  # type: ignore[arg-type]
            table_indices=indices,
            table=bool(attrs.get("table", False)),
            auto_dim=attrs.get("auto_dim", ()),  # type: ignore[arg-type]
            fixed=fixed,  # type: ignore[arg-type]
            quant=quant,
            loc=self.loc(name_tok),
        )

    def parse_block_scheme(self) -> BlockScheme | None:
        """A block-quantized weight type (``q8_0``, ``q4_0``, ``q4_1``) in a declaration, else None."""
        tok = self.peek()
        if tok.kind == NAME and tok.text in BLOCK_SCHEMES:
            self.advance()
            return BLOCK_SCHEMES[tok.text]
        return None

    def parse_dtype(self) -> DType:
        """DTYPE := one of `DSL_DTYPES`."""
        tok = self.peek()
        if tok.kind == NAME and tok.text in DSL_DTYPES:
            self.advance()
            return DSL_DTYPES[tok.text]
        known = ", ".join(DSL_DTYPES)
        if tok.kind == NAME and tok.text in BLOCK_SCHEMES:
            raise self.error(
                tok,
                f"'{tok.text}' is a block-quantized weight type; it declares a model weight in a "
                "constant or volatile section (`W: q4_1[N, K];`), here a plain dtype such as f32 is expected",
            )
        if tok.kind == NAME:
            hint = _did_you_mean(tok.text, DSL_DTYPES)
            raise self.error(tok, f"unknown dtype '{tok.text}'; expected one of {known}{hint}")
        raise self.error(tok, f"found {tok.describe()}; expected a dtype ({known})")

    def parse_dims(self) -> tuple[Dim, ...]:
        """dims := '[' [dim (',' dim)*] ']'; `[]` is a scalar."""
        self.advance()
        dims: list[Dim] = []
        if self.at("]"):
            self.advance()
            return ()
        while True:
            dims.append(self.parse_dim())
            if self.at(","):
                self.advance()
                continue
            if self.at("]"):
                self.advance()
                return tuple(dims)
            tok = self.peek()
            raise self.error(tok, f"found {tok.describe()} in dims; expected ',', '*' or ']'")

    def parse_dim(self) -> Dim:
        """dim := factor ('*' factor)*; factor := INT | NAME. Products are normalized 'a*b'."""
        factors = [self.parse_dim_factor()]
        while self.at("*"):
            self.advance()
            factors.append(self.parse_dim_factor())
        if len(factors) == 1 and isinstance(factors[0], int):
            return factors[0]
        return "*".join(str(f) for f in factors)

    def parse_dim_factor(self) -> int | str:
        tok = self.peek()
        if tok.kind == INT:
            self.advance()
            return tok.value  # type: ignore[return-value]
        if tok.kind == NAME and "." not in tok.text:
            self.advance()
            return tok.text
        raise self.error(
            tok,
            f"bad dimension: found {tok.describe()}; expected a non-negative integer, a sizevar "
            "name or a product such as 3*D",
        )

    # ---- attributes -------------------------------------------------------------------
    def open_args(self, attr: Token) -> None:
        self.expect("(", f"after attribute '@{attr.text}'")

    def close_args(self, attr: Token) -> None:
        self.expect(")", f"in attribute '@{attr.text}'")

    def parse_attr_init(self, attr: Token, attrs: dict[str, object]) -> None:
        """@init(lit): int, float, inf/nan, true/false, optionally negative."""
        self.open_args(attr)
        attrs["init"] = self.parse_scalar_literal("@init")
        self.close_args(attr)

    def parse_attr_ref(self, attr: Token, attrs: dict[str, object]) -> None:
        """@ref("name") or @ref(name)."""
        self.open_args(attr)
        tok = self.peek()
        if tok.kind == STRING:
            attrs["ref"] = tok.value
        elif tok.kind == NAME:
            attrs["ref"] = tok.text
        else:
            raise self.error(
                tok,
                f'found {tok.describe()} in @ref; expected a model tensor name as "name" or name',
            )
        self.advance()
        self.close_args(attr)

    def parse_attr_pattern(self, attr: Token, attrs: dict[str, object]) -> None:
        """@pattern("W.{l}")."""
        self.open_args(attr)
        tok = self.peek()
        if tok.kind != STRING:
            raise self.error(
                tok, f'found {tok.describe()} in @pattern; expected a string such as "W.{{l}}"'
            )
        self.advance()
        attrs["pattern"] = tok.value
        self.close_args(attr)

    def parse_attr_table(self, attr: Token, attrs: dict[str, object]) -> None:
        """@table takes no arguments."""
        if self.at("("):
            raise self.error(self.peek(), "@table takes no arguments; expected '@table' alone")
        attrs["table"] = True

    def parse_attr_auto_dim(self, attr: Token, attrs: dict[str, object]) -> None:
        """@auto_dim(i, j)."""
        self.open_args(attr)
        attrs["auto_dim"] = self.name_list("a table index name in @auto_dim", ")")
        self.advance()

    def parse_attr_fixed(self, attr: Token, attrs: dict[str, object]) -> None:
        """@fixed(i=N, j=M)."""
        self.open_args(attr)
        pairs: list[tuple[str, int]] = []
        while True:
            name = self.expect_name("a table index name in @fixed, as in @fixed(i=4)")
            self.expect("=", f"after '{name.text}' in @fixed (write @fixed({name.text}=N))")
            tok = self.peek()
            if tok.kind != INT:
                raise self.error(
                    tok,
                    f"found {tok.describe()} in @fixed; expected a non-negative integer capacity for '{name.text}'",
                )
            self.advance()
            pairs.append((name.text, tok.value))  # type: ignore[arg-type]
            if self.at(","):
                self.advance()
                continue
            break
        self.close_args(attr)
        attrs["fixed"] = tuple(pairs)

    def parse_scalar_literal(self, where: str) -> ScalarValue:
        """lit := ['-'] (INT | FLOAT | inf | nan) | true | false."""
        tok = self.peek()
        negative = False
        if tok.kind == PUNCT and tok.text == "-":
            negative = True
            self.advance()
            tok = self.peek()
        if tok.kind in (INT, FLOAT):
            self.advance()
            return -tok.value if negative else tok.value  # type: ignore[operator, return-value]
        if tok.kind == NAME and tok.text in _FLOAT_WORDS:
            self.advance()
            value = _FLOAT_WORDS[tok.text]
            return -value if negative and tok.text == "inf" else value
        if tok.kind == NAME and tok.text in _BOOL_WORDS and not negative:
            self.advance()
            return _BOOL_WORDS[tok.text]
        raise self.error(
            tok, f"found {tok.describe()} in {where}; expected a number, inf, nan, true or false"
        )

    # ---- blocks and nodes --------------------------------------------------------------
    def parse_block(self) -> Block:
        """block := 'block' NAME '{' node* '}'."""
        opener = self.advance()
        name = self.expect_name("a block name after 'block'")
        self.expect("{", f"after 'block {name.text}'")
        nodes = self.parse_body(f"block '{name.text}'", opener)
        return Block(name.text, nodes, loc=self.loc(opener))

    def parse_body(self, what: str, opener: Token) -> tuple[Node, ...]:
        """node* '}' (the '{' is already consumed)."""
        nodes: list[Node] = []
        parsers = self.node_parsers
        while True:
            tok = self.tokens[self.pos]
            if tok.kind == PUNCT and tok.text == "}":
                self.pos += 1
                return tuple(nodes)
            if tok.kind == NAME:
                parser = parsers.get(tok.text)
                if parser is not None:
                    self.pos += 1
                    nodes.append(parser(tok))
                    continue
                if tok.text == "block" or tok.text in _SECTIONS:
                    raise self.error(
                        tok,
                        f"'{tok.text}' inside {what}; expected '}}' to close {what} "
                        f"opened at {opener.line}:{opener.column} first",
                    )
                known = ", ".join(self.node_parsers)
                raise self.error(
                    tok,
                    f"unknown node '{tok.text}' in {what}; expected one of {known}"
                    + _did_you_mean(tok.text, self.node_parsers),
                )
            if tok.kind == EOF:
                raise self.error(
                    tok,
                    f"unexpected end of input in {what}; expected '}}' to close {what} opened "
                    f"at {opener.line}:{opener.column}",
                )
            raise self.error(
                tok, f"found {tok.describe()} in {what}; expected a node keyword or '}}'"
            )

    def end_node(self, keyword: Token) -> None:
        self.expect(";", f"at the end of the '{keyword.text}' node")

    def parse_assign(self, kw: Token) -> Node:
        """assign NAME ':' DTYPE [dims] ';'."""
        name = self.expect_name("a variable name after 'assign'")
        self.expect(":", f"after 'assign {name.text}'")
        dtype = self.parse_dtype()
        dims = self.parse_dims() if self.at("[") else ()
        self.end_node(kw)
        return Assign(name.text, dtype, dims, loc=self.loc(kw))

    def parse_op(self, kw: Token) -> Node:
        """op NAME '(' varref,* setting,* ')' '>>' varref ';'."""
        name = self.expect_name("an op name after 'op'")
        self.expect("(", f"after 'op {name.text}'")
        inputs: list[VarRef] = []
        params: list[tuple[str, ParamValue]] = []
        first_setting: Token | None = None
        if not self.at(")"):
            while True:
                tok = self.peek()
                if tok.kind == NAME and self.peek(1).text == "=" and self.peek(1).kind == PUNCT:
                    if first_setting is None:
                        first_setting = tok
                    if any(key == tok.text for key, _ in params):
                        raise self.error(
                            tok,
                            f"setting '{tok.text}' given twice in 'op {name.text}'; "
                            "expected each setting once (keep the value you mean)",
                        )
                    self.advance()
                    self.advance()
                    params.append((tok.text, self.parse_setting_value(tok.text)))
                elif tok.kind == NAME:
                    if first_setting is not None:
                        raise self.error(
                            tok,
                            f"positional input '{tok.text}' after setting '{first_setting.text}=...'; "
                            "expected all positional inputs before the settings",
                        )
                    inputs.append(self.parse_varref("an op input"))
                else:
                    raise self.error(
                        tok,
                        f"found {tok.describe()} in the arguments of op '{name.text}'; expected a "
                        "variable name or a setting name=value (literals go in settings, e.g. value=1.0)",
                    )
                if self.at(","):
                    self.advance()
                    continue
                if self.at(")"):
                    break
                tok = self.peek()
                raise self.error(
                    tok,
                    f"found {tok.describe()} in the arguments of op '{name.text}'; expected ',' or ')'",
                )
        self.advance()
        self.expect(">>", f"after 'op {name.text}(...)' (the output follows '>>')")
        output = self.parse_varref("the op's output variable")
        self.end_node(kw)
        return Op(name.text, tuple(inputs), tuple(params), output, loc=self.loc(kw))

    def parse_setting_value(self, key: str) -> ParamValue:
        """A setting's value; see docs/dsl.md "Settings" for each form."""
        tok = self.peek()
        if tok.kind == PUNCT and tok.text == "[":
            return self.parse_setting_list(key)
        if tok.kind == NAME and tok.text not in _FLOAT_WORDS and tok.text not in _BOOL_WORDS:
            self.advance()
            if tok.text in DSL_DTYPES:
                return DSL_DTYPES[tok.text]
            if key in _DTYPE_SETTINGS:
                raise self.error(
                    tok,
                    f"unknown dtype '{tok.text}' for setting '{key}'; expected one of "
                    f"{', '.join(DSL_DTYPES)}{_did_you_mean(tok.text, DSL_DTYPES)}",
                )
            if "." in tok.text:
                raise self.error(
                    tok, f"'{tok.text}' contains '.'; expected a variable name or a quoted string"
                )
            return VarName(tok.text)
        if tok.kind == STRING:
            self.advance()
            return tok.value  # type: ignore[return-value]
        if tok.kind in (INT, FLOAT, NAME) or (tok.kind == PUNCT and tok.text == "-"):
            return self.parse_scalar_literal(f"setting '{key}'")
        raise self.error(
            tok,
            f"found {tok.describe()} as the value of setting '{key}'; expected a number, true/false, "
            "a string, a name, a dtype or a [list]",
        )

    def parse_setting_list(self, key: str) -> tuple[int, ...] | tuple[DType, ...]:
        """'[' ints ']' or '[' dtypes ']' (for acc); '[]' is empty."""
        opener = self.advance()
        items: list[int | DType] = []
        kinds: set[str] = set()
        while not self.at("]"):
            tok = self.peek()
            if tok.kind == INT or (
                tok.kind == PUNCT and tok.text == "-" and self.peek(1).kind == INT
            ):
                negative = tok.kind == PUNCT
                if negative:
                    self.advance()
                value = int(self.advance().text)
                items.append(-value if negative else value)
                kinds.add("int")
            elif tok.kind == NAME and tok.text in DSL_DTYPES:
                self.advance()
                items.append(DSL_DTYPES[tok.text])
                kinds.add("dtype")
            else:
                raise self.error(
                    tok,
                    f"found {tok.describe()} in the list for setting '{key}'; expected integers or dtypes",
                )
            if len(kinds) > 1:
                raise self.error(
                    tok,
                    f"list for setting '{key}' mixes integers and dtypes; expected one kind only",
                )
            if self.at(","):
                self.advance()
                if self.at("]"):
                    raise self.error(
                        self.peek(),
                        f"found ']' after ',' in the list for setting '{key}'; expected another item",
                    )
            elif not self.at("]"):
                tok = self.peek()
                raise self.error(
                    tok,
                    f"found {tok.describe()} in the list for setting '{key}' opened at "
                    f"{opener.line}:{opener.column}; expected ',' or ']'",
                )
        self.advance()
        return tuple(items)  # type: ignore[return-value]

    def parse_varref(self, what: str) -> VarRef:
        """varref := NAME ['[' (INT|NAME),+ ']']."""
        name = self.expect_name(f"{what} (a variable name)")
        if not self.at("["):
            return VarRef(name.text)
        self.advance()
        indices: list[int | str] = []
        while True:
            tok = self.peek()
            if tok.kind == INT:
                indices.append(tok.value)  # type: ignore[arg-type]
            elif tok.kind == NAME and "." not in tok.text:
                indices.append(tok.text)
            else:
                raise self.error(
                    tok,
                    f"found {tok.describe()} in the index of '{name.text}'; expected a non-negative integer or a name",
                )
            self.advance()
            if self.at(","):
                self.advance()
                continue
            if self.at("]"):
                self.advance()
                return VarRef(name.text, tuple(indices))
            tok = self.peek()
            raise self.error(
                tok, f"found {tok.describe()} in the index of '{name.text}'; expected ',' or ']'"
            )

    def parse_cache_access(self, what: str) -> CacheAccess:
        """cacheacc := NAME ['[' [item (',' item)*] ']']; item := idx | [idx] '..' [idx]."""
        name = self.expect_name(f"{what} (a persistent variable)")
        if not self.at("["):
            return CacheAccess(name.text)
        self.advance()
        items: list[CacheIndex | CacheSlice] = []
        if self.at("]"):
            self.advance()
            return CacheAccess(name.text, (), bracketed=True)
        while True:
            start = self.parse_cache_bound(name.text, optional=True)
            if self.at(".."):
                self.advance()
                end = self.parse_cache_bound(name.text, optional=True)
                items.append(CacheSlice(start, end))
            elif start is None:
                tok = self.peek()
                raise self.error(
                    tok,
                    f"found {tok.describe()} in the index of '{name.text}'; expected an index, a slice a..b or ']'",
                )
            else:
                items.append(CacheIndex(start))
            if self.at(","):
                self.advance()
                continue
            if self.at("]"):
                self.advance()
                return CacheAccess(name.text, tuple(items), bracketed=True)
            tok = self.peek()
            raise self.error(
                tok,
                f"found {tok.describe()} in the index of '{name.text}'; expected ',', '..' or ']'",
            )

    def parse_cache_bound(self, table: str, *, optional: bool) -> int | str | None:
        """idx := NAME | ['-'] INT; None where a slice bound is left open."""
        tok = self.peek()
        if tok.kind == PUNCT and tok.text == "-":
            self.advance()
            num = self.peek()
            if num.kind != INT:
                raise self.error(
                    num,
                    f"found {num.describe()} after '-' in the index of '{table}'; expected an integer",
                )
            self.advance()
            return -int(num.text)
        if tok.kind == INT:
            self.advance()
            return tok.value  # type: ignore[return-value]
        if tok.kind == NAME and "." not in tok.text:
            self.advance()
            return tok.text
        if optional and tok.kind == PUNCT and tok.text in ("..", ",", "]"):
            return None
        raise self.error(
            tok, f"found {tok.describe()} in the index of '{table}'; expected an integer or a name"
        )

    def parse_transfer(self, kw: Token) -> Node:
        """transfer varref '>>' varref ';'."""
        src = self.parse_varref("the transfer source")
        self.expect(">>", "after the transfer source")
        dst = self.parse_varref("the transfer destination")
        self.end_node(kw)
        return Transfer(src, dst, loc=self.loc(kw))

    def parse_cache_read(self, kw: Token) -> Node:
        """cache.read cacheacc '>>' varref ';'."""
        src = self.parse_cache_access("the cache to read")
        self.expect(">>", "after the cache to read")
        dst = self.parse_varref("the variable to read into")
        self.end_node(kw)
        return CacheRead(src, dst, loc=self.loc(kw))

    def parse_cache_write(self, kw: Token) -> Node:
        """cache.write varref '>>' cacheacc ';'."""
        src = self.parse_varref("the value to write")
        self.expect(">>", "after the value to write")
        dst = self.parse_cache_access("the cache to write")
        self.end_node(kw)
        return CacheWrite(src, dst, loc=self.loc(kw))

    def parse_step_amount(self) -> tuple[int, str]:
        """[INT] NAME, shared by cache.increment and cache.decrement."""
        amount = 1
        if self.peek().kind == INT:
            amount = self.advance().value  # type: ignore[assignment]
        name = self.expect_name("a persistent scalar name")
        return amount, name.text

    def parse_cache_increment(self, kw: Token) -> Node:
        """cache.increment [INT] NAME ';'."""
        amount, name = self.parse_step_amount()
        self.end_node(kw)
        return CacheIncrement(name, amount, loc=self.loc(kw))

    def parse_cache_decrement(self, kw: Token) -> Node:
        """cache.decrement [INT] NAME ';'."""
        amount, name = self.parse_step_amount()
        self.end_node(kw)
        return CacheDecrement(name, amount, loc=self.loc(kw))

    def parse_cache_reset(self, kw: Token) -> Node:
        """cache.reset cacheacc ';'."""
        target = self.parse_cache_access("the cache to reset")
        self.end_node(kw)
        return CacheReset(target, loc=self.loc(kw))

    def parse_branch(self, kw: Token) -> Node:
        """branch NAME ';' | branch COND THEN ELSE ';'."""
        first = self.expect_name("a block name or a condition after 'branch'")
        if self.at(";"):
            self.advance()
            return Branch(first.text, loc=self.loc(kw))
        then_tok = self.expect_name("the block to run when the condition is true")
        if self.at(";"):
            raise self.error(
                self.peek(),
                f"conditional branch on '{first.text}' has no else block; expected "
                f"'branch {first.text} {then_tok.text} ELSE_BLOCK;'",
            )
        else_tok = self.expect_name("the block to run when the condition is false")
        self.end_node(kw)
        return Branch(then_tok.text, cond=first.text, else_block=else_tok.text, loc=self.loc(kw))

    def parse_loop(self, kw: Token) -> Node:
        """loop NAME '(' NAME 'in' bound '..' bound ')' '{' node* '}'."""
        name = self.expect_name("a loop name after 'loop'")
        self.expect("(", f"after 'loop {name.text}' (write loop {name.text} (i in 0..N) {{ ... }})")
        index = self.expect_name("the loop index name")
        self.expect_keyword("in", f"after loop index '{index.text}'")
        start = self.parse_loop_bound()
        self.expect("..", "between the loop bounds")
        end = self.parse_loop_bound()
        self.expect(")", "after the loop range")
        opener = self.expect("{", f"after 'loop {name.text} (...)'")
        if self.loop_depth >= MAX_LOOP_DEPTH:
            raise self.error(
                kw, f"loops nested more than {MAX_LOOP_DEPTH} deep; expected flatter nesting"
            )
        self.loop_depth += 1
        body = self.parse_body(f"loop '{name.text}'", opener)
        self.loop_depth -= 1
        return Loop(name.text, index.text, start, end, body, loc=self.loc(kw))

    def parse_loop_bound(self) -> int | str:
        tok = self.peek()
        if tok.kind == INT:
            self.advance()
            return tok.value  # type: ignore[return-value]
        if tok.kind == NAME and "." not in tok.text:
            self.advance()
            return tok.text
        raise self.error(
            tok,
            f"bad loop bound: found {tok.describe()}; expected a non-negative integer, a sizevar or a scalar variable",
        )

    def parse_yield(self, kw: Token) -> Node:
        """yield NAME,+ ';'."""
        names = self.name_list("a variable name after 'yield'", ";")
        self.end_node(kw)
        return Yield(names, loc=self.loc(kw))

    def parse_await(self, kw: Token) -> Node:
        """await NAME,+ ';'."""
        names = self.name_list("a variable name after 'await'", ";")
        self.end_node(kw)
        return Await(names, loc=self.loc(kw))

    def parse_barrier(self, kw: Token) -> Node:
        """barrier ';'."""
        self.end_node(kw)
        return Barrier(loc=self.loc(kw))

    def parse_dep(self, kw: Token) -> Node:
        """dep 'after' '(' NAME ')' 'before' '(' NAME ')' ';' (dotted names allowed)."""
        self.expect_keyword("after", "after 'dep' (write dep after(a) before(b);)")
        self.expect("(", "after 'dep after'")
        after = self.expect_name("an op or node name inside after(...)", dotted=True)
        self.expect(")", "after the name in after(...)")
        self.expect_keyword("before", "after 'dep after(...)' (write dep after(a) before(b);)")
        self.expect("(", "after 'before'")
        before = self.expect_name("an op or node name inside before(...)", dotted=True)
        self.expect(")", "after the name in before(...)")
        self.end_node(kw)
        return Dep(after.text, before.text, loc=self.loc(kw))

    def parse_return(self, kw: Token) -> Node:
        """return [NAME] ';'."""
        value = None
        if self.peek().kind == NAME:
            value = self.expect_name("a variable name after 'return'").text
        self.end_node(kw)
        return Return(value, loc=self.loc(kw))


def parse(text: str, filename: str | None = None) -> Graph:
    """Parse `graph{}` DSL text into a `Graph`.

    Args:
        text: the program; ``graph { ... }``, ``graph! { ... }`` or bare sections and blocks.
        filename: shown in locations and error messages (``file:line:col``).

    Raises:
        DslSyntaxError: the text does not follow the grammar; the message names
            ``file:line:col``, what is wrong and what was expected, then the line and a caret.
    """
    if not isinstance(text, str):
        raise DslSyntaxError(f"parse() takes the program text as str, got {type(text).__name__}")
    return _Parser(SourceText(text, filename)).parse_program()
