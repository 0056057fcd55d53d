"""The gaudi backend on this CPU-only machine, through its seam: `GaudiBackend` with a recording fake
`HpuDevice` (tests/fakes/fake_hpu.py), the CPU doing the arithmetic.

Checked: the conformance suite (attention against float64, KV write, sampler; through a real engine,
greedy tokens equal transformers', preemption, cancellation, grammar masks, and every batch within the
runner's declared constraints); tokens equal the CPU backend's; an HPU graph recorded per decode bucket at
warm-up and only replayed while serving; every served step in a warmed bucket; hccl collectives.
"""

from __future__ import annotations

import pytest
import torch
from fake_hpu import FakeHpu

from tgi.backends.gaudi.backend import BucketSizes, GaudiBackend
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama
from tgi.core.torch.testing import TorchBackendConformance

#: small steps so that the tiny model's prompts spread over several buckets
BUCKETS = BucketSizes(batch=2, prefill_batch=2, sequence=16)


def make_backend() -> GaudiBackend:
    return GaudiBackend(device=FakeHpu(), buckets=BUCKETS)


class TestGaudiConformance(TorchBackendConformance):
    dtypes = ("float32", "bfloat16")

    def make_backend(self):
        return make_backend()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gaudi-tiny"))


def _engine(path, backend, **kw):
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine

    settings = dict(
        model_id=str(path), backend=backend.name, dtype="float32", block_size=16, max_total_tokens=128,
        max_batch_total_tokens=1024, max_batch_prefill_tokens=48, max_num_seqs=6,
    )  # fmt: skip
    return LLMEngine.from_config(
        EngineConfig(**{**settings, **kw}), registry=backend_registry(backend.name, lambda: backend)
    )


def test_tokens_equal_the_cpu_backend(tiny_llama):
    """Continuous batching with chunked prefill, then the same prompts again (prefix-cache hits: prefill
    rows that start mid-prompt), greedy, against the CPU backend's engine with the same limits."""
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.core.sampling_params import SamplingParams

    prompts = [list(p) for p in PROMPTS] * 2
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    gaudi_engine = _engine(tiny_llama, make_backend())
    gaudi = [r.token_ids for r in gaudi_engine.generate(prompts, params)]
    gaudi += [r.token_ids for r in gaudi_engine.generate(prompts[:3], params)]
    cpu_engine = _engine(tiny_llama, CpuBackend())
    cpu = [r.token_ids for r in cpu_engine.generate(prompts, params)]
    cpu += [r.token_ids for r in cpu_engine.generate(prompts[:3], params)]
    assert gaudi == cpu
    assert gaudi_engine.scheduler.num_cache_hit_tokens > 0


def test_a_graph_per_decode_bucket_recorded_at_warmup_and_replayed_after(tiny_llama):
    from tgi.core.sampling_params import SamplingParams

    backend = make_backend()
    hpu = backend.hpu
    engine = _engine(tiny_llama, backend)
    shapes = engine.runner.shapes
    # decode buckets 2, 4, 6 (BATCH_BUCKET_SIZE 2 up to max_num_seqs 6); widths 1, 2, 4, 8 blocks
    assert shapes.decode_buckets.sizes == (2, 4, 6) and shapes.block_buckets.sizes == (1, 2, 4, 8)
    assert shapes.prefill_buckets.sizes == (16, 32, 48) and shapes.prefill_batch_buckets.sizes == (2, 4, 6)
    decode_shapes = {(s.num_rows, s.num_blocks) for s in engine.runner.warmed if not s.is_prefill}
    recorded = {(g[0][0], g[3][1]) for g in hpu.graphs}  # (rows, width) of each recorded graph
    assert recorded == decode_shapes and len(hpu.graphs) == len(decode_shapes) == 12
    marks_at_warmup = hpu.marks
    assert marks_at_warmup == len(engine.runner.warmed)  # one mark_step per warm-up step

    executed = []
    execute = engine.runner.execute
    engine.runner.execute = lambda batch: (
        executed.append(engine.runner.shapes.shape_for(batch)) or execute(batch)
    )
    prompts = [list(p) for p in PROMPTS] + [[3, 4, 5], list(range(60, 80))]
    engine.generate(prompts, SamplingParams(max_new_tokens=12, ignore_eos=True))
    assert len(hpu.graphs) == 12, "a graph was recorded while serving"
    assert sum(hpu.replays.values()) == sum(not s.is_prefill for s in executed) > 0
    assert set(executed) <= engine.runner.warmed
    # the padded prefill area B x L stays within --max-batch-prefill-tokens (48), warmed and served
    assert max(s.num_rows * s.row_len for s in engine.runner.warmed if s.is_prefill) <= 48
    assert {(s.num_rows, s.row_len) for s in engine.runner.warmed if s.is_prefill} == {(2, 16)}
    assert {s.num_rows for s in executed if not s.is_prefill} >= {4, 6}  # several decode buckets served
    assert hpu.marks == marks_at_warmup + len(executed)


