"""Models' own tool-call formats (`--tool-call-parser`): model text in, plain text and tool calls out,
whole or streamed, for every API."""

from tgi.server.tool_parsers.base import (
    ParsedOutput,
    Segment,
    ToolCall,
    ToolCallFormat,
    ToolCallStream,
)
from tgi.server.tool_parsers.registry import (
    TOOL_CALL_FORMATS,
    TOOL_CALL_PARSER_NAMES,
    UnfitToolCallParserError,
    tool_call_format,
)

__all__ = [
    "TOOL_CALL_FORMATS",
    "TOOL_CALL_PARSER_NAMES",
    "ParsedOutput",
    "Segment",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallStream",
    "UnfitToolCallParserError",
    "tool_call_format",
]
