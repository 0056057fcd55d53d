"""The tool-call parsers `--tool-call-parser` names (vLLM's names), and which one a chat template has.

`auto` picks the format the model's chat template teaches, or none (the generic grammar-backed tool
calling, `tgi.server.chat.tools`, stays the default for models without one). A parser named on the command line
that the model's template does not teach is refused at start-up.
"""

from __future__ import annotations

from typing import Any

from tgi.server.reasoning.formats import template_text
from tgi.server.tool_parsers.base import ToolCallFormat
from tgi.server.tool_parsers.hermes import HermesFormat
from tgi.server.tool_parsers.llama3_json import Llama3JsonFormat
from tgi.server.tool_parsers.mistral import MistralFormat

#: in the order `auto` tries them (the most specific marker first)
TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    f.name: f for f in (MistralFormat(), HermesFormat(), Llama3JsonFormat())
}
#: the values `--tool-call-parser` takes
TOOL_CALL_PARSER_NAMES = (*TOOL_CALL_FORMATS, "auto")


class UnfitToolCallParserError(ValueError):
    """A tool-call parser the model's chat template does not teach (the message names both)."""


def tool_call_format(name: str | None, chat_template: Any) -> ToolCallFormat | None:
    """The format `--tool-call-parser name` means for a model with `chat_template`: None when no parser is
    asked for, or `auto` finds none; `UnfitToolCallParserError` for a named one the template lacks."""
    if name is None:
        return None
    text = template_text(chat_template)
    if name == "auto":
        return next((f for f in TOOL_CALL_FORMATS.values() if f.fits(text)), None)
    if name not in TOOL_CALL_FORMATS:
        raise UnfitToolCallParserError(
            f"--tool-call-parser {name!r}: unknown; one of {', '.join(TOOL_CALL_PARSER_NAMES)}"
        )
    found = TOOL_CALL_FORMATS[name]
    if not found.fits(text):
        raise UnfitToolCallParserError(
            f"--tool-call-parser {name}: this model's chat template does not teach that format (no "
            f"{found.markers[0]!r} in it), so the model would not write it (give `auto`, or no parser)"
        )
    return found
