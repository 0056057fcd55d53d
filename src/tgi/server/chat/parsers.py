"""Which output parsers a request's answer goes through (`--reasoning-parser`, `--tool-call-parser`),
resolved against the serving model's chat template, and what they change before generation: the prompt
tells whether the output starts inside the reasoning, and a grammar moves after the reasoning.

API-agnostic: every route that renders a chat template uses it the same way (`resolve`, then
`reasoned_prompt`); reading the output back is each API's own (`tgi.server.chat.output` for chat
completions).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tgi.core.request import ImageInput
from tgi.core.sampling_params import SamplingParams
from tgi.server.images.sources import split_images
from tgi.server.reasoning import (
    ReasoningFormat,
    ReasoningSplitter,
    UnfitReasoningParserError,
    reasoning_format,
)
from tgi.server.reasoning.formats import template_text
from tgi.server.reasoning.grammar import after_reasoning
from tgi.server.tool_parsers import ToolCallFormat, UnfitToolCallParserError, tool_call_format

if TYPE_CHECKING:  # the service imports the routes' helpers, not this module
    from tgi.server.chat.tools import ToolPlan
    from tgi.server.service.inference import InferenceService


@dataclass(frozen=True)
class OutputParsers:
    """How one request's output is read back."""

    reasoning: ReasoningFormat | None = None  # its thinking split from its answer
    inside: bool = False  # the prompt opened the reasoning (the output starts in it)
    tool_format: ToolCallFormat | None = None  # `tool_choice: auto` reads the model's own calls

    @property
    def active(self) -> bool:
        return self.reasoning is not None or self.tool_format is not None

    def splitter(self) -> ReasoningSplitter | None:
        """A reasoning splitter for one output (None without a reasoning parser)."""
        fmt = self.reasoning
        return None if fmt is None else ReasoningSplitter(fmt.start_tag, fmt.end_tag, self.inside)


@functools.lru_cache(maxsize=16)
def _formats(reasoning: str | None, tools: str | None, template: str):
    return reasoning_format(reasoning, template), tool_call_format(tools, template)


def unfit_parsers(
    reasoning_parser: str | None, tool_call_parser: str | None, chat_template: Any
) -> str | None:
    """Why the parsers the flags name cannot serve a model with `chat_template` (a named format the template
    does not have: refused at start, and when a model swap would bring such a model), or None."""
    try:
        reasoning_format(reasoning_parser, chat_template)
        tool_call_format(tool_call_parser, chat_template)
    except (UnfitReasoningParserError, UnfitToolCallParserError) as exc:
        return str(exc)
    return None


def resolve(reasoning_parser: str | None, tool_call_parser: str | None, chat_template: Any) -> OutputParsers:
    """The parsers the flags name for a model with `chat_template` (the start-up check has refused a named
    one the template lacks; `auto` finds one or none)."""
    found = _formats(reasoning_parser, tool_call_parser, template_text(chat_template))
    return OutputParsers(found[0], False, found[1])


def reasoned_prompt(
    parsers: OutputParsers,
    prompt: str,
    params: SamplingParams,
    token_tags: frozenset[str],
    continued: bool = False,
) -> tuple[OutputParsers, SamplingParams]:
    """With a reasoning parser: whether the output of `prompt` (the rendered template) starts inside the
    reasoning, and `params.grammar` moved after the reasoning (`after_reasoning`; `token_tags`: the tags that
    are single tokens of the model). A prompt that closed the reasoning already (thinking disabled) leaves
    the grammar on the whole output, and the output is answer unless it opens a reasoning itself. A
    `continued` prompt (its last message left open: `continue_final_message`, a prefill) is inside the
    reasoning only where that message opened one and left it open; else its output goes on with the answer."""
    fmt = parsers.reasoning
    if fmt is None:
        return parsers, params
    if continued:
        inside = prompt.rfind(fmt.start_tag) > prompt.rfind(fmt.end_tag)
        closed = not inside
    else:
        closed = prompt.rstrip().endswith(fmt.end_tag)
        inside = fmt.opens_in(prompt) and not closed
    if params.grammar is not None and not closed:
        params = replace(params, grammar=after_reasoning(params.grammar, fmt, inside, token_tags))
    return replace(parsers, inside=inside), params


def own_format_tools(parsers: OutputParsers, tools: ToolPlan | None) -> ToolPlan | None:
    """`tools` without their grammar where the model writes calls its own way (a tool-call parser and
    `tool_choice: auto`): its output is read back as it wrote it instead of being forced into ours."""
    if parsers.tool_format is not None and tools is not None and tools.choice == "auto":
        return replace(tools, grammar=None)
    return tools


async def render_prompt(
    service: InferenceService,
    messages: list[dict],
    template_kwargs: dict,
    parsers: OutputParsers,
    params: SamplingParams,
) -> tuple[list[int], tuple[ImageInput, ...], OutputParsers, SamplingParams]:
    """A chat prompt's token ids and images, for every API's chat-shaped route: the chat template applied
    to `messages`, whose image parts (`tgi.server.images.sources.image_part`) are fetched, checked and
    expanded by the model's processor (refused by name, before templating, for a model that takes no
    images); with a reasoning parser, where the output starts (inside the reasoning or not, read from the
    prompt's text) and the request's grammar moved after the reasoning (`reasoned_prompt`)."""
    shown, refs = split_images(messages)
    if not refs and parsers.reasoning is None:
        return await service.render_chat(shown, **template_kwargs), (), parsers, params
    if refs:
        service.image_token(refs)  # a model that takes no images refuses them before any templating
    text = await service.template_text(shown, **template_kwargs)
    if refs:
        ids, images = await service.encode_with_images(text, refs, add_special_tokens=False)
    else:
        ids, images = await service.encode(text, add_special_tokens=False), ()
    continued = bool(template_kwargs.get("continue_final_message"))
    parsers, params = await reasoning_of(service, text, parsers, params, continued)
    return ids, images, parsers, params


async def reasoning_of(
    service: InferenceService,
    text: str,
    parsers: OutputParsers,
    params: SamplingParams,
    continued: bool = False,
) -> tuple[OutputParsers, SamplingParams]:
    """`reasoned_prompt` for the rendered prompt `text` (the reasoning tags' token counts taken from the
    model's tokenizer); `parsers` and `params` unchanged without a reasoning parser."""
    if parsers.reasoning is None:
        return parsers, params
    tags = (parsers.reasoning.start_tag, parsers.reasoning.end_tag)
    single = frozenset([t for t in tags if len(await service.encode(t, add_special_tokens=False)) == 1])
    return reasoned_prompt(parsers, text, params, single, continued)
