"""A recording fake of the neuron backend's seam (`tgi.backends.neuron.device.NeuronDevice`): "compiles" by
recording the arguments and loading the checkpoint into transformers on the CPU; the compiled model keeps
each slot's tokens and recomputes its logits with transformers (the CPU does the arithmetic), and checks
every call against the static shapes it was compiled for. Used by tests/unit/test_neuron_*.py."""

from __future__ import annotations

import torch

from tgi.backends.neuron.device import CompileSpec, NeuronDevice, NeuronModel


class FakeNeuronModel(NeuronModel):
    def __init__(self, path: str, spec: CompileSpec, log: list) -> None:
        from transformers import AutoModelForCausalLM

        self.spec, self.log = spec, log
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        self.slots: list[list[int] | None] = [None] * spec.batch_size  # each slot's cached tokens

    @torch.inference_mode()
    def _logits(self, tokens: list[int]) -> torch.Tensor:
        return self.model(torch.tensor([tokens])).logits[:, -1, :].float()

    def prefill(self, input_ids, slot):
        assert input_ids.shape[0] == 1 and 0 < input_ids.shape[1] <= self.spec.sequence_length, (
            input_ids.shape
        )
        assert 0 <= slot < self.spec.batch_size, slot
        self.log.append(("prefill", slot, input_ids.shape[1]))
        self.slots[slot] = input_ids[0].tolist()
        return self._logits(self.slots[slot])

    def decode(self, input_ids, positions, slots):
        d = input_ids.shape[0]
        assert (
            input_ids.shape == (d, 1) and positions.shape == slots.shape == (d,) and d <= self.spec.batch_size
        )
        assert len(set(slots.tolist())) == d, "a slot decoded twice in one step"
        self.log.append(("decode", tuple(slots.tolist())))
        out = []
        for token, pos, slot in zip(
            input_ids[:, 0].tolist(), positions.tolist(), slots.tolist(), strict=True
        ):
            cached = self.slots[slot]
            assert cached is not None and pos == len(cached), (
                f"slot {slot} holds {cached and len(cached)} tokens, fed at {pos}"
            )
            assert pos < self.spec.sequence_length, "past the compiled sequence length"
            cached.append(token)
            out.append(self._logits(cached))
        return torch.cat(out)


class FakeNeuronDevice(NeuronDevice):
    def __init__(self) -> None:
        self.compiled: list[tuple[str, CompileSpec]] = []  # export(...) arguments
        self.loaded: list[tuple[str, CompileSpec]] = []  # load(...) arguments
        self.log: list = []  # the compiled models' calls: ("prefill", slot, n) and ("decode", slots)

    def device_name(self) -> str:
        return "Fake NeuronCores (CPU arithmetic)"

    def export(self, model_path, spec):
        self.compiled.append((model_path, spec))
        return FakeNeuronModel(model_path, spec, self.log)

    def load(self, folder, spec):
        self.loaded.append((folder, spec))
        return FakeNeuronModel(folder, spec, self.log)
