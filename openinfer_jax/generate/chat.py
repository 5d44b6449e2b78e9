"""Chat templates without a template engine.

Models ship their chat format as a Jinja template (``tokenizer.chat_template``). The package
does not depend on Jinja: it recognizes the formats that cover the models it runs and
renders them directly.

- **ChatML** (``<|im_start|>role\\ncontent<|im_end|>\\n``: SmolLM2, Qwen, many fine-tunes).
  When the template inserts a default system message for conversations that start without
  one (SmolLM2 does), the same text is inserted.
- **Llama 3** (``<|start_header_id|>role<|end_header_id|>\\n\\ncontent<|eot_id|>``).

Any other template: if `jinja2` happens to be installed it renders the template as written
(sandboxed); otherwise a `TokenizerError` says to pass the prompt already formatted (or to
install jinja2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from openinfer_jax.core.errors import TokenizerError

__all__ = ["Message", "apply_chat_template", "chat_format"]

Message = dict[str, str]

_CHATML_SYSTEM = re.compile(r"<\|im_start\|>system\s*\n(.*?)<\|im_end\|>", re.S)


def chat_format(template: str) -> str:
    """The name of the format `template` follows: ``chatml``, ``llama3`` or ``jinja``."""
    if "<|im_start|>" in template:
        return "chatml"
    if "<|start_header_id|>" in template:
        return "llama3"
    return "jinja"


def _chatml(template: str, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    out = []
    default = _CHATML_SYSTEM.search(template)
    if default and messages and messages[0]["role"] != "system":
        out.append(f"<|im_start|>system\n{default.group(1)}<|im_end|>\n")
    for message in messages:
        out.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def _llama3(template: str, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    out = ["<|begin_of_text|>"] if "<|begin_of_text|>" in template else []
    for message in messages:
        out.append(
            f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n"
            f"{message['content'].strip()}<|eot_id|>"
        )
    if add_generation_prompt:
        out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(out)


def apply_chat_template(
    template: str | None, messages: Sequence[Message], *, add_generation_prompt: bool = True
) -> str:
    """The conversation `messages` ({"role", "content"} dicts) as one prompt string.

    Raises:
        TokenizerError: no template, or one of an unknown format without jinja2 installed.
    """
    if not template:
        raise TokenizerError(
            "the model has no chat template (tokenizer.chat_template); generate without --chat "
            "and give the prompt in the model's format"
        )
    fmt = chat_format(template)
    if fmt == "chatml":
        return _chatml(template, messages, add_generation_prompt)
    if fmt == "llama3":
        return _llama3(template, messages, add_generation_prompt)
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ModuleNotFoundError:
        raise TokenizerError(
            "the model's chat template is neither ChatML nor Llama 3, which are rendered "
            "without a template engine; install jinja2 to render it, or generate without "
            "--chat and give the prompt already formatted"
        ) from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return str(
        env.from_string(template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt
        )
    )
