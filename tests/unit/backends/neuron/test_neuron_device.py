"""`OptimumNeuronModel`, the real seam's adapter, against a stand-in for optimum-neuron's causal LM that
records the calls (optimum-neuron itself cannot be installed beside core's transformers): the inputs it
builds for a slot's prefill and for a decode over several slots, and its refusal of on-device sampling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tgi.backends.neuron.device import CompileSpec, OptimumNeuronModel
from tgi.core.interfaces import UnsupportedError

SPEC = CompileSpec(4, 64, 2, "bf16")


class StandIn:
    def __init__(self, on_device_sampling=False):
        self.neuron_config = SimpleNamespace(on_device_sampling=on_device_sampling)
        self.calls = []

    def prepare_inputs_for_prefill(self, input_ids, attention_mask=None, seq_ids=None):
        self.calls.append(("prefill", input_ids, attention_mask, seq_ids))
        return {"input_ids": input_ids, "attention_mask": attention_mask, "seq_ids": seq_ids}

    def prepare_inputs_for_decode(self, input_ids, attention_mask=None, seq_ids=None):
        self.calls.append(("decode", input_ids, attention_mask, seq_ids))
        return {"input_ids": input_ids, "attention_mask": attention_mask, "seq_ids": seq_ids}

    def __call__(self, input_ids, attention_mask, seq_ids):
        logits = torch.arange(input_ids.shape[0] * input_ids.shape[1] * 5, dtype=torch.bfloat16)
        return SimpleNamespace(logits=logits.view(input_ids.shape[0], input_ids.shape[1], 5))


def test_prefill_and_decode_inputs():
    model = StandIn()
    adapter = OptimumNeuronModel(model, SPEC)
    logits = adapter.prefill(torch.tensor([[5, 6, 7]]), slot=2)
    assert logits.dtype == torch.float32 and logits.shape == (1, 5) and logits[0, 0] == 10  # last position
    _, ids, mask, seq_ids = model.calls[0]
    assert ids.tolist() == [[5, 6, 7]] and mask.tolist() == [[1, 1, 1]] and seq_ids.tolist() == [2]
    adapter.decode(torch.tensor([[8], [9]]), positions=torch.tensor([3, 1]), slots=torch.tensor([2, 0]))
    _, ids, mask, seq_ids = model.calls[1]
    # each slot attends its cached tokens and the new one: 4 for slot 2 (3 cached), 2 for slot 0
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]] and seq_ids.tolist() == [2, 0]


def test_on_device_sampling_is_refused():
    with pytest.raises(UnsupportedError, match="export it without on-device sampling"):
        OptimumNeuronModel(StandIn(on_device_sampling=True), SPEC)
