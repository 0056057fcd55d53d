"""Quantized weights through the seam (issue 16), on the tiny Llama: pre-quantized GPTQ / AWQ /
compressed-tensors FP8 checkpoints made in the test with the plain-torch reference packers
(`tests/helpers/quant_formats.py`), and load-time `--quantize eetq` / `fp8`.

For each: our logits over a prompt equal those of a dense checkpoint holding the dequantized weights
(float32 activations: within 2e-3 of max |logit|, the rounding of the kernels' float32 accumulation order
and bfloat16-free scale-and-zero arithmetic; measured ~1e-5), and greedy choices agree with the
unquantized model's on most steps, teacher-forced over the three prompts (71 steps). Measured on this random
model (small logit margins; a trained model's are larger): GPTQ int4 55 % (group 32, symmetric), 65 %
(asymmetric, act-order), 52 % (per channel), AWQ int4 55 % (group 32), GPTQ int8
99 % / 97 %, FP8 86 % (per tensor) / 90 % (per channel), load-time eetq 97 %, fp8 90 %. The bars sit just
below.
"""

from __future__ import annotations

import pytest
import torch
from quant_checkpoints import write_dequantized_int8, write_quantized

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import EngineConfig
from tgi.core.interfaces import SingleProcessCollective
from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.loading import resolve_model
from tgi.core.models.context import AttentionContext, build_attention_metadata, build_positions
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import PROMPTS, write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner

PROMPT = PROMPTS[0][:24]
#: formats, their reference packer's options, and the least share of greedy tokens equal to the dense model's
FORMATS = {
    "gptq-int4-sym-v1-g32": ("gptq", dict(bits=4, group_size=32, sym=True, v1=True), 0.5),
    "gptq-int4-asym-v2-actorder-g32": (
        "gptq",
        dict(bits=4, group_size=32, sym=False, desc_act=True, v1=False),
        0.6,
    ),
    "gptq-int4-channel": ("gptq", dict(bits=4, group_size=-1, sym=True), 0.5),
    "gptq-int8-asym-g32": ("gptq", dict(bits=8, group_size=32, sym=False), 0.95),
    "gptq-int8-channel-sym": ("gptq", dict(bits=8, group_size=-1, sym=True), 0.95),
    "awq-g32": ("awq", dict(group_size=32), 0.5),
    "fp8-tensor": ("fp8", dict(per_channel=False), 0.8),
    "fp8-channel": ("fp8", dict(per_channel=True), 0.85),
}


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("dense"))


def load_runner(folder, quantize=None, dtype="float32") -> TorchModelRunner:
    config = EngineConfig(model_id=str(folder), dtype=dtype, quantize=quantize, block_size=16)
    runner = TorchModelRunner(CpuBackend(), resolve_model(str(folder)), config, SingleProcessCollective())
    runner.info = runner.load()
    runner.initialize_cache(8)
    return runner


