"""How a located problem is shown to the user: `where: what; expected what`, the line, a caret.

Both the Python builder (DslSyntaxError) and validation (GraphValidationError) render
their messages here, so an error from either frontend reads the same way:

    model.py:12:5: block 'entry', node 3 (op matmul): output 'h' is f16[B, D] ...
        b.op.matmul(x, W[0]) >> h
        ^
"""

from __future__ import annotations

from dataclasses import dataclass

from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import SourceLoc

__all__ = ["Issue", "ValidationErrors", "format_located"]


def format_located(loc: SourceLoc | None, message: str, context: str | None = None) -> str:
    """Render `message` with its location prefix and, when known, the snippet and a caret.

    `context` (e.g. ``"block 'entry', node 3 (op matmul)"``) goes between the location
    and the message. Without a location the message starts with the context alone.
    """
    head_parts = []
    if loc is not None:
        head_parts.append(str(loc))
    if context:
        head_parts.append(context)
    head = ": ".join(head_parts)
    text = f"{head}: {message}" if head else message
    if loc is not None and loc.snippet:
        snippet = loc.snippet.rstrip("\n")
        # Expand tabs in the part before the column so the caret lands under it.
        column = max(loc.column, 1)
        prefix = snippet[: column - 1].expandtabs(4)
        text += f"\n    {snippet.expandtabs(4)}\n    {' ' * len(prefix)}^"
    return text


@dataclass(frozen=True)
class Issue:
    """One validation problem: what is wrong, where (source location) and in which block/node."""

    message: str
    loc: SourceLoc | None = None
    context: str | None = None

    def render(self) -> str:
        """The full text shown to the user (location, context, message, snippet, caret)."""
        return format_located(self.loc, self.message, self.context)


class ValidationErrors(GraphValidationError):
    """A GraphValidationError carrying every problem found, in source order.

    `errors` is the list of `Issue`s; the message lists them all, one block per issue.
    The first issue's location is available as `loc` (None if it has none).
    """

    def __init__(self, errors: list[Issue]) -> None:
        self.errors = list(errors)
        self.loc = self.errors[0].loc if self.errors else None
        rendered = [issue.render() for issue in self.errors]
        if len(rendered) == 1:
            text = rendered[0]
        else:
            text = f"{len(rendered)} problems in the graph:\n" + "\n".join(
                f"[{i + 1}] {body}" for i, body in enumerate(rendered)
            )
        super().__init__(text)
