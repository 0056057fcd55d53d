"""`--quantize eetq` and `--quantize fp8` on the default model exported to safetensors (bfloat16): a real
`tgi launch` serves `/generate` and reports the quantization in `/info`; in process, the decoder's linear
weights take half the bytes of the bfloat16 weights (int8 or float8, one byte per weight, plus a float32
scale per row: 106.5 MB (eetq), 106.8 MB (fp8: its scales in float32) against 212.3 MB, and against 424.7 MB for bfloat16 with its oneDNN-packed copy)."""

from __future__ import annotations

import httpx
import pytest

from tgi.core.testing.export import export_default_model, linear_weight_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_default_model(tmp_path_factory.mktemp("default-safetensors"))


def _runner(folder, quantize):
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import SingleProcessCollective
    from tgi.core.loading import resolve_model
    from tgi.core.torch.runner import TorchModelRunner

    config = EngineConfig(model_id=str(folder), dtype="bfloat16", quantize=quantize)
    runner = TorchModelRunner(CpuBackend(), resolve_model(str(folder)), config, SingleProcessCollective())
    return runner, runner.load()


def test_weight_memory_falls_by_half(exported):
    dense_runner, _ = _runner(exported, None)
    dense_bf16 = sum(
        m.weight.numel() * 2
        for n, m in dense_runner.model.named_modules()
        if hasattr(type(m), "linear_kernel") and n != "lm_head"
    )
    held = linear_weight_bytes(dense_runner.model)  # bfloat16 + oneDNN's packed copy where prepacking runs
    del dense_runner
    for quantize in ("eetq", "fp8"):
        runner, info = _runner(exported, quantize)
        q = linear_weight_bytes(runner.model)
        assert info.quantization.num_linears == 30 * 4
        print(
            f"{quantize}: decoder linears {q / 1e6:.1f} MB vs bfloat16 {dense_bf16 / 1e6:.1f} MB (held {held / 1e6:.1f} MB)"
        )
        assert q < 0.51 * dense_bf16


def test_gguf_blocks_are_an_instance_of_the_seam():
    """The default GGUF file: its Q4_1 / Q8_0 blocks are the layers' quantized weights, computed by the
    CPU's block kernel for small inputs; the dense copy stays for larger ones (the documented trade-off)."""
    from tgi.core.loading import default_model_path

    runner, info = _runner(default_model_path(), None)
    assert (info.quantization.method, info.quantization.num_linears) == ("gguf", 30 * 4 + 1)
    assert set(info.quantization.weight_format.split(",")) == {"gguf-Q4_1", "gguf-Q8_0"}
    qkv = runner.model.model.layers[0].self_attn.qkv_proj
    assert qkv.quant_format == "gguf-Q4_1" and not qkv.weight.is_meta
    assert type(qkv.linear_kernel.quantized).__name__ == "BlockLinearKernel"


@pytest.mark.parametrize("quantize", ["eetq", "fp8"])
def test_served_with_quantize(exported, tmp_path, launch_server, stop_server, quantize):
    server = launch_server(tmp_path, "--model-id", str(exported), "--backend", "cpu", "--quantize", quantize)
    try:
        info = httpx.get(server.url + "/info").json()
        assert info["quantize"] == quantize
        assert info["quantization"]["source"] == "load-time" and info["quantization"]["num_linears"] == 120
        out = httpx.post(
            server.url + "/generate",
            json={"inputs": "The capital of France is", "parameters": {"max_new_tokens": 8}},
            timeout=120,
        )
        assert out.status_code == 200 and out.json()["generated_text"].strip(), out.text
    finally:
        assert stop_server(server) == 0, server.logs()


def test_unservable_quantize_fails_at_start_with_the_reason(exported, tmp_path, launch_server, stop_server):
    """gptq needs a GPTQ checkpoint: the launch exits with the reason, naming what would load."""
    from e2e_server import run_command

    proc = run_command(tmp_path, "launch", "--model-id", str(exported), "--quantize", "gptq", "--port", "0")
    assert proc.returncode != 0
    assert "needs a checkpoint quantized with gptq" in proc.stderr and "eetq" in proc.stderr, proc.stderr[
        -2000:
    ]