@torch.inference_mode()
def prompt_logits(runner: TorchModelRunner, ids=PROMPT) -> torch.Tensor:
    """Logits [len(ids), vocab] of one prefill of `ids`."""
    n = len(ids)
    seq = ScheduledSequence(
        "p", list(ids), 0, list(range(-(-n // 16))), True, True, SamplingParams(), 0, n, list(ids)
    )
    meta = build_attention_metadata([seq], 16, runner.device)
    runner.attention.prepare(meta)
    hidden = runner.model(
        torch.tensor(ids),
        build_positions([seq], runner.device),
        AttentionContext(runner.attention, runner.kv_cache, meta),
    )
    return runner.model.compute_logits(hidden)


def greedy_choices(runner: TorchModelRunner) -> torch.Tensor:
    """The greedy choice after every position of the three prompts (teacher-forced: each step sees the
    same context whatever the model chose before)."""
    return torch.cat([prompt_logits(runner, list(p)).argmax(-1) for p in PROMPTS])


def agreement(runner: TorchModelRunner, dense_choices: torch.Tensor) -> float:
    return float((greedy_choices(runner) == dense_choices).float().mean())


@pytest.fixture(scope="module")
def dense_tokens(dense):
    return greedy_choices(load_runner(dense))


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("case", list(FORMATS))
def test_checkpoint_format_equals_its_dequantized_weights(dense, dense_tokens, tmp_path, case):
    fmt, opts, least = FORMATS[case]
    qdir, rdir = write_quantized(dense, tmp_path, fmt, **opts)
    runner = load_runner(qdir)
    info = runner.info.quantization
    assert (
        info is not None and info.source == "checkpoint" and info.num_linears == 2 * 4
    )  # qkv, o, gate_up, down
    expected = "compressed-tensors" if fmt == "fp8" else fmt
    assert info.method == expected, info
    # no dense copy of a quantized linear stays in memory
    layer = runner.model.model.layers[0]
    assert layer.self_attn.qkv_proj.weight.is_meta and layer.mlp.down_proj.weight.is_meta
    got = prompt_logits(runner)
    ref = prompt_logits(load_runner(rdir))
    assert _max_rel(got, ref) < 2e-3, case
    share = agreement(runner, dense_tokens)
    print(f"{case}: {share:.1%} of greedy steps agree")
    assert share >= least, f"{case}: {share:.0%} of greedy tokens agree with the dense model"


@pytest.mark.parametrize("group_size", [32, -1])
def test_marlin_checkpoint_is_converted_at_load(tmp_path, group_size):
    """AutoGPTQ's Marlin serialisation (checkpoint_format marlin: B, s), packed by the test's reference
    packer, loads as GPTQ int4 and equals its dequantized weights. Marlin's tiles need output widths that
    are multiples of 64: a Llama with 4 key/value heads of 16."""
    from tgi.core.testing.tiny_models import save_random_model

    dense = save_random_model(tmp_path / "dense", num_heads=4, num_kv_heads=4, vocab_size=256, init_std=0.08)
    qdir, rdir = write_quantized(dense, tmp_path, "marlin", group_size=group_size)
    runner = load_runner(qdir)
    info = runner.info.quantization
    assert (info.method, info.weight_format, info.num_linears) == ("marlin", "gptq-int4", 8)
    assert _max_rel(prompt_logits(runner), prompt_logits(load_runner(rdir))) < 2e-3


@pytest.mark.parametrize("quantize", ["eetq", "fp8"])
def test_load_time_quantization_equals_its_dequantized_weights(dense, dense_tokens, tmp_path, quantize):
    runner = load_runner(dense, quantize=quantize)
    info = runner.info.quantization
    assert (info.method, info.source, info.num_linears) == (quantize, "load-time", 8)
    assert runner.model.lm_head.quant_weight is None and not runner.model.lm_head.weight.is_meta
    ref = prompt_logits(load_runner(write_dequantized_int8(dense, tmp_path / "ref", fp8=quantize == "fp8")))
    assert _max_rel(prompt_logits(runner), ref) < 2e-3
    share = agreement(runner, dense_tokens)
    print(f"{quantize}: {share:.1%} of greedy steps agree")
    assert share >= 0.8


@pytest.mark.parametrize("quantize", ["bitsandbytes-nf4", "bitsandbytes-fp4", "bitsandbytes"])
def test_bitsandbytes_at_load_equals_its_dequantized_weights(dense, dense_tokens, quantize):
    """bitsandbytes' own quantizer and CPU products: our logits against the model with every quantized
    linear replaced by bitsandbytes' dequantization of the same weights."""
    pytest.importorskip("bitsandbytes")
    runner = load_runner(dense, quantize=quantize)
    info = runner.info.quantization
    assert (info.method, info.source, info.num_linears) == (quantize, "load-time", 8)
    got = prompt_logits(runner)
    share = agreement(runner, dense_tokens)
    print(f"{quantize}: {share:.1%} of greedy steps agree")
    reference = load_runner(dense)
    from tgi.core.quant.quantize_dense import quantizer_for

    fmt = {"bitsandbytes": "bnb-int8", "bitsandbytes-nf4": "bnb-nf4", "bitsandbytes-fp4": "bnb-fp4"}[quantize]
    quantize_one = quantizer_for(fmt)
    for name, module in reference.model.named_modules():
        if hasattr(type(module), "linear_kernel") and name != "lm_head":
            module.linear_kernel = None
            module.weight.data = quantize_one(module.weight).dequantize().to(module.weight.dtype)
    assert _max_rel(got, prompt_logits(reference)) < 2e-3
    assert share >= {"bitsandbytes": 0.9, "bitsandbytes-nf4": 0.55, "bitsandbytes-fp4": 0.45}[quantize]


def test_bfloat16_activations_on_int4(dense, tmp_path):
    """The int4 kernel with bfloat16 activations (scales and zeros rounded to bfloat16): within 3e-2."""
    qdir, rdir = write_quantized(dense, tmp_path, "gptq", bits=4, group_size=32, sym=False)
    got = prompt_logits(load_runner(qdir, dtype="bfloat16"))
    assert _max_rel(got, prompt_logits(load_runner(rdir))) < 3e-2


def test_lora_adapters_on_quantized_linears(dense, tmp_path):
    """--lora-adapters over --quantize eetq: the adapter's greedy tokens equal those over the dense
    checkpoint of the same int8 weights dequantized (the deltas add to the quantized kernel's product)."""
    from tgi.core.engine import LLMEngine
    from tgi.core.testing.lora import write_random_lora

    adapter = write_random_lora(tmp_path / "adapter", dense, seed=1)
    reference = write_dequantized_int8(dense, tmp_path / "ref")
    tokens = []
    for model, quantize in ((dense, "eetq"), (reference, None)):
        config = EngineConfig(
            model_id=str(model), backend="cpu", dtype="float32", quantize=quantize,
            lora_adapters=(("a", str(adapter)),), max_total_tokens=128, max_batch_total_tokens=1024,
            max_batch_prefill_tokens=64, max_num_seqs=4,
        )  # fmt: skip
        engine = LLMEngine.from_config(config)
        params = SamplingParams(max_new_tokens=6, ignore_eos=True, adapter_id="a")
        tokens.append([r.token_ids for r in engine.generate([list(p) for p in PROMPTS], params)])
    assert tokens[0] == tokens[1]
