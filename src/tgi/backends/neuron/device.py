"""`NeuronDevice`: everything the neuron backend asks of AWS Neuron's stack, in one object (the seam).

The runner compiles (or loads) a model through a `NeuronDevice` and runs it through the `NeuronModel` it
returns, so that without Neuron hardware the same runner runs with a fake (tests/fakes/fake_neuron.py: a
recording fake that computes with transformers on the CPU). `OptimumNeuronDevice` is the real one, over
`optimum.neuron.NeuronModelForCausalLM` (imported when the backend is created).

The real one follows the calls TGI's Neuron server makes (backends/neuron/server/.../generator.py there)
and optimum-neuron's NxD generation mixin (`prepare_inputs_for_prefill/decode` with keyword `seq_ids`):
`NeuronModelForCausalLM.from_pretrained(model, export=True, batch_size=, sequence_length=, num_cores=,
auto_cast_type=)` to compile, `from_pretrained(folder)` for a pre-exported model whose config.json has a
`neuron` section, then `prepare_inputs_for_prefill` / `prepare_inputs_for_decode` with `seq_ids` (the
slots) and `model(**inputs)[0]` for the logits. It was not run: no Neuron device was available, and the
optimum-neuron releases on PyPI pin an older transformers than core needs.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tgi.core.interfaces import UnsupportedError

if TYPE_CHECKING:
    import torch

#: dtype name -> optimum-neuron's auto_cast_type
AUTO_CAST_TYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class CompileSpec:
    """The static shapes and placement a model is compiled for."""

    batch_size: int  # slots: sequences decoded together
    sequence_length: int  # tokens of context per slot (prompt + generated)
    num_cores: int  # NeuronCores the compiler shards the model over (tensor parallelism)
    auto_cast_type: str  # "bf16", "fp16" or "fp32"

    @classmethod
    def from_config(cls, config_json: Path) -> CompileSpec | None:
        """The spec of a pre-exported model (its config.json's `neuron` section), None when it has none."""
        neuron = json.loads(Path(config_json).read_text()).get("neuron")
        if not neuron:
            return None
        return cls(
            int(neuron["batch_size"]), int(neuron["sequence_length"]), int(neuron.get("num_cores", 1)),
            str(neuron.get("auto_cast_type", "bf16")),
        )  # fmt: skip

    def as_dict(self) -> dict:
        return asdict(self)


class NeuronModel(ABC):
    """A model compiled for a `CompileSpec`; it keeps each slot's keys/values itself."""

    spec: CompileSpec
    num_parameters: int = 0

    @abstractmethod
    def prefill(self, input_ids: torch.Tensor, slot: int) -> torch.Tensor:
        """Encode one whole prompt [1, n] (n <= sequence_length) into `slot`'s cache, replacing what the
        slot held; returns the logits [1, vocab] (float32) after its last token."""

    @abstractmethod
    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """One token [D, 1] for each of D distinct occupied `slots` [D], at `positions` [D] (the number of
        tokens already in each slot's cache); returns logits [D, vocab] (float32)."""


class NeuronDevice(ABC):
    """Compiles and loads models for NeuronCores."""

    @abstractmethod
    def device_name(self) -> str: ...

    @abstractmethod
    def export(self, model_path: str, spec: CompileSpec) -> NeuronModel:
        """Compile the checkpoint at `model_path` for `spec` and load it (minutes on a real host)."""

    @abstractmethod
    def load(self, folder: str, spec: CompileSpec) -> NeuronModel:
        """Load a pre-exported model (config.json with a `neuron` section describing `spec`)."""


class OptimumNeuronModel(NeuronModel):
    """Keyword calls valid for both generations of optimum-neuron's causal LMs (transformers-neuronx based:
    `prepare_inputs_for_*(input_ids, attention_mask, seq_ids)`; NxD based: the same names with
    `position_ids` and `sampling_params` too), logits taken from `.logits` or the first output."""

    def __init__(self, model, spec: CompileSpec) -> None:
        neuron_config = getattr(model, "neuron_config", None)
        if getattr(neuron_config, "on_device_sampling", False):
            raise UnsupportedError(
                "this Neuron model samples on the device: export it without on-device sampling (tgi samples "
                "on the host, where every sampling parameter and grammar masks apply)"
            )
        self.model, self.spec = model, spec

    @staticmethod
    def _logits(out) -> torch.Tensor:
        logits = out.logits if hasattr(out, "logits") else out[0]
        return logits[:, -1, :].float()

    def prefill(self, input_ids, slot):
        import torch

        mask = torch.ones_like(input_ids)
        inputs = self.model.prepare_inputs_for_prefill(
            input_ids, attention_mask=mask, seq_ids=torch.tensor([slot])
        )
        return self._logits(self.model(**inputs))

    def decode(self, input_ids, positions, slots):
        import torch

        width = int(positions.max()) + 1  # each slot attends its cached tokens and the new one
        mask = (torch.arange(width)[None, :] <= positions[:, None]).to(torch.int64)
        inputs = self.model.prepare_inputs_for_decode(input_ids, attention_mask=mask, seq_ids=slots)
        return self._logits(self.model(**inputs))


class OptimumNeuronDevice(NeuronDevice):
    """`NeuronDevice` over optimum-neuron (and, under it, torch-neuronx and the Neuron runtime)."""

    def __init__(self) -> None:
        from optimum.neuron import NeuronModelForCausalLM

        self._cls = NeuronModelForCausalLM

    def device_name(self) -> str:
        return "AWS NeuronCores (optimum-neuron)"

    def export(self, model_path, spec):
        model = self._cls.from_pretrained(model_path, export=True, **spec.as_dict())
        return OptimumNeuronModel(model, spec)

    def load(self, folder, spec):
        return OptimumNeuronModel(self._cls.from_pretrained(folder), spec)