def test_constraints_are_the_row_layout(tiny_llama):
    from tgi.core.config import ConfigError

    engine = _engine(tiny_llama, make_backend())
    c = engine.runner.constraints()
    assert (c.max_batch_size, c.mixed_batches, c.prefill_buckets, c.block_size) == (
        6,
        False,
        (16, 32, 48),
        16,
    )
    # prefill steps are padded rows, their area bounded by --max-batch-prefill-tokens as in TGI Gaudi
    assert (c.prefill_batch_buckets, c.max_padded_prefill_tokens) == ((2, 4, 6), 48)
    with pytest.raises(
        ConfigError, match="--max-batch-prefill-tokens 24 is below the smallest padded prefill"
    ):
        _engine(tiny_llama, make_backend(), max_batch_prefill_tokens=24)


def test_lora_is_refused_by_name(tiny_llama, tmp_path):
    from tgi.core.config import ConfigError

    with pytest.raises(ConfigError, match="gaudi backend's runner does not serve LoRA"):
        _engine(tiny_llama, make_backend(), lora_adapters=(("a", str(tmp_path)),))


def test_hccl_process_group(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: calls.append(kw))
    groups = []  # the command channel's side group: gloo on the host, whatever the device's collective
    monkeypatch.setattr(torch.distributed, "new_group", lambda **kw: groups.append(kw))
    monkeypatch.setattr("tgi.core.parallel.collective.create_store", lambda *args: None)  # no rank 0 here
    backend = make_backend()
    backend.create_collective(rank=1, world_size=4, init_method="tcp://127.0.0.1:1")
    assert backend.hpu.collectives == ["hccl"]  # habana_frameworks' hccl registration was asked for
    assert groups == [{"backend": "gloo"}]
    [kw] = calls
    assert (kw["backend"], kw["rank"], kw["world_size"]) == ("hccl", 1, 4) and "device_id" not in kw


def test_memory_and_device_through_the_seam():
    backend = make_backend()
    assert backend.memory_info().free == 88 * (1 << 30)  # 90 GiB free less the 2 GiB margin
    assert backend.devices()[0].name == "Fake Gaudi (CPU arithmetic)"
    assert backend.torch_device() == torch.device("cpu")


def test_bucket_variables_are_read_and_checked(monkeypatch):
    from tgi.core.config import ConfigError

    monkeypatch.setenv("BATCH_BUCKET_SIZE", "16")
    monkeypatch.setenv("PAD_SEQUENCE_TO_MULTIPLE_OF", "256")
    assert BucketSizes.from_env() == BucketSizes(batch=16, prefill_batch=4, sequence=256)
    monkeypatch.setenv("PREFILL_BATCH_BUCKET_SIZE", "0")
    with pytest.raises(ConfigError, match="PREFILL_BATCH_BUCKET_SIZE must be a positive integer, got '0'"):
        BucketSizes.from_env()
