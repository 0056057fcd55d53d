"""The conformance check of a torch backend's quantized-linear kernels (`TorchBackend.quantized_linear`, the
seam of `tgi.core.quant.kernels`): for every weight format the backend names in `weight_formats(dtype)`, the
kernel's x @ W.T + bias equals x @ weight.dequantize().T + bias, `dequantize()` being the format's own
definition in `tgi.core.quant.weights`.

The weights are random codes in each format's packing (every field of a random int32 word is a valid code,
zero points included; scales of order 0.01), at the shapes of a real layer's slice (256 inputs, 96 outputs,
groups of 128, or per row) for 1 and 33 input rows. The tolerance is relative to the largest reference
value and loose enough for a kernel's own rounding (activations or the dequantized weight rounded to a
16-bit dtype), while a packing or zero-point mistake misses it by orders of magnitude.
"""

from __future__ import annotations

import torch

from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, Int8Weight, QuantizedWeight

#: cases: name -> the format it is in (act-order GPTQ is GPTQ with a permuted g_idx)
QUANT_CASES = {
    "gptq-int4": "gptq-int4",
    "gptq-int4-act-order": "gptq-int4",
    "gptq-int4-v2-channel": "gptq-int4",
    "gptq-int8": "gptq-int8",
    "awq-int4": "awq-int4",
    "fp8": "fp8",
    "int8": "int8",
}
#: max |kernel - reference| / max |reference|, by activation dtype
QUANT_TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 1e-2}
ROWS, COLS, GROUP = 96, 256, 128


def _words(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=torch.int64).to(torch.int32)


def random_weight(case: str, device: torch.device, seed: int = 0) -> QuantizedWeight:
    """A [ROWS, COLS] weight of QUANT_CASES[case] with random codes, scales and zero points, on `device`."""
    gen = torch.Generator().manual_seed(seed)
    fmt = QUANT_CASES[case]
    if fmt in ("fp8", "int8"):
        scale = (torch.rand(ROWS, generator=gen) * 0.01 + 0.001).to(device)
        if fmt == "fp8":
            w = (torch.randn(ROWS, COLS, generator=gen) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
            return FP8Weight(w.to(device), scale / 64, ROWS, COLS)
        w = torch.randint(-127, 128, (ROWS, COLS), generator=gen, dtype=torch.int8)
        return Int8Weight(w.to(device), scale / 64, ROWS, COLS)
    group = COLS if case.endswith("channel") else GROUP
    groups = COLS // group
    scales = (torch.rand(groups, ROWS, generator=gen) * 0.01 + 0.001).to(torch.float16).to(device)
    if fmt == "awq-int4":
        qweight, qzeros = _words((COLS, ROWS // 8), gen), _words((groups, ROWS // 8), gen)
        return AWQWeight(qweight.to(device), qzeros.to(device), scales, group, ROWS, COLS)
    bits = 8 if fmt == "gptq-int8" else 4
    per = 32 // bits
    qweight, qzeros = _words((COLS // per, ROWS), gen), _words((groups, ROWS // per), gen)
    g_idx = None
    if case.endswith("act-order"):
        g_idx = (torch.randperm(COLS, generator=gen) // group).to(torch.int32).to(device)
    v1 = not case.endswith("v2-channel")
    return GPTQWeight(bits, qweight.to(device), qzeros.to(device), scales, g_idx, group, v1, ROWS, COLS)


def quantized_linear_error(backend, case: str, dtype: str, rows: int) -> float:
    """max |kernel(x, bias) - (x @ dequantize().T + bias)| / max |reference| for `rows` input rows."""
    from tgi.core.dtypes import to_torch_dtype

    device = backend.torch_device()
    weight = random_weight(case, device)
    kernel = backend.quantized_linear(weight, dtype)
    gen = torch.Generator().manual_seed(rows)
    tdt = to_torch_dtype(dtype)
    x = torch.randn(rows, COLS, generator=gen).to(tdt)
    bias = (torch.randn(ROWS, generator=gen) * 0.1).to(tdt)
    got = kernel(x.to(device), bias.to(device)).float().cpu()
    want = x.float() @ weight.dequantize().float().cpu().T + bias.float()
    assert got.shape == want.shape, f"{case}: output {tuple(got.shape)}, expected {tuple(want.shape)}"
    return ((got - want).abs().max() / want.abs().max()).item()
