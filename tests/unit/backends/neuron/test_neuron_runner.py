"""The neuron backend on this CPU-only machine, through its seam: `NeuronBackend` with a recording fake
`NeuronDevice` (tests/fakes/fake_neuron.py) whose compiled model computes with transformers on the CPU and checks
every call against its static batch and sequence length.

Checked through a real engine: the runner-level conformance suite (greedy tokens equal transformers',
preemption, cancellation, grammar masks, every batch within the declared constraints); tokens equal the CPU
backend's; compile arguments; a request's prefill slot is the slot of its decodes, one slot prefilled while
the others keep decoding, slots freed by finishes and cancellations reused; a pre-exported model loaded as
exported, its limits enforced.
"""

from __future__ import annotations

import json
import shutil

import pytest
from fake_neuron import FakeNeuronDevice

from tgi.backends.neuron.backend import NeuronBackend
from tgi.backends.neuron.device import CompileSpec
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing import RunnerConformance
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama


def make_backend() -> NeuronBackend:
    return NeuronBackend(device=FakeNeuronDevice())


class TestNeuronConformance(RunnerConformance):
    generation_dtype = "float32"
    max_batch_prefill_tokens = 64  # whole prompts: the longest (45 tokens) in one step

    def make_backend(self):
        return make_backend()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("neuron-tiny"))


def _engine(path, backend, **kw):
    settings = dict(
        model_id=str(path), backend=backend.name, dtype="float32", max_total_tokens=96,
        max_batch_total_tokens=1024, max_batch_prefill_tokens=64, max_num_seqs=3,
    )  # fmt: skip
    config = EngineConfig(**{**settings, **kw})
    return LLMEngine.from_config(config, registry=backend_registry(backend.name, lambda: backend))


def test_tokens_equal_the_cpu_backend(tiny_llama):
    """Four requests over three slots (one waits for a slot), greedy, against the CPU backend's engine."""
    from tgi.backends.cpu.backend import CpuBackend

    prompts = [list(p) for p in PROMPTS] + [[9, 8, 7, 6]]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    neuron = _engine(tiny_llama, make_backend()).generate(prompts, params)
    cpu = _engine(tiny_llama, CpuBackend()).generate(prompts, params)
    assert [r.token_ids for r in neuron] == [r.token_ids for r in cpu]


def test_compiled_at_start_for_the_engine_limits(tiny_llama):
    backend = make_backend()
    engine = _engine(tiny_llama, backend, num_shard=2)
    [(path, spec)] = backend.device.compiled
    assert path == str(tiny_llama) and spec == CompileSpec(3, 96, 2, "fp32")
    c = engine.runner.constraints()
    assert (c.max_batch_size, c.static_batch_size, c.chunked_prefill, c.mixed_batches) == (
        3,
        True,
        False,
        False,
    )
    assert engine.model_info.max_position_embeddings == 96 and engine.scheduler.max_num_seqs == 3


def test_slots_under_joins_finishes_and_cancellations(tiny_llama):
    backend = make_backend()
    log = backend.device.log
    engine = _engine(tiny_llama, backend)
    log.clear()  # warm-up's calls
    tokens = {}
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    first = [engine.add_request(list(p), params) for p in PROMPTS]  # fills the 3 slots
    late = engine.add_request([9, 8, 7, 6], params)  # waits for a slot
    cancelled = None
    while engine.has_unfinished():
        events = engine.step()
        for e in events:
            tokens.setdefault(e.request_id, []).append(e.token_id)
        if cancelled is None and len(tokens.get(first[1], [])) == 2:
            cancelled = first[1]
            engine.abort(cancelled)  # its slot goes to the waiting request
    # (slot, prompt length) of each prefill: 45 and 7 tokens fill slots 0 and 1 (the 19-token prompt does
    # not fit the 64-token step); after the cancellation the 19-token one takes the freed slot 1, the late
    # one slot 2
    prefills = [(entry[1], entry[2]) for entry in log if entry[0] == "prefill"]
    assert prefills == [(0, 45), (1, 7), (1, 19), (2, 4)]
    # every decode step ran distinct occupied slots (the fake checks each slot's cached length), and slot
    # 0 kept decoding its request across the other slots' prefills
    decodes = [entry[1] for entry in log if entry[0] == "decode"]
    assert all(len(d) <= 3 for d in decodes) and (0, 1, 2) in decodes
    last_prefill = max(i for i, entry in enumerate(log) if entry[0] == "prefill")
    assert any(e[0] == "decode" and 0 in e[1] for e in log[:last_prefill])
    assert any(e[0] == "decode" and 0 in e[1] for e in log[last_prefill:])
    assert len(tokens[cancelled]) == 2 and len(tokens[late]) == 6
    # finished requests give their slots back with the next step the runner runs (freed_request_ids)
    after = engine.add_request([4, 5], params)
    engine.step()
    assert engine.runner.slots.occupied() == {after: 0}
    engine.runner.slots.check_invariants()


def test_a_pre_exported_model_runs_as_exported(tiny_llama, tmp_path):
    folder = tmp_path / "exported"
    shutil.copytree(tiny_llama, folder)
    config = json.loads((folder / "config.json").read_text())
    config["neuron"] = {"batch_size": 2, "sequence_length": 64, "num_cores": 1, "auto_cast_type": "fp32"}
    (folder / "config.json").write_text(json.dumps(config))
    backend = make_backend()
    engine = _engine(folder, backend, max_total_tokens=None, max_num_seqs=8)
    assert (
        backend.device.loaded == [(str(folder), CompileSpec(2, 64, 1, "fp32"))]
        and not backend.device.compiled
    )
    assert engine.scheduler.max_num_seqs == 2 and engine.config.max_total_tokens == 64
    results = engine.generate(
        [list(p) for p in PROMPTS[1:]], SamplingParams(max_new_tokens=4, ignore_eos=True)
    )
    assert [len(r.token_ids) for r in results] == [4, 4]
    with pytest.raises(ConfigError, match="exceeds the model's context length"):
        _engine(folder, make_backend(), max_total_tokens=96)
    with pytest.raises(ConfigError, match="compiled for float32; pass --dtype float32"):
        _engine(folder, make_backend(), max_total_tokens=None, dtype="bfloat16")


def test_prompt_logprobs_are_refused_by_name(tiny_llama):
    from tgi.core.request import ValidationError

    engine = _engine(tiny_llama, make_backend())
    with pytest.raises(ValidationError, match="the neuron backend cannot return prompt logprobs"):
        engine.add_request([5, 6, 7], SamplingParams(max_new_tokens=2, prompt_logprobs=True))
