"""Logits processors in core's sampler: each row's selection applied in its order, with its arguments and
its token history, one call per processor and round; and the batched path's other steps run only when a
row of the batch uses them."""

from __future__ import annotations

import pytest
import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.plugins.logits_processors import LogitsProcessorRegistry
from tgi.core.sampling.logits_processor import LogitsProcessor, ProcessorRow
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import LogitsProcessorChoice, SamplingParams
from tgi.core.torch.testing.logits_processors import register_testing_processors

V = 12
BAN = "tgi-testing-ban"
BOOST = "tgi-testing-boost-last"


class Recording(LogitsProcessor):
    """Sets the logit of the row's `args["token"]` to 100 and records what each call was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[ProcessorRow]]] = []

    def apply(self, logits, rows):
        self.calls.append((logits.shape[0], list(rows)))
        for i, r in enumerate(rows):
            logits[i, r.args["token"]] = 100.0
        return logits


class WrongShape(LogitsProcessor):
    def apply(self, logits, rows):
        return logits[:, :-1]


def registry(**extra) -> LogitsProcessorRegistry:
    reg = register_testing_processors(LogitsProcessorRegistry(autoload=False))
    for name, processor in extra.items():
        reg.register(name, processor)
    return reg


def row(*choices: LogitsProcessorChoice, output=(4,), seed=0, **kw) -> ScheduledSequence:
    tokens = [1, 2, *output]
    params = SamplingParams(logits_processors=choices, **kw)
    return ScheduledSequence(
        f"r{seed}", [tokens[-1]], len(tokens) - 1, [0], False, True, params, seed, 2, tokens
    )


def test_a_row_applies_its_processors_in_its_order():
    logits = torch.zeros(2, V)
    logits[:, 3] = 2.0
    ban_4 = LogitsProcessorChoice(BAN, {"token_ids": [4]})
    boost = LogitsProcessorChoice(BOOST, {"amount": 5.0})  # the last token, 4, gains 5
    out = TorchSampler(processors=registry()).sample(logits, [row(ban_4, boost), row(boost, ban_4)])
    assert out.token_ids.tolist() == [3, 3]  # banned after the boost: -inf either way
    out = TorchSampler(processors=registry()).sample(logits[:1].clone(), [row(boost)])
    assert out.token_ids.tolist() == [4]
    assert float(out.logprobs[0]) == pytest.approx(
        float(torch.tensor([0.0] * 3 + [2.0, 5.0] + [0.0] * 7).log_softmax(0)[4])
    )


def test_one_call_per_processor_and_round_with_each_rows_history_and_arguments():
    rec = Recording()
    rows = [
        row(LogitsProcessorChoice("rec", {"token": 7}), output=(5,), seed=0),
        row(seed=1),
        row(LogitsProcessorChoice(BOOST), LogitsProcessorChoice("rec", {"token": 8}), output=(5, 6), seed=2),
        row(LogitsProcessorChoice("rec", {"token": 9}), do_sample=True, seed=3),
    ]
    out = TorchSampler(processors=registry(rec=rec)).sample(torch.zeros(4, V), rows)
    assert out.token_ids.tolist() == [7, 0, 8, 9]
    assert [n for n, _ in rec.calls] == [2, 1]  # round 0: rows 0 and 3; round 1: row 2
    first = rec.calls[0][1][0]
    assert list(first.prompt_token_ids) == [1, 2] and list(first.output_token_ids) == [5]
    assert rec.calls[1][1][0].args == {"token": 8}


def test_a_processor_that_returns_another_shape_is_named():
    with pytest.raises(RuntimeError, match="'bad' returned"):
        TorchSampler(processors=registry(bad=WrongShape())).sample(
            torch.zeros(1, V), [row(LogitsProcessorChoice("bad"))]
        )


def test_the_greedy_kernel_serves_a_batch_that_uses_none_of_the_steps():
    calls = []

    def kernel(logits):
        calls.append(logits.shape[0])
        return logits.argmax(1), torch.zeros(logits.shape[0])

    sampler = TorchSampler(greedy_kernel=kernel, processors=registry())
    sampler.sample(
        torch.zeros(2, V), [row(seed=0), row(seed=1, min_p=0.5, top_n_sigma=1.0, xtc_probability=1.0)]
    )
    assert calls == [2]  # min-p, top-n-sigma and XTC are for sampled rows: greedy rows need none
    for kw in (
        {"bad_words_ids": ((3,),)},
        {"allowed_token_ids": (3,)},
        {"dry_multiplier": 0.5},
    ):
        sampler.sample(torch.zeros(2, V), [row(seed=0), row(seed=1, **kw)])
    sampler.sample(torch.zeros(2, V), [row(seed=0), row(LogitsProcessorChoice(BOOST), seed=1)])
    assert calls == [2]
