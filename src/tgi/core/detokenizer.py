"""Incremental detokenization for streaming: emit only complete text, with the right spaces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# How many tokens before the first output token are decoded as context (spaces of SentencePiece / BPE).
_CONTEXT_TOKENS = 5
_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Turns one sequence's generated tokens into text chunks, as TGI's / vLLM's `decode_token`.

    Two offsets into the token list: `prefix_offset` .. `read_offset` is context already emitted, and
    `read_offset` .. end is pending. Each `add` decodes the context window with and without the pending
    tokens and emits the difference, unless the result ends in U+FFFD (a multi-byte character split over
    byte-fallback / byte-level tokens): then nothing is emitted until a later token completes it. Decoding
    with context tokens gives SentencePiece and BPE tokenizers their leading spaces.

    The concatenation of the returned chunks (`.text`) equals the decode of the output tokens (given the
    prompt as context); call `flush()` at the end to release text held back for an incomplete character.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # vLLM's `spaces_between_special_tokens=False` on its fast tokenizers' path: an added token right after
        # another is its own content, without the space the tokenizer's decoder may put before it (only
        # where added tokens show: with skipped special tokens it changes nothing, as in vLLM)
        self._added: dict[int, str] = {}
        if not (skip_special_tokens or spaces_between_special_tokens):
            added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
            self._added = {int(i): getattr(t, "content", str(t)) for i, t in added.items()}
        self._last_added = False
        # Only the tail of the prompt is ever decoded: keep just that.
        self._ids: list[int] = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._chunks: list[str] = []
        self._num_generated = 0
        self._token_text_cache: dict[int, str] = {}

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=self.skip_special_tokens, clean_up_tokenization_spaces=False
        )

    def add(self, token_id: int) -> str:
        """Append a generated token; return the new complete text it makes available (may be "")."""
        self._ids.append(int(token_id))
        self._num_generated += 1
        after_added, self._last_added = self._last_added, int(token_id) in self._added
        if after_added and self._last_added and self._read_offset == len(self._ids) - 1:
            return self._emit(self._added[int(token_id)])  # two added tokens in a row: no space between
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith(_REPLACEMENT):
            return self._emit(new_text[len(prefix_text) :])
        return ""

    def _emit(self, chunk: str) -> str:
        # The just-read tokens become the next context; older ones are dropped so the list stays short.
        del self._ids[: self._read_offset]
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._chunks.append(chunk)
        return chunk

    def flush(self) -> str:
        """At the end of the sequence: whatever is still held back (an incomplete character decodes with
        U+FFFD, as a full decode would show it). Returns "" when nothing is pending."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        chunk = new_text[len(prefix_text) :] if len(new_text) > len(prefix_text) else ""
        self._prefix_offset = self._read_offset = len(self._ids)
        if chunk:
            self._chunks.append(chunk)
        return chunk

    def token_text(self, token_id: int) -> str:
        """The token's own text (TGI `token.text`): decoded alone, special tokens included."""
        text = self._token_text_cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode(
                [int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            self._token_text_cache[token_id] = text
        return text

    @property
    def text(self) -> str:
        """All text emitted so far."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def num_generated(self) -> int:
        return self._num_generated
