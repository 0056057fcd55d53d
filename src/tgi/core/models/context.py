"""What a model's forward needs besides token ids and positions: the attention backend, the KV cache and the
step's attention metadata. Also a builder of `AttentionMetadata` from plain per-sequence lists (its tensors
reach the device in two copies that do not make the host wait: `tgi.core.torch.host_transfer`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tgi.core.torch.attention import AttentionBackend, AttentionMetadata
from tgi.core.torch.host_transfer import to_device
from tgi.core.torch.kv_cache import KVCache


@dataclass
class AttentionContext:
    """Bundles what every attention layer of one forward step uses."""

    backend: AttentionBackend
    kv_cache: KVCache
    meta: AttentionMetadata


@dataclass(frozen=True)
class SeqChunk:
    """One sequence's share of a step (the fields of `ScheduledSequence` the metadata needs)."""

    start_pos: int  # tokens already in the KV cache
    num_tokens: int  # tokens fed this step (1 for a decode)
    block_table: Sequence[int]  # physical blocks covering start_pos + num_tokens tokens
    is_prefill: bool = True


def _num_tokens(seq: Any) -> int:
    n = getattr(seq, "num_tokens", None)
    return len(seq.token_ids) if n is None else int(n)


def _pad(rows: list[Sequence[int]]) -> list[list[int]]:
    width = max((len(r) for r in rows), default=0)
    return [[*r, *([0] * (width - len(r)))] for r in rows]


def build_attention_metadata(
    seqs: Sequence[Any], block_size: int, device: torch.device | str | None = None
) -> AttentionMetadata:
    """Metadata for a step of `seqs` (prefill chunks first, then decodes). Each item needs `start_pos`,
    `block_table`, `is_prefill` and `num_tokens` (or `token_ids`): a `SeqChunk` or a `ScheduledSequence`."""
    slots: list[int] = []
    qsl = [0]
    p_start: list[int] = []
    p_lens: list[int] = []
    p_tables: list[Sequence[int]] = []
    d_lens: list[int] = []
    d_tables: list[Sequence[int]] = []
    seen_decode = False
    for seq in seqs:
        n = _num_tokens(seq)
        start = int(seq.start_pos)
        table = list(seq.block_table)
        end = start + n
        if len(table) * block_size < end:
            raise ValueError(f"block table of {len(table)} blocks cannot hold {end} tokens")
        slots.extend(table[pos // block_size] * block_size + pos % block_size for pos in range(start, end))
        if seq.is_prefill:
            if seen_decode:
                raise ValueError("prefill chunks must come before decode tokens")
            qsl.append(qsl[-1] + n)
            p_start.append(start)
            p_lens.append(end)
            p_tables.append(table)
        else:
            if n != 1 + getattr(seq, "num_draft_tokens", 0):
                raise ValueError(f"a decode feeds its last token and its guesses, got {n} tokens")
            seen_decode = True
            # each token (the last one, then each guess) is a decode query of its own, attending to the
            # positions up to its own: the keys of all of them are written before attention reads
            for pos in range(start, end):
                d_lens.append(pos + 1)
                d_tables.append(table)

    # the int32 tensors travel in one host->device copy and are views of it; the int64 slots in another
    p_padded, d_padded = _pad(p_tables), _pad(d_tables)
    p_width = len(p_padded[0]) if p_padded else 0
    d_width = len(d_padded[0]) if d_padded else 0
    parts = [qsl, p_lens, [b for r in p_padded for b in r], d_lens, [b for r in d_padded for b in r]]
    packed = to_device([v for part in parts for v in part], torch.int32, device)
    views, at = [], 0
    for part in parts:
        views.append(packed[at : at + len(part)])
        at += len(part)
    q_loc, p_seq, p_tab, d_seq, d_tab = views
    return AttentionMetadata(
        slot_mapping=to_device(slots, torch.int64, device),
        num_prefill_tokens=qsl[-1],
        num_decode_tokens=len(d_lens),
        query_start_loc=q_loc,
        prefill_seq_lens=p_seq,
        prefill_block_tables=p_tab.view(len(p_padded), p_width),
        max_query_len=max((b - a for a, b in itertools.pairwise(qsl)), default=0),
        max_prefill_seq_len=max(p_lens, default=0),
        decode_seq_lens=d_seq,
        decode_block_tables=d_tab.view(len(d_padded), d_width),
        max_decode_seq_len=max(d_lens, default=0),
        prefill_start_pos=p_start,
        prefill_seq_lens_host=p_lens,
        decode_seq_lens_host=d_lens,
    )


def image_spans(seqs: Sequence[Any]) -> list[list[tuple[int, int]]]:
    """Per prefill chunk of `seqs` (`ScheduledSequence`s), the position runs of the images it feeds, for
    `AttentionMetadata.prefill_bidirectional_spans`; `ValueError` for an image the chunk feeds only part of
    (the scheduler keeps images whole where the runner says `RunnerConstraints.atomic_images`)."""
    spans: list[list[tuple[int, int]]] = []
    for seq in seqs:
        if not seq.is_prefill:
            continue
        first, last = seq.start_pos, seq.start_pos + _num_tokens(seq)
        runs = []
        for image in seq.images:
            lo, hi = image.offset, image.offset + image.num_tokens
            if max(first, lo) >= min(last, hi):
                continue
            if lo < first or hi > last:
                raise ValueError(
                    f"request {seq.request_id}: a prefill chunk [{first}, {last}) feeds part of the image "
                    f"at [{lo}, {hi}), whose tokens must attend to each other both ways"
                )
            runs.append((lo, hi))
        spans.append(runs)
    return spans


def build_positions(seqs: Sequence[Any], device: torch.device | str | None = None) -> torch.Tensor:
    """[T] int64 positions of the step's tokens, in the same order as the metadata's token axis."""
    pos: list[int] = []
    for seq in seqs:
        start = int(seq.start_pos)
        pos.extend(range(start, start + _num_tokens(seq)))
    return to_device(pos, torch.int64, device)


def token_seq_lens(meta: AttentionMetadata, num_tokens: int) -> torch.Tensor:
    """[num_tokens] int64: for each token of the step, the length of its sequence at the end of the step
    (0 for padding tokens past the prefill and decode tokens)."""
    device = meta.slot_mapping.device
    q_lens = (meta.query_start_loc[1:] - meta.query_start_loc[:-1]).to(torch.int64)
    # output_size: the length known on the host, so the device is never asked for sum(q_lens) (a sync)
    prefill = torch.repeat_interleave(
        meta.prefill_seq_lens.to(torch.int64), q_lens, output_size=meta.num_prefill_tokens
    )
    out = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    n = meta.num_prefill_tokens
    out[:n] = prefill
    out[n : n + meta.num_decode_tokens] = meta.decode_seq_lens.to(torch.int64)
    return out
