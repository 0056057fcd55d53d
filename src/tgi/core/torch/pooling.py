"""A step's pooled vectors: each pooling sequence's final hidden states made into one vector, as
sentence-transformers' `Pooling` module makes it (`tgi.core.interfaces.pooling.PoolingSpec`), or left one
per token for a token-embeddings request (`ScheduledSequence.token_embeddings`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.interfaces.pooling import PoolingSpec


def pool(hidden: torch.Tensor, mode: str) -> torch.Tensor:
    """hidden [L, H] of one whole prompt -> [H] float32: its first token's (cls), their mean, their
    element-wise max, or the last token's (lasttoken)."""
    hidden = hidden.float()
    if mode == "cls":
        return hidden[0]
    if mode == "mean":
        return hidden.mean(dim=0)
    if mode == "max":
        return hidden.max(dim=0).values
    if mode == "lasttoken":
        return hidden[-1]
    raise ValueError(f"unknown pooling mode {mode!r}")


def pooled_vectors(
    hidden: torch.Tensor,
    seqs: Sequence[ScheduledSequence],
    starts: list[int],
    ends: list[int],
    spec: PoolingSpec,
    model: object = None,
) -> dict[str, list[float]]:
    """request id -> pooled vector, for the sequences with `pool` (each a whole prompt: `starts[i]` ..
    `ends[i]` of the step's hidden states [T, H]); one copy back for them all. A classifier's (`spec.kind`
    "classify") are its logits: `model.classify` of the pooled states [N, H] in the model's dtype; a sparse
    embedder's (`spec.kind` "sparse"), the pooling of its tokens' `log(1 + relu(model.token_logits(states)))`
    [L, vocab]."""
    rows = _whole_prompts(seqs, tokens=False)
    if not rows:
        return {}

    def states(i: int) -> torch.Tensor:  # [L, H], or a sparse embedder's token weights [L, vocab]
        if spec.kind != "sparse":
            return hidden[starts[i] : ends[i]]
        return torch.log1p(torch.relu(model.token_logits(hidden[starts[i] : ends[i]]).float()))

    pooled = torch.stack([pool(states(i), spec.mode) for i in rows])  # [N, H] float32
    if spec.kind == "classify":
        pooled = model.classify(pooled.to(hidden.dtype)).float()  # [N, labels]
    vectors = pooled.cpu().tolist()
    return {seqs[i].request_id: v for i, v in zip(rows, vectors, strict=True)}


def token_states(
    hidden: torch.Tensor, seqs: Sequence[ScheduledSequence], starts: list[int], ends: list[int]
) -> dict[str, list[list[float]]]:
    """request id -> the final hidden state of each token of its prompt ([L][H] float32), for the sequences
    with `pool` and `token_embeddings` (each a whole prompt: `starts[i]` .. `ends[i]` of the step's hidden
    states [T, H]); one copy back for them all."""
    rows = _whole_prompts(seqs, tokens=True)
    if not rows:
        return {}
    states = torch.cat([hidden[starts[i] : ends[i]] for i in rows]).float().cpu()  # [sum L, H]
    out, at = {}, 0
    for i in rows:
        n = ends[i] - starts[i]
        out[seqs[i].request_id] = states[at : at + n].tolist()
        at += n
    return out


def _whole_prompts(seqs: Sequence[ScheduledSequence], tokens: bool) -> list[int]:
    """The rows to pool (`tokens`: those asking for token embeddings; else the others), each checked to
    be a whole prompt."""
    rows = [i for i, s in enumerate(seqs) if s.pool and s.token_embeddings == tokens]
    for i in rows:
        if seqs[i].start_pos != 0:
            raise ValueError(f"{seqs[i].request_id}: a pooled prompt must come in one chunk from position 0")
    return rows
