"""Tokens of the `graph{}` text DSL, each with its line:column.

The lexer turns program text into a list of `Token`s ending with an ``EOF`` token.
Whitespace, ``// line`` and ``/* block */`` comments are skipped. A name may contain
dots between its parts (``cache.read``, ``cache.write``) so node keywords and the
`dep after(matmul) before(cache.write)` form of the seeds are single tokens; ``..``
(a range) is never part of a name or a number.

Raises `DslSyntaxError` (built by `syntax_error`) for stray characters, unterminated
strings or comments and malformed numbers.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir.nodes import SourceLoc

__all__ = [
    "EOF",
    "FLOAT",
    "INT",
    "NAME",
    "PUNCT",
    "STRING",
    "SourceText",
    "Token",
    "syntax_error",
    "tokenize",
]

# Token kinds. Punctuation tokens have kind PUNCT and their text as `text`.
NAME = "name"
INT = "int"
FLOAT = "float"
STRING = "string"
PUNCT = "punct"
EOF = "end of input"

# One alternation. The alternatives start with disjoint characters, so their order only
# matters for speed: the most frequent tokens come first.
_TOKEN_RE = re.compile(
    r"""
    [ \t\r\f\v]*          # leading whitespace belongs to the token (fewer matches)
    (?:(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    |(?P<punct>>>|\.\.|[{}()\[\]:;,=@*\-!])
    |(?P<nl>\n)
    |(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
    |(?P<line_comment>//[^\n]*)
    |(?P<block_comment>/\*[\s\S]*?\*/)
    |(?P<open_comment>/\*)
    |(?P<string>"(?:[^"\\\n]|\\[^\n])*")
    |(?P<open_string>")
    |(?P<end>\Z))
    """,
    re.VERBOSE,
)

# A number glued to a following name character (`3D`, `1.5f`) is one malformed literal.
_NAME_CHAR = re.compile(r"[A-Za-z0-9_]")
# Every int of the DSL fits in 64 bits (20 digits); a longer literal is an error, not a
# 5000-digit int (Python refuses to convert more than 4300 digits anyway).
_MAX_INT_DIGITS = 40
_WORD = re.compile(r"[A-Za-z0-9_.]*")


class Token(NamedTuple):
    """One token: its kind, source text, decoded value and 1-based line:column.

    A NamedTuple because the lexer makes tens of thousands of them per large program.
    """

    kind: str
    text: str
    line: int
    column: int
    value: object = None

    def describe(self) -> str:
        """How error messages name this token: ``';'``, ``name 'x'``, ``end of input``."""
        if self.kind == EOF:
            return "end of input"
        if self.kind == PUNCT:
            return f"'{self.text}'"
        if self.kind == NAME:
            return f"name '{self.text}'"
        if self.kind == STRING:
            return f"string {self.text}"
        return f"number {self.text}"


class SourceText:
    """Program text split into lines, to build `SourceLoc`s with a snippet for carets."""

    def __init__(self, text: str, filename: str | None = None) -> None:
        self.text = text
        self.filename = filename
        # Lines end at "\n" only, matching the lexer's line count ("\r" is whitespace).
        self.lines = [line.rstrip("\r") for line in text.split("\n")]

    def loc(self, line: int, column: int) -> SourceLoc:
        """The `SourceLoc` of line:column, carrying that line as its snippet."""
        snippet = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return SourceLoc(line, column, self.filename, snippet)


def syntax_error(source: SourceText, line: int, column: int, message: str) -> DslSyntaxError:
    """A `DslSyntaxError` reading ``file:line:col: message`` then the line and a caret.

    The error carries the location as attribute ``loc`` so tools can jump to it.
    """
    loc = source.loc(line, column)
    err = DslSyntaxError(f"{loc}: {message}\n{loc.excerpt()}")
    err.loc = loc  # type: ignore[attr-defined]
    return err


def _decode_string(literal: str) -> str:
    """The value of a string literal; escapes follow JSON (\\n, \\t, \\", \\\\, \\uXXXX).

    Raises:
        ValueError: a bad escape, or a lone surrogate (`\\ud800`), which no text encoding
            can write (printing the graph back would fail).
    """
    value: str = json.loads(literal, strict=False)
    value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return value


def _unexpected_character(source: SourceText, line: int, column: int, ch: str) -> DslSyntaxError:
    if ch == ">":
        return syntax_error(
            source,
            line,
            column,
            "unexpected '>'; expected '>>' to route a value into its destination",
        )
    shown = repr(ch) if not ch.isprintable() or ch in "'\"" else f"'{ch}'"
    return syntax_error(
        source,
        line,
        column,
        f"unexpected character {shown}; expected a name, number, string, "
        "punctuation such as { } ( ) [ ] : ; , = >> .. @ or a comment",
    )


def _number_token(source: SourceText, m: re.Match[str], line: int, line_start: int) -> Token:
    """The INT or FLOAT token of a `number` match (a name glued to it is an error)."""
    text, start = source.text, m.start("number")
    column = start - line_start + 1
    literal = m.group("number")
    if _NAME_CHAR.match(text, m.end()):
        word = _WORD.match(text, start).group()  # type: ignore[union-attr]
        raise syntax_error(
            source,
            line,
            column,
            f"malformed number '{word}'; expected digits, optionally with a fraction "
            "and exponent (e.g. 3, 0.01, 1e-6), separated from names by '*' or ','",
        )
    if "." in literal or "e" in literal or "E" in literal:
        return Token(FLOAT, literal, line, column, float(literal))
    if len(literal) > _MAX_INT_DIGITS:
        raise syntax_error(
            source,
            line,
            column,
            f"integer literal of {len(literal)} digits; expected at most "
            f"{_MAX_INT_DIGITS} digits (integers are 64-bit)",
        )
    return Token(INT, literal, line, column, int(literal))


def _string_token(source: SourceText, m: re.Match[str], line: int, line_start: int) -> Token:
    """The STRING token of a `string` match, its escapes decoded."""
    start = m.start("string")
    literal = m.group("string")
    try:
        value = _decode_string(literal)
    except ValueError:
        raise syntax_error(
            source,
            line,
            start - line_start + 1,
            'bad escape sequence in string; expected one of \\" \\\\ \\/ \\n \\t \\r '
            "\\b \\f or \\uXXXX (a character, not half of a surrogate pair)",
        ) from None
    return Token(STRING, literal, line, start - line_start + 1, value)


def tokenize(source: SourceText) -> list[Token]:
    """All tokens of `source`, ending with an EOF token.

    Raises:
        DslSyntaxError: stray character, unterminated string or block comment, bad number
            or bad escape sequence; the message points at the offending character.
    """
    text = source.text
    tokens: list[Token] = []
    append = tokens.append
    line = 1
    line_start = 0
    pos = 0  # where the next match must start; finditer silently skips what no rule matches
    for m in _TOKEN_RE.finditer(text):
        if m.start() != pos:
            bad = pos
            while text[bad] in " \t\r\f\v":
                bad += 1
            raise _unexpected_character(source, line, bad - line_start + 1, text[bad])
        group = m.lastgroup
        pos = m.end()
        if group == "name" or group == "punct":
            start = m.start(group)
            append(
                Token(
                    NAME if group == "name" else PUNCT, m.group(group), line, start - line_start + 1
                )
            )
        elif group == "nl":
            line += 1
            line_start = pos
        elif group == "number":
            append(_number_token(source, m, line, line_start))
        elif group == "line_comment":
            pass
        elif group == "block_comment":
            start = m.start(group)
            newlines = text.count("\n", start, pos)
            if newlines:
                line += newlines
                line_start = text.rfind("\n", start, pos) + 1
        elif group == "string":
            append(_string_token(source, m, line, line_start))
        elif group == "open_string":
            raise syntax_error(
                source,
                line,
                m.start(group) - line_start + 1,
                "unterminated string; expected a closing '\"' on the same line",
            )
        elif group == "open_comment":
            raise syntax_error(
                source,
                line,
                m.start(group) - line_start + 1,
                "unterminated comment '/*'; expected '*/' to close it",
            )
        else:  # end
            append(Token(EOF, "", line, m.start(group) - line_start + 1))  # type: ignore[arg-type]
            return tokens
    # Unreachable: the `end` rule always matches at the end of the text.
    raise AssertionError("lexer ran past the end of the text")
