"""The reasoning parsers `--reasoning-parser` names (vLLM's names), and which one a chat template has.

A parser is a pair of tags and where the reasoning starts; `auto` picks one from the chat template (one
that mentions its tags), or none. A parser named on the command line whose tags the model's template
never mentions is refused at start-up: that model cannot be asked to think in them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tgi.server.reasoning.splitter import ReasoningSplitter


class UnfitReasoningParserError(ValueError):
    """A reasoning parser the model's chat template cannot have (the message names both)."""


@dataclass(frozen=True)
class ReasoningFormat:
    """How one model family writes its reasoning.

    `starts_inside`: True when the reasoning starts with the output whether or not the model writes the
    start tag (DeepSeek-R1, whose template may open it); None when it is decided per request, by whether
    the rendered prompt ends with the start tag (Qwen3's templates open it in some versions, and close an
    empty one when thinking is disabled)."""

    name: str
    start_tag: str = "<think>"
    end_tag: str = "</think>"
    starts_inside: bool | None = None

    def fits(self, chat_template: Any) -> bool:
        """Whether the chat template writes or reads this format's tags."""
        text = template_text(chat_template)
        return self.start_tag in text or self.end_tag in text

    def opens_in(self, prompt: str) -> bool:
        """Whether the output of `prompt` (the rendered chat template) starts inside the reasoning."""
        if self.starts_inside is not None:
            return self.starts_inside
        return prompt.rstrip().endswith(self.start_tag)

    def splitter(self, prompt: str) -> ReasoningSplitter:
        """A splitter for one output of `prompt`."""
        return ReasoningSplitter(self.start_tag, self.end_tag, self.opens_in(prompt))


REASONING_FORMATS = {
    "deepseek_r1": ReasoningFormat("deepseek_r1", starts_inside=True),
    "qwen3": ReasoningFormat("qwen3"),
}
#: the values `--reasoning-parser` takes
REASONING_PARSER_NAMES = (*REASONING_FORMATS, "auto")


def template_text(chat_template: Any) -> str:
    """A chat template as one text (a tokenizer may have several, by name)."""
    if isinstance(chat_template, dict):
        return "\n".join(str(t) for t in chat_template.values())
    return str(chat_template or "")


def reasoning_format(name: str | None, chat_template: Any) -> ReasoningFormat | None:
    """The format `--reasoning-parser name` means for a model with `chat_template`: None when no parser is
    asked for, or `auto` finds none in the template; `UnfitReasoningParserError` for a named parser whose
    tags the template never mentions."""
    if name is None:
        return None
    text = template_text(chat_template)
    if name == "auto":
        if not REASONING_FORMATS["qwen3"].fits(text):
            return None
        deepseek = "<｜Assistant｜>" in text or "<|Assistant|>" in text
        return REASONING_FORMATS["deepseek_r1" if deepseek else "qwen3"]
    if name not in REASONING_FORMATS:
        raise UnfitReasoningParserError(
            f"--reasoning-parser {name!r}: unknown; one of {', '.join(REASONING_PARSER_NAMES)}"
        )
    found = REASONING_FORMATS[name]
    if not found.fits(chat_template):
        raise UnfitReasoningParserError(
            f"--reasoning-parser {name}: this model's chat template never writes {found.start_tag!r} or {found.end_tag!r}, so the "
            "model cannot be asked to reason in that format (give `auto`, or no reasoning parser)"
        )
    return found
