"""The Triton backends' fused elementwise kernels (RMSNorm + residual, rotary, SiLU x mul), run on CPU
tensors by Triton's interpreter: each against the torch ops it replaces, and how many launches a decoder
layer's decode forward makes with and without them (served by default through `prepare_model`)."""

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
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.interpreter import InterpretedFunction

from tgi.backends.triton_common.kernels.act_mul import silu_mul
from tgi.backends.triton_common.kernels.rms_norm import rms_norm
from tgi.backends.triton_common.kernels.rotary import rotary_inplace
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.models.attention import Attention
from tgi.core.models.layers import GatedMLP, RMSNorm
from tgi.core.models.rotary import apply_rotary
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import VOCAB_SIZE, backend_registry
from tgi.core.testing.tiny_models import save_random_checkpoint

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# max abs error against the torch ops, which round every intermediate to the dtype (the kernels once)
TOL = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3.2e-2}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rows,hidden", [(1, 64), (7, 96), (3, 5000)])
def test_rms_norm_with_and_without_residual_matches_the_torch_norm(dtype, rows, hidden):
    dt = DTYPES[dtype]
    gen = torch.Generator().manual_seed(rows * hidden)
    x = torch.randn(rows, hidden, generator=gen).to(dt)
    residual = torch.randn(rows, hidden, generator=gen).to(dt)
    norm = RMSNorm(hidden, 1e-6, dt)
    norm.weight.data = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(dt)
    for res in (None, residual):
        want, want_sum = norm(x, res)
        got, got_sum = rms_norm(x, res, norm.weight, norm.eps)
        assert got.dtype == dt and got.shape == want.shape
        # x + residual: exact in float32; the interpreter's casts to 16-bit floats truncate (a GPU rounds)
        assert (got_sum.float() - want_sum.float()).abs().max() <= TOL[dtype] * want_sum.float().abs().max()
        assert (got.float() - want.float()).abs().max() <= TOL[dtype] * max(1.0, want.float().abs().max())


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("tokens,heads,kv_heads,head_dim", [(1, 4, 2, 16), (5, 3, 1, 64), (2, 2, 2, 128)])
def test_rotary_rotates_q_and_k_in_place_as_apply_rotary(dtype, tokens, heads, kv_heads, head_dim):
    dt = DTYPES[dtype]
    gen = torch.Generator().manual_seed(tokens * heads * head_dim)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen).to(dt)
    angles = torch.rand(tokens, 1, head_dim // 2, generator=gen) * 6.0
    cos, sin = angles.cos().to(dt), angles.sin().to(dt)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    want_q = apply_rotary(q.reshape(tokens, heads, head_dim), cos, sin)
    want_k = apply_rotary(k.reshape(tokens, kv_heads, head_dim), cos, sin)
    want_v = v.clone()
    rotary_inplace(qkv, cos, sin, heads + kv_heads, head_dim)
    got_q, got_k, got_v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    assert torch.equal(got_v, want_v)  # v is not rotated
    for got, want in ((got_q, want_q), (got_k, want_k)):
        assert (got.reshape(want.shape).float() - want.float()).abs().max() <= TOL[dtype] * 4


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rows,inter", [(1, 96), (4, 1500)])
def test_silu_mul_matches_silu_of_the_gate_times_up(dtype, rows, inter):
    dt = DTYPES[dtype]
    gate_up = (torch.randn(rows, 2 * inter, generator=torch.Generator().manual_seed(inter)) * 3).to(dt)
    gate, up = gate_up.split(inter, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    got = silu_mul(gate_up)
    assert got.dtype == dt and got.shape == (rows, inter)
    assert (got.float() - want.float()).abs().max() <= TOL[dtype] * max(1.0, want.float().abs().max())


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="two halves"):
        silu_mul(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="do not fit"):
        rotary_inplace(torch.zeros(2, 32), torch.zeros(2, 1, 8), torch.zeros(2, 1, 8), 3, 16)
    with pytest.raises(ValueError, match="do not hold"):
        rotary_inplace(torch.zeros(2, 64), torch.zeros(2, 1, 4), torch.zeros(2, 1, 4), 2, 16)


class LaunchCounter(TorchDispatchMode):
    """Counts what a GPU would launch: torch ops that compute (not views, not allocations) plus Triton
    kernel launches; what a Triton wrapper does inside the interpreter is not counted."""

    FREE = ("empty", "empty_like", "empty_strided", "detach", "lift_fresh")

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused and not func.is_view and func._schema.name.split("::")[-1] not in self.FREE:
            self.launches += 1
        return func(*args, **(kwargs or {}))


class CountedDecode:
    """Stands in for the runner's model: counts the launches of each decode-only forward; Triton launches
    count one each, what their wrappers do inside the interpreter nothing."""

    def __init__(self, model) -> None:
        self.model = model
        self.counter = LaunchCounter()
        self.counts: list[int] = []

    def __call__(self, input_ids, positions, ctx):
        if ctx.meta.num_prefill_tokens:
            return self.model(input_ids, positions, ctx)
        self.counter.launches = 0
        run = InterpretedFunction.run
        counter = self.counter

        def launch(kernel, *args, **kwargs):
            counter.launches += 1
            counter.paused = True
            try:
                return run(kernel, *args, **kwargs)
            finally:
                counter.paused = False

        InterpretedFunction.run = launch
        try:
            with counter:
                hidden = self.model(input_ids, positions, ctx)
        finally:
            InterpretedFunction.run = run
        self.counts.append(counter.launches)
        return hidden

    def __getattr__(self, name):
        return getattr(self.model, name)


def _decode_launches(folder, layers: int, fused: bool) -> int:
    """Launches of one decode forward (batch 2) of a tiny Llama of `layers` layers."""
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    config = EngineConfig(
        model_id=str(save_random_checkpoint(folder, cfg, init_std=0.08)), backend="cuda-interpreted",
        dtype="float32", block_size=4, max_total_tokens=32, max_batch_total_tokens=128,
        max_batch_prefill_tokens=16, max_num_seqs=2,
    )  # fmt: skip
    engine = LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", InterpretedCudaBackend)
    )
    model = engine.runner.model
    if not fused:  # the models' own torch ops
        for m in model.modules():
            if isinstance(m, RMSNorm | GatedMLP | Attention):
                for hook in ("norm_kernel", "act_mul_kernel", "rotary_kernel"):
                    if hook in vars(m):
                        delattr(m, hook)
    counted = engine.runner.model = CountedDecode(model)
    engine.generate([[3, 4, 5], [6, 7]], SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert counted.counts and len(set(counted.counts)) == 1, counted.counts
    return counted.counts[0]


def _decode_launches_per_layer(folder, fused: bool) -> int:
    """Two layers' launches minus one layer's: the embedding, final norm and attention set-up cancel."""
    return _decode_launches(folder / "two", 2, fused) - _decode_launches(folder / "one", 1, fused)


def test_fused_kernels_are_served_and_cut_a_layers_launches(tmp_path):
    fused = _decode_launches_per_layer(tmp_path / "fused", fused=True)
    eager = _decode_launches_per_layer(tmp_path / "eager", fused=False)
    print(f"decode launches per layer: {eager} torch ops -> {fused} with the fused kernels")
    assert fused <= eager - 10, (eager, fused)
