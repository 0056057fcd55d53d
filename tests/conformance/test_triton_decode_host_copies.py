"""Host<->device traffic of a decode step, counted on CPU tensors through the code a GPU runs (the CUDA
backend's runner, its Triton kernels interpreted): every host->device copy goes through
`tgi.core.torch.host_transfer.to_device` (pinned, non_blocking off the CPU) and the step reads the
device once (`to_host`: one `.tolist()`), so that the host never waits for the GPU before the sampled ids."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

import transformers
from interpreted_cuda import InterpretedCudaBackend
from torch.overrides import TorchFunctionMode

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.models import context
from tgi.core.sampling import processors, sampler
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import VOCAB_SIZE, backend_registry
from tgi.core.testing.tiny_models import save_random_checkpoint
from tgi.core.torch import host_transfer, pending_tokens
from tgi.core.torch import runner as torch_runner

#: what makes the host wait for the device (a read of a device value, or a copy to the host)
_HOST_READS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.__bool__,
    torch.Tensor.__int__, torch.Tensor.__float__,
}  # fmt: skip


class HostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_READS or (func is torch.Tensor.to and "cpu" in map(str, args[1:])):
            self.reads.append(func.__name__)
        return func(*args, **kwargs)


class TransferCounter:
    """Counts `to_device` and `to_host` calls where the runner, the metadata builder and the sampler
    call them."""

    def __init__(self, monkeypatch) -> None:
        self.to_device = self.to_host = 0

        def to_device(values, dtype, device):
            self.to_device += 1
            return host_transfer.to_device(values, dtype, device)

        def start_to_host(*tensors):
            self.to_host += 1
            return host_transfer.start_to_host(*tensors)

        for module in (torch_runner, context, sampler, processors, pending_tokens):
            monkeypatch.setattr(module, "to_device", to_device)
        monkeypatch.setattr(torch_runner, "start_to_host", start_to_host)


def _engine(tmp_path, async_scheduling: bool) -> LLMEngine:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    config = EngineConfig(
        model_id=str(save_random_checkpoint(tmp_path / "llama", cfg, init_std=0.08)), backend="cuda-interpreted",
        dtype="float32", block_size=4, max_total_tokens=32, max_batch_total_tokens=128,
        max_batch_prefill_tokens=16, max_num_seqs=2, async_scheduling=async_scheduling,
    )  # fmt: skip
    return LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", InterpretedCudaBackend)
    )


def _generate(engine: LLMEngine) -> None:
    greedy = SamplingParams(max_new_tokens=4, ignore_eos=True)
    sampled = SamplingParams(max_new_tokens=4, ignore_eos=True, do_sample=True, top_k=5, top_p=0.9, seed=3)
    engine.generate([[3, 4, 5]], greedy)
    engine.generate([[3, 4, 5], [6, 7]], sampled)


def test_a_decode_step_copies_through_the_helper_and_waits_once(tmp_path, monkeypatch):
    engine = _engine(tmp_path, async_scheduling=False)
    assert not engine.steps.overlapping
    runner = engine.runner
    execute = runner.execute
    steps = []

    def counted(batch):
        if any(s.is_prefill for s in batch.sequences):
            return execute(batch)
        counter, reads = TransferCounter(monkeypatch), HostReads()
        with reads:
            out = execute(batch)
        steps.append((counter.to_device, counter.to_host, reads.reads))
        return out

    runner.execute = counted
    _generate(engine)
    assert len(steps) == 6
    # runner: input ids, positions, the int32 metadata (one copy), the slot mapping, the sampled rows;
    # a seeded top-k/top-p batch adds its per-row parameters (do_sample, top-k, top-p, seeds, steps)
    assert [s[0] for s in steps] == [5, 5, 5, 10, 10, 10]
    assert all(s[1] == 1 for s in steps)  # the sampled ids, logprobs (and top tokens) read back together
    assert all(s[2] == ["tolist"] for s in steps), steps  # the one wait for the device


def test_an_overlapped_decode_step_starts_without_waiting_and_is_read_once(tmp_path, monkeypatch):
    """With `--async-scheduling`: starting a decode (its token still on the device) reads nothing of the
    device; the one wait is the handle's `result()`, a step later."""
    engine = _engine(tmp_path, async_scheduling=True)
    assert engine.steps.overlapping
    runner = engine.runner
    execute_async = runner.execute_async
    starts, results = [], []

    def counted(batch):
        if any(s.is_prefill for s in batch.sequences):
            return execute_async(batch)
        counter, reads = TransferCounter(monkeypatch), HostReads()
        with reads:
            handle = execute_async(batch)
        starts.append((counter.to_device, counter.to_host, reads.reads))
        result = handle.result

        def counted_result():
            reads = HostReads()
            with reads:
                out = result()
            results.append(reads.reads)
            return out

        handle.result = counted_result
        return handle

    runner.execute_async = counted
    _generate(engine)
    assert len(starts) == len(results) == 6 and engine.steps.num_overlapped > 0
    # as a waited step, and one copy more: where the pending tokens go and which sampled rows they are
    assert [s[0] for s in starts] == [6, 6, 6, 11, 11, 11]
    assert all(s[1] == 1 for s in starts)  # the copy back is queued when the step starts...
    assert all(s[2] == [] for s in starts), starts  # ...and nothing waits for the device then
    assert all(r == ["tolist"] for r in results), results  # the one wait, when the step is settled
