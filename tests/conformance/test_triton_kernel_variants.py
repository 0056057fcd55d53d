"""No Triton kernel compiles while serving: every kernel variant a step launches was launched at warm-up.

A Triton kernel compiles once per variant (its constexprs, launch options, tensor dtypes and the
specialisation of its integer and pointer arguments); a variant first met while serving stalls that step
for about a second on a GPU. Here the CUDA backend serves on CPU tensors (Triton interpreted) and every
kernel launch is keyed as a GPU's JIT would key its compile (`triton_variants`, Triton's own binder for
sm_90): the variants launched while serving requests of many lengths, alone and batched, with and without
a LoRA adapter, must all have been launched while the engine started (weights, warm-up). Two tiny models
between them launch every kernel the backend attaches: a Llama quantized to FP8 at load with a LoRA
adapter (attention with decode splits every 4 keys, so that short contexts take 1 to 16 splits; KV write;
RMSNorm, rotary and SiLU-mul; the 8-bit GEMM; LoRA) and a Mixtral (the fused MoE)."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from interpreted_cuda import InterpretedCudaBackend
from triton_variants import arguments, recording_variants

from tgi.backends.triton_common.attention import TritonAttention
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import VOCAB_SIZE, backend_registry, write_tiny_llama


class ManySplitsBackend(InterpretedCudaBackend):
    """Decode splits every 4 keys (at most 16): contexts of 4 to 64 keys take every split count."""

    def create_attention(self, name):
        return TritonAttention(min_tokens_per_split=4)


def prompt(n: int) -> list[int]:
    return list(range(3, 3 + n))


def started_and_serving(config: EngineConfig, backend, serve) -> tuple[set, set]:
    """The variants launched while the engine starts, and those launched by `serve(engine)` after."""
    at_start: set = set()
    with recording_variants(at_start):
        engine = LLMEngine.from_config(config, registry=backend_registry("cuda-interpreted", backend))
    serving: set = set()
    with recording_variants(serving):
        serve(engine)
    return at_start, serving


def test_llama_with_fp8_and_lora_serves_only_variants_compiled_at_warm_up(tmp_path):
    from tgi.core.testing.lora import write_random_lora

    llama = write_tiny_llama(tmp_path / "llama")
    adapter = write_random_lora(tmp_path / "lora", llama, r=4, target_modules=("q_proj", "down_proj"))
    config = EngineConfig(
        model_id=str(llama), backend="cuda-interpreted", dtype="float32", block_size=4, quantize="fp8",
        max_total_tokens=96, max_batch_total_tokens=512, max_batch_prefill_tokens=32, max_num_seqs=4,
        lora_adapters=(("a", str(adapter)),),
    )  # fmt: skip

    def serve(engine):
        engine.generate([prompt(5)], SamplingParams(max_new_tokens=6, ignore_eos=True))  # alone: 1, 2 splits
        batch = [prompt(n) for n in (17, 40, 70)]  # decodes beside chunked prefills: 4, 8, 16 splits
        engine.generate(batch, SamplingParams(max_new_tokens=4, ignore_eos=True, adapter_id="a"))

    at_start, serving = started_and_serving(config, ManySplitsBackend, serve)
    assert serving - at_start == set(), "compiled while serving"
    kernels = {v[0] for v in serving}
    assert {
        "decode._decode_split_kernel", "decode._decode_reduce_kernel", "prefill._prefill_kernel",
        "reshape_and_cache._reshape_and_cache_kernel", "rms_norm._rms_norm_kernel", "rotary._rotary_kernel",
        "act_mul._silu_mul_kernel", "quant_w8._w8_gemm_kernel", "lora._shrink_kernel", "lora._expand_kernel",
    } <= kernels  # fmt: skip
    splits = {arguments(v)["NUM_SPLITS"][1] for v in serving if v[0] == "decode._decode_split_kernel"}
    assert splits == {1, 2, 4, 8, 16}, "the requests took every split count"


def test_mixtral_serves_only_variants_compiled_at_warm_up(tmp_path):
    import transformers

    from tgi.core.testing.tiny_models import save_random_checkpoint

    hf = transformers.MixtralConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
        bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    folder = save_random_checkpoint(tmp_path / "mixtral", hf, init_std=0.08)
    config = EngineConfig(
        model_id=str(folder), backend="cuda-interpreted", dtype="float32", block_size=4,
        max_total_tokens=64, max_batch_total_tokens=256, max_batch_prefill_tokens=24, max_num_seqs=4,
    )  # fmt: skip

    def serve(engine):  # 1 to 24 tokens a step: pair counts divisible by 16 and not
        engine.generate([prompt(n) for n in (3, 9, 22)], SamplingParams(max_new_tokens=3, ignore_eos=True))

    at_start, serving = started_and_serving(config, InterpretedCudaBackend, serve)
    assert serving - at_start == set(), "compiled while serving"
    assert {"fused_moe._gate_up_kernel", "fused_moe._down_kernel"} <= {v[0] for v in serving}


def test_warm_up_row_counts_reach_every_bucket_a_step_can_fall_in():
    from tgi.backends.triton_common.kernels.quant_int import row_bucket
    from tgi.backends.triton_common.runner import row_count_buckets

    for most in range(1, 300):
        rows = row_count_buckets(most)
        assert max(rows) == most and len(set(rows)) == len(rows)
        assert {row_bucket(m) for m in range(1, most + 1)} == {row_bucket(n) for n in rows}
