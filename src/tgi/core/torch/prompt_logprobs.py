"""The prompt tokens' logprobs of one prefill chunk, as `StepOutput` carries them: each token's logprob and,
for vLLM's `prompt_logprobs=k` (`SamplingParams.prompt_top_n_tokens`), its rank and its position's top k."""

from __future__ import annotations

import torch

from tgi.core.interfaces.batch import ScheduledSequence, StepOutput


def prompt_positions(seq: ScheduledSequence) -> tuple[int, int]:
    """The prompt positions whose tokens this chunk scores: start_pos+1 .. min(start_pos+len, num_prompt-1)
    (empty when last < first); the chunk's row p - first + 0 predicts position p."""
    return seq.start_pos + 1, min(seq.start_pos + len(seq.token_ids), seq.num_prompt_tokens - 1)


def add_prompt_logprobs(output: StepOutput, seq: ScheduledSequence, logits: torch.Tensor | None) -> None:
    """Fill `output`'s prompt logprobs of `seq` from `logits` ([N, V]: row j predicts the prompt token at
    `prompt_positions(seq)[0] + j`; None when the chunk scores none), with ranks and top tokens when the request
    asks for them."""
    first, last = prompt_positions(seq)
    rid = seq.request_id
    top_n = seq.sampling.prompt_top_n_tokens
    if logits is None or last < first:
        output.prompt_logprobs[rid] = []
        if top_n is not None:
            output.prompt_ranks[rid], output.prompt_top_token_ids[rid], output.prompt_top_logprobs[rid] = (
                [],
                [],
                [],
            )
        return
    targets = torch.tensor(seq.all_token_ids[first : last + 1], device=logits.device)
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    chosen = logprobs.gather(1, targets[:, None])  # [N, 1]
    output.prompt_logprobs[rid] = chosen.squeeze(1).tolist()
    if top_n is None:
        return
    # rank: 1 + the tokens strictly more likely (ties share the better rank, as vLLM counts them)
    output.prompt_ranks[rid] = ((logprobs > chosen).sum(dim=1) + 1).tolist()
    top = torch.topk(logprobs, min(top_n, logprobs.shape[1]), dim=1)  # sorted, most likely first
    output.prompt_top_token_ids[rid] = top.indices.tolist()
    output.prompt_top_logprobs[rid] = top.values.tolist()
