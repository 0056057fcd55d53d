"""The Triton LoRA kernels (CUDA/ROCm): a batch mixing adapters, tokens without one and padding rows gets
the deltas of core's torch reference (`TorchLoRAOps`). On the GPU where one is visible (the kernels
compiled), else on CPU tensors in triton's interpreter (`TRITON_INTERPRET=1`, set by tests/conftest.py
before triton is imported); see `triton_device`."""

from __future__ import annotations

import pytest
import torch
from triton_device import DEVICE, KERNEL_TYPE, one_split_test_backend, skip_unless_triton_runs

skip_unless_triton_runs()

from tgi.backends.triton_common.kernels.lora import TritonLoRAOps  # noqa: E402
from tgi.core.lora.ops import LoRAWeights, TorchLoRAOps  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def test_kernel_runs_where_expected():
    from tgi.backends.triton_common.kernels import lora

    assert type(lora._shrink_kernel).__name__ == KERNEL_TYPE


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("k", "n", "rank"), [(96, 80, 8), (64, 130, 20)])
def test_mixed_slots_equal_the_torch_reference(dtype, k, n, rank):
    g = torch.Generator().manual_seed(0)
    slots_n = 3
    weights = LoRAWeights(
        (torch.randn(slots_n, rank, k, generator=g) * 0.1).to(dtype),
        (torch.randn(slots_n, n, rank, generator=g) * 0.1).to(dtype),
        (True, True, True),
    )
    token_slots = [2, -1, 0, 0, 1, -1, 2, 1, 0]
    x = torch.randn(len(token_slots) + 2, k, generator=g).to(dtype)  # two padding rows past the tokens
    base = torch.randn(x.shape[0], n, generator=g).to(dtype)
    ref = TorchLoRAOps()
    want = ref.apply(base.clone(), x, weights, ref.plan([*token_slots, -1, -1], torch.device("cpu")))
    ops = TritonLoRAOps()
    on_device = LoRAWeights(weights.a.to(DEVICE), weights.b.to(DEVICE), weights.present)
    plan = ops.plan(token_slots, DEVICE)
    got = ops.apply(base.clone().to(DEVICE), x.to(DEVICE), on_device, plan).cpu()
    scale = want.float().abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= TOL[dtype] * scale
    assert torch.equal(got[[1, 5, 9, 10]], base[[1, 5, 9, 10]])  # no adapter, padding: untouched
    assert ops.plan([-1, -1], DEVICE) is None


def test_mixed_adapters_through_the_cuda_backend_equal_peft(tmp_path):
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams
    from tgi.core.testing.lora import peft_greedy, write_random_lora
    from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama

    base = write_tiny_llama(tmp_path / "base")
    paths = {
        "a": write_random_lora(tmp_path / "a", base, seed=1),
        "b": write_random_lora(tmp_path / "b", base, r=4, target_modules=("v_proj", "up_proj"), seed=2),
    }
    backends = []

    def create():
        backends.append(one_split_test_backend()())  # contexts of < 30 tokens: one split
        return backends[-1]

    config = EngineConfig(
        model_id=str(base), backend="cuda-interpreted", max_total_tokens=64, max_batch_total_tokens=512,
        max_num_seqs=8, lora_adapters=tuple((n, str(p)) for n, p in paths.items()),
        max_batch_prefill_tokens=40,  # the 6 prompts' 39 tokens in one step; warm-up's prefill 40, not 113
    )  # fmt: skip
    engine = LLMEngine.from_config(config, registry=backend_registry("cuda-interpreted", create))
    assert isinstance(engine.runner.lora.state.ops, TritonLoRAOps)
    # two prompts (7 and 6 tokens), each with no adapter, a (rank 8) and b (rank 4, other modules): every
    # token is a row of each interpreted kernel, and one step mixing the three is the path
    prompts = [PROMPTS[1], PROMPTS[2][:6]]
    requests = [(p, a) for p in prompts for a in (None, *paths)]
    results = engine.generate(
        [list(p) for p, _ in requests],
        [SamplingParams(max_new_tokens=4, ignore_eos=True, adapter_id=a) for _, a in requests],
    )
    want = {a: peft_greedy(base, None if a is None else paths[a], prompts, 4) for a in (None, *paths)}
    for result, (prompt, adapter) in zip(results, requests, strict=True):
        assert result.token_ids == want[adapter][prompts.index(prompt)], f"adapter {adapter}"
