"""No host sync in a decode step, the region a CUDA graph captures: each model family (tiny random
weights) served by the CUDA backend on CPU tensors (Triton kernels interpreted, fused MoE attached), its
decode-only forwards run under `no_host_sync()` (tests/helpers/host_sync_guard.py), which raises on any
call that would make the host wait for the GPU (`.item()`, `.cpu()`, `bool(tensor)`, `nonzero`,
`bincount`, `repeat_interleave` without `output_size`...). A sync added to a model, a layer or a kernel's
wrapper fails here, before a GPU's graph capture would."""

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
from host_sync_guard import HostSyncError, no_host_sync
from triton_device import one_split_test_backend

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.request import StepError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import VOCAB_SIZE, backend_registry
from tgi.core.testing.tiny_models import save_random_checkpoint

SMALL = dict(
    vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=0,
)  # fmt: skip
LONGROPE = {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.5] * 8}
FAMILIES = {
    "llama": lambda: transformers.LlamaConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL),
    "gemma": lambda: transformers.GemmaConfig(**SMALL, head_dim=32),
    "gemma2": lambda: transformers.Gemma2Config(
        **SMALL, head_dim=16, attn_logit_softcapping=20.0, final_logit_softcapping=10.0, sliding_window=6
    ),
    # LongRoPE: short factors up to 12 tokens, long ones past (the prompt is 10, decoding runs to 15)
    "phi3-longrope": lambda: transformers.Phi3Config(
        **SMALL, rope_scaling=LONGROPE, original_max_position_embeddings=12
    ),
    "mixtral": lambda: transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
    "qwen2-moe": lambda: transformers.Qwen2MoeConfig(
        **SMALL,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
    ),
    "starcoder2": lambda: transformers.Starcoder2Config(**SMALL, sliding_window=10),
}


class DecodeUnderGuard:
    """Stands in for the runner's model as `GraphedDecodeModel` does: decode-only forwards run under
    `no_host_sync()`, the others as they are."""

    def __init__(self, model) -> None:
        self.model = model
        self.decode_steps = 0

    def __call__(self, input_ids, positions, ctx):
        if ctx.meta.num_prefill_tokens:
            return self.model(input_ids, positions, ctx)
        with no_host_sync():
            hidden = self.model(input_ids, positions, ctx)
        self.decode_steps += 1
        return hidden

    def __getattr__(self, name):
        return getattr(self.model, name)


class SyncingModel(DecodeUnderGuard):
    """The model, after reading a value of the step on the host (a length taken from a tensor)."""

    def __call__(self, input_ids, positions, ctx):
        int(positions.max())
        return self.model(input_ids, positions, ctx)


def _engine(folder) -> LLMEngine:
    """Contexts of up to 16 tokens: decoded in one split (one decode variant warmed up)."""
    config = EngineConfig(
        model_id=str(folder), backend="cuda-interpreted", dtype="float32", block_size=4,
        max_total_tokens=32, max_batch_total_tokens=128, max_batch_prefill_tokens=13, max_num_seqs=2,
    )  # fmt: skip
    return LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", one_split_test_backend())
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_decode_forward_has_no_host_sync(tmp_path, family):
    engine = _engine(save_random_checkpoint(tmp_path / family, FAMILIES[family](), init_std=0.08))
    guarded = DecodeUnderGuard(engine.runner.model)
    engine.runner.model = guarded
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)  # 4 decode steps: positions 10 to 13
    results = engine.generate([list(range(3, 13)), [7, 8, 9]], params)
    assert [len(r.token_ids) for r in results] == [5, 5]
    assert guarded.decode_steps >= 4  # the guard saw the decode steps


def test_the_guard_fails_a_decode_step_that_reads_the_device(tmp_path):
    engine = _engine(save_random_checkpoint(tmp_path / "llama", FAMILIES["llama"](), init_std=0.08))
    engine.runner.model = DecodeUnderGuard(SyncingModel(engine.runner.model))
    with pytest.raises(StepError) as failed:  # the engine names the step's requests, the cause is ours
        engine.generate([[3, 4, 5]], SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert isinstance(failed.value.__cause__, HostSyncError)
    assert "int(tensor)" in str(failed.value.__cause__)
