"""The torch-level conformance suite: a test class that any torch backend's test module subclasses.

Checks, against core's references:

* attention (`test_attention`): prefill, chunked prefill and decode over a mixed, paged schedule, against
  dense float64 attention, for a grid of head counts (MHA, GQA, MQA), head sizes, KV block sizes, a long
  context, sliding windows and soft-capping (when the attention's caps claim them), in every dtype the
  backend supports;
* the KV cache (`test_kv_write`): writes land at their slots, negative slots store nothing, other slots and
  layers are left unchanged;
* quantized KV caches (`test_attention_quantized_kv`): for every quantized dtype the backend names in
  `kv_cache_dtypes(dtype)`, the mixed paged schedule of a few attention cases against dense float64
  attention of the unquantized keys and values, within `KV_ATTENTION_TOLERANCE` (the quantization's error);
* quantized linears (`test_quantized_linear`): for every weight format the backend names in
  `weight_formats(dtype)`, its kernel computes x @ W.T + bias with W the format's own `dequantize()`
  (`tgi.core.torch.testing.quant`), for 1 and 33 rows, in every dtype tested;
* the sampler (`test_sampler_*`): the one sampler suite of every framework
  (`tgi.core.testing.sampler_conformance`): greedy and seeded sampling, with every processor and penalty,
  grammar masks, the watermark, min-p, top-n-sigma, XTC, DRY, bad words, allowed tokens and logits
  processors give the tokens (and logprobs) of `reference_sampler.reference_sample`, a sampler written
  plainly, one row and one token at a time in float64, on the framework-free cases of
  `tgi.core.testing.sampling_cases` and `extended_sampling_cases` (a case that needs a parameter the
  sampler refuses, `Sampler.unsupported_sampling`, is skipped);
* through a real engine, the runner-level checks every backend passes (`RunnerConformance`): greedy tokens
  equal `transformers`' on a small random-weight Llama, preemption, cancellation, runner constraints.

Use (a test module of the backend's own package; pytest collects the `Test*` subclass)::

    from tgi.core.torch.testing import TorchBackendConformance

    class TestMyChipConformance(TorchBackendConformance):
        def make_backend(self):
            from tgi_mychip.backend import MyChipBackend
            return MyChipBackend()

or set `backend_name = "mychip"` to build it through the plugin host (the plugin must be installed). Class
attributes narrow the grid (`dtypes`, `attention_cases`) or adapt to a KV layout (`read_kv_slots`).
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from tgi.core.interfaces import KVCacheSpec
from tgi.core.testing.extended_sampling_cases import EXTENDED_SAMPLER_CASES
from tgi.core.testing.runner_conformance import RunnerConformance
from tgi.core.testing.sampler_conformance import SamplerConformance
from tgi.core.testing.sampling_cases import SamplerCase
from tgi.core.torch.backend import TorchBackend
from tgi.core.torch.testing.logits_processors import register_testing_processors
from tgi.core.torch.testing.quant import QUANT_CASES, QUANT_TOLERANCE, quantized_linear_error
from tgi.core.torch.testing.reference import (
    LONG_SCHEDULE,
    TOLERANCE,
    AttentionCase,
    pick_block_size,
    run_attention_schedule,
)

#: the attention grid: name -> case (block sizes a backend lacks are replaced by the nearest it has)
ATTENTION_CASES: dict[str, AttentionCase] = {
    "mha-d32-bs4": AttentionCase(4, 4, 32, 4),
    "gqa4-d64-bs16": AttentionCase(8, 2, 64, 16),
    "mqa-d32-bs2": AttentionCase(4, 1, 32, 2),
    "gqa3-d80-bs1": AttentionCase(6, 2, 80, 1),
    "window3-bs4": AttentionCase(6, 2, 32, 4, sliding_window=3),
    "softcap-window5-bs8": AttentionCase(4, 2, 32, 8, sliding_window=5, softcap=3.0),
    "long-gqa2-bs16": AttentionCase(4, 2, 32, 16, schedule=LONG_SCHEDULE, num_decodes=2),
}
ALL_DTYPES = ("float32", "bfloat16", "float16")
#: max abs error of attention over a quantized cache against the unquantized inputs' (outputs O(1); queries
#: and keys ~ N(0, 4): sharp softmaxes, where a key's rounding moves the output most): one byte a value rounds
#: each key and value by up to half a step (int8: 1/254 of the head's largest; float8 e4m3 and e5m2: 2^-4 and
#: 2^-3 relative). Measured on the CPU backend (both attentions): int8 0.071, e4m3 0.37, e5m2 0.93. A cache
#: read without its scales, or with another token's, is off by far more
KV_ATTENTION_TOLERANCE = {"int8": 0.12, "fp8_e4m3fn": 0.6, "fp8_e5m2": 1.5}
#: the attention cases a quantized cache is run on
KV_ATTENTION_CASES = ("gqa4-d64-bs16", "long-gqa2-bs16")


class TorchBackendConformance(RunnerConformance):
    """Subclass as `Test<Name>Conformance` and provide `make_backend()` or `backend_name`: the runner-level
    checks of `RunnerConformance` (through a real engine) and the torch-level ones below."""

    #: dtypes to test attention in (default: every dtype both the backend and its attention support)
    dtypes: ClassVar[tuple[str, ...] | None] = None
    #: names of ATTENTION_CASES to run (default: all)
    attention_cases: ClassVar[tuple[str, ...] | None] = None

    def engine_block_size(self, backend: TorchBackend) -> int:
        return pick_block_size(16, backend.attention().caps().block_sizes)

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> TorchBackend:
        """The backend the torch-level checks call directly (the engines get their own instance)."""
        return cls().make_backend()

    def read_kv_slots(self, cache, layer_idx: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [len(slots), Hkv, D] stored at `slots`. The default reads caches whose `layer()`
        is a (keys, values) pair in a slot-major layout ([num_blocks, block_size, Hkv, D] or
        [num_slots, Hkv, D]); override it for another layout."""
        spec = cache.spec
        storage = cache.layer(layer_idx)
        num_slots = cache.num_blocks * spec.block_size
        shape = (num_slots, spec.num_kv_heads, spec.head_dim)
        if not (isinstance(storage, tuple | list) and len(storage) == 2):
            pytest.skip("KV layout unknown to the suite: override read_kv_slots()")
        keys, values = storage
        if keys.numel() != num_slots * spec.num_kv_heads * spec.head_dim:
            pytest.skip("KV layout unknown to the suite: override read_kv_slots()")
        idx = slots.to(keys.device, torch.int64)
        return keys.reshape(shape)[idx].cpu(), values.reshape(shape)[idx].cpu()

    def _dtypes(self, backend: TorchBackend) -> tuple[str, ...]:
        caps = backend.attention().caps()
        wanted = self.dtypes or ALL_DTYPES
        return tuple(d for d in wanted if d in backend.supported_dtypes() and d in caps.dtypes)

    # -- attention --------------------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", ALL_DTYPES)
    @pytest.mark.parametrize("case_name", list(ATTENTION_CASES))
    def test_attention(self, backend: TorchBackend, case_name: str, dtype: str) -> None:
        if self.attention_cases is not None and case_name not in self.attention_cases:
            pytest.skip(f"{case_name} not selected by this backend's attention_cases")
        if dtype not in self._dtypes(backend):
            pytest.skip(f"{backend.name} does not support {dtype}")
        case = ATTENTION_CASES[case_name]
        caps = backend.attention().caps()
        if caps.head_sizes is not None and case.head_dim not in caps.head_sizes:
            pytest.skip(f"head size {case.head_dim} not supported")
        if case.sliding_window is not None and not caps.sliding_window:
            pytest.skip("no sliding-window support claimed")
        if case.softcap is not None and not caps.softcap:
            pytest.skip("no soft-cap support claimed")
        bs = pick_block_size(case.block_size, caps.block_sizes)
        case = AttentionCase(**{**case.__dict__, "block_size": bs})
        err = run_attention_schedule(backend, case, dtype)
        print(f"{backend.name} attention {case_name} (block {bs}) {dtype}: max abs error {err:.2e}")
        assert err <= TOLERANCE[dtype], f"{case_name} {dtype}: max abs error {err:.3g} > {TOLERANCE[dtype]}"

    @pytest.mark.parametrize("kv_dtype", list(KV_ATTENTION_TOLERANCE))
    @pytest.mark.parametrize("case_name", KV_ATTENTION_CASES)
    def test_attention_quantized_kv(self, backend: TorchBackend, case_name: str, kv_dtype: str) -> None:
        dtype = self._dtypes(backend)[0]
        if kv_dtype not in backend.kv_cache_dtypes(dtype):
            pytest.skip(f"{backend.name} does not store the KV cache as {kv_dtype}")
        caps = backend.attention().caps()
        case = ATTENTION_CASES[case_name]
        if (case.softcap is not None and not caps.softcap) or (
            case.sliding_window and not caps.sliding_window
        ):
            pytest.skip("no sliding-window or soft-cap support claimed")
        bs = pick_block_size(case.block_size, caps.block_sizes)
        case = AttentionCase(**{**case.__dict__, "block_size": bs})
        err = run_attention_schedule(backend, case, dtype, kv_dtype=kv_dtype)
        print(
            f"{backend.name} attention {case_name} {dtype} over a {kv_dtype} cache: max abs error {err:.2e}"
        )
        tol = KV_ATTENTION_TOLERANCE[kv_dtype]
        assert err <= tol, f"{case_name} {kv_dtype}: max abs error {err:.3g} > {tol}"

    # -- KV cache ---------------------------------------------------------------------------------------
    def test_kv_write(self, backend: TorchBackend) -> None:
        from tgi.core.dtypes import to_torch_dtype

        dtype = self._dtypes(backend)[0]
        bs = pick_block_size(4, backend.attention().caps().block_sizes)
        spec = KVCacheSpec(num_layers=2, num_kv_heads=2, head_dim=32, block_size=bs, dtype=dtype)
        cache = backend.create_kv_cache(spec, 5)
        n = 5 * bs
        device, tdt = backend.torch_device(), to_torch_dtype(dtype)
        gen = torch.Generator().manual_seed(1)
        base = [
            (torch.randn(n, 2, 32, generator=gen).to(tdt), torch.randn(n, 2, 32, generator=gen).to(tdt))
            for _ in range(2)
        ]
        every = torch.arange(n, dtype=torch.int64)
        for layer, (k, v) in enumerate(base):  # fill every slot of both layers
            cache.write(layer, k.to(device), v.to(device), every.to(device))
        slots = torch.randperm(n, generator=gen)[:7].to(torch.int64)
        slots[[2, 5]] = -1  # padding tokens: stored nowhere
        new_k = torch.randn(7, 2, 32, generator=gen).to(tdt)
        new_v = torch.randn(7, 2, 32, generator=gen).to(tdt)
        cache.write(1, new_k.to(device), new_v.to(device), slots.to(device))

        exp_k, exp_v = base[1][0].clone(), base[1][1].clone()
        keep = slots >= 0
        exp_k[slots[keep]], exp_v[slots[keep]] = new_k[keep], new_v[keep]
        got_k, got_v = self.read_kv_slots(cache, 1, every)
        assert torch.equal(got_k, exp_k) and torch.equal(got_v, exp_v), "layer 1 slots differ after the write"
        got_k0, got_v0 = self.read_kv_slots(cache, 0, every)
        assert torch.equal(got_k0, base[0][0]) and torch.equal(got_v0, base[0][1]), "layer 0 changed"

    # -- quantized linears ------------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", ALL_DTYPES)
    @pytest.mark.parametrize("case", list(QUANT_CASES))
    def test_quantized_linear(self, backend: TorchBackend, case: str, dtype: str) -> None:
        if dtype not in self._dtypes(backend):
            pytest.skip(f"{backend.name} does not support {dtype}")
        fmt = QUANT_CASES[case]
        if fmt not in backend.weight_formats(dtype):
            pytest.skip(f"{backend.name} computes no {fmt} weights with {dtype} activations")
        for rows in (1, 33):
            err = quantized_linear_error(backend, case, dtype, rows)
            print(f"{backend.name} quantized linear {case} {dtype} rows {rows}: max relative error {err:.2e}")
            assert err <= QUANT_TOLERANCE[dtype], f"{case} {dtype} rows {rows}: relative error {err:.3g}"

    # -- sampler: the one sampler suite, on this backend's sampler ----------------------------------------
    def test_sampler_greedy_matches_reference(self, backend: TorchBackend) -> None:
        TorchSamplerConformance(backend).test_greedy_matches_reference()

    def test_sampler_seeded_matches_reference(self, backend: TorchBackend) -> None:
        TorchSamplerConformance(backend).test_seeded_matches_reference()

    def test_sampler_grammar_masks_match_reference(self, backend: TorchBackend) -> None:
        TorchSamplerConformance(backend).test_grammar_masks_match_reference()

    def test_sampler_watermark_matches_reference(self, backend: TorchBackend) -> None:
        TorchSamplerConformance(backend).test_watermark_matches_reference()

    @pytest.mark.parametrize("case", sorted(EXTENDED_SAMPLER_CASES))
    def test_sampler_extended_sampling_matches_reference(self, backend: TorchBackend, case: str) -> None:
        """min-p, top-n-sigma, XTC, DRY, bad words, allowed tokens and logits processors (those the
        backend's sampler does not refuse)."""
        TorchSamplerConformance(backend).check_sampler(case)


class TorchSamplerConformance(SamplerConformance):
    """The framework-free sampler suite (`tgi.core.testing.sampler_conformance`) on a torch backend's
    sampler: the case's logits as a float32 tensor on the backend's device, its tokens and logprobs back
    as lists."""

    def __init__(self, backend: TorchBackend) -> None:
        self.backend = backend
        self.sampler = backend.sampler()
        self.supports_token_masks = self.sampler.supports_token_masks
        self.unsupported_sampling = self.sampler.unsupported_sampling
        register_testing_processors()  # the processors the logits-processor case selects, by name

    def sample(self, case: SamplerCase) -> tuple[list[int], list[float]]:
        logits = torch.tensor(case.logits, dtype=torch.float32).to(self.backend.torch_device())
        out = self.sampler.sample(logits, case.rows, case.token_masks)
        return out.token_ids.cpu().tolist(), out.logprobs.cpu().double().tolist()
