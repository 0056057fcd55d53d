"""Reasoning output: the model's thinking split from its answer (`--reasoning-parser`), for every API."""

from tgi.server.reasoning.formats import (
    REASONING_FORMATS,
    REASONING_PARSER_NAMES,
    ReasoningFormat,
    UnfitReasoningParserError,
    reasoning_format,
)
from tgi.server.reasoning.splitter import ReasoningDelta, ReasoningSplitter

__all__ = [
    "REASONING_FORMATS",
    "REASONING_PARSER_NAMES",
    "ReasoningDelta",
    "ReasoningFormat",
    "ReasoningSplitter",
    "UnfitReasoningParserError",
    "reasoning_format",
]
