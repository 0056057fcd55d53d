"""The Triton fused mixture-of-experts kernel (CUDA/ROCm), run on CPU tensors by triton's interpreter
(`TRITON_INTERPRET=1`, set by tests/conftest.py before triton is imported) where no GPU is visible: equal to core's grouped expert
products, and a tiny Mixtral served end to end by the CUDA backend on CPU tensors (every kernel Triton)
gives transformers' greedy tokens. Where a GPU is visible, the same tests run the compiled kernels on it
(`triton_device`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from triton_device import DEVICE, KERNEL_TYPE, one_split_test_backend, skip_unless_triton_runs

skip_unless_triton_runs()

from tgi.backends.triton_common.kernels.fused_moe import align_pairs, fused_moe  # noqa: E402
from tgi.core.models.moe import GroupedExperts, grouped_moe, route  # noqa: E402

# max abs error against grouped_moe in float64 on the same (dtype-rounded) inputs, relative to the largest
# output: about two roundings to the dtype (the intermediate product and the output)
TOL = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}


def test_kernel_runs_where_expected():
    from tgi.backends.triton_common.kernels import fused_moe as module

    assert type(module._gate_up_kernel).__name__ == KERNEL_TYPE


def test_align_pairs_groups_and_pads_per_expert():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]])  # pairs 0..5; expert 0: 1, 4; expert 1: 3; 2: 0, 2, 5
    pairs, tiles = align_pairs(ids.to(DEVICE), num_experts=4, block_m=4)
    # room for the most padding 6 pairs of 4 experts can need: ceil((6 + 4 * 3) / 4) = 5 tiles; expert 3
    # has no pair and no tile of its own, the spare tiles are padding only (6 = T * k)
    assert tiles.tolist() == [0, 1, 2, 3, 3]
    assert pairs.tolist() == [1, 4, 6, 6, 3, 6, 6, 6, 0, 2, 5, 6] + [6] * 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("tokens", [1, 5, 37])
def test_fused_moe_equals_grouped_experts(dtype, tokens):
    gen = torch.Generator().manual_seed(tokens)
    e, h, inter, k = 8, 64, 48, 2  # I = 48: a partial column block of 32
    x = torch.randn(tokens, h, generator=gen).to(dtype)
    w13 = (torch.randn(e, 2 * inter, h, generator=gen) * 0.15).to(dtype)
    w2 = (torch.randn(e, h, inter, generator=gen) * 0.15).to(dtype)
    logits = torch.randn(tokens, e, generator=gen)
    logits[:, 3] = -1e4  # an expert no token chose
    weights, ids = route(logits, k, renormalize=True)
    expected = grouped_moe(x.double(), w13.double(), w2.double(), weights.double(), ids, F.silu)
    out = fused_moe(*(t.to(DEVICE) for t in (x, w13, w2, weights, ids))).cpu()
    assert out.dtype == dtype and out.shape == (tokens, h)
    err = ((out.double() - expected).abs().max() / expected.abs().max()).item()
    print(f"fused MoE T={tokens} {dtype}: max abs error {err:.2e} of the largest output")
    assert err <= TOL[dtype]


def test_mixtral_through_the_cuda_backend_equals_transformers(tmp_path):
    import transformers

    from tgi.core.testing.model import PROMPTS, VOCAB_SIZE, generate_greedy, transformers_greedy
    from tgi.core.testing.tiny_models import save_random_checkpoint

    config = transformers.MixtralConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
        bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    folder = save_random_checkpoint(tmp_path / "mixtral", config, init_std=0.08)
    attached = []

    def create():
        backend = one_split_test_backend()()  # contexts of < 30 tokens: one split
        prepare = backend.prepare_model

        def prepare_and_check(model):
            prepare(model)
            attached.extend(m.experts_kernel for m in model.modules() if isinstance(m, GroupedExperts))

        backend.prepare_model = prepare_and_check
        return backend

    # one MoE layer, two prompts (7 and 19 tokens) batched: every token is a row of each interpreted kernel
    prompts = PROMPTS[1:]
    tokens = generate_greedy(folder, "cuda-interpreted", create, "float32", 16, prompts, 4)
    assert attached and all(k is fused_moe for k in attached)  # the fused kernel ran, not the fallback
    assert tokens == transformers_greedy(folder, prompts, 4)
