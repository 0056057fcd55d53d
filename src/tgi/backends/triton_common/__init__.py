"""What the GPU backends that run Triton kernels share (CUDA, ROCm and XPU).

Not a backend: it registers no entry point. The backends derive from `backend.TritonBackend` and reach the
kernels through it, so that no backend imports another (an import-linter contract in pyproject.toml).

| module | what |
|---|---|
| `backend.py` | `TritonBackend`: device (through `torch.cuda` or `torch.xpu`), memory for KV sizing, dtypes, attention selection |
| `runner.py` | `TritonModelRunner`: activation-memory profile after loading; CUDA graphs after warm-up |
| `graphs.py` | decode CUDA graphs (HIP graphs on ROCm, XPU graphs on Intel GPUs) |
| `attention.py` | `TritonAttention`, the `--attention` names |
| `kv_cache.py` | `TritonKVCache` |
| `quant.py` | the quantized-linear seam's kernels: GPTQ, AWQ, FP8 and int8 weights (`weight_formats`) |
| `kernels/` | the Triton kernels: KV write, split-K paged decode, ragged/chunked prefill, fused MoE, LoRA, quantized GEMMs |
"""
