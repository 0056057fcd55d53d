"""Each rank of a tensor-parallel group on its own GPU: rank r binds device r (the current device, and the
backend's) before its collective is made, checked on a stand-in `torch.cuda` with two devices
(`fake_gpu_devices`), through the real rank-0 runner and a spawned worker process."""

from __future__ import annotations

import functools
import json
import time

import pytest
from fake_gpu_devices import DeviceRecordingBackend

from tgi.core import __version__
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.loading.source import ModelSource
from tgi.core.parallel.runner import TensorParallelRunner
from tgi.core.plugins import BackendSpec
from tgi.core.testing.tiny_models import save_random_model


def test_each_rank_binds_its_own_device_before_its_collective(tmp_path):
    model = tmp_path / "model"
    save_random_model(model, "llama", num_kv_heads=2)
    create = functools.partial(DeviceRecordingBackend, str(tmp_path), 2)
    spec = BackendSpec("cuda", __version__, INTERFACE_VERSION, 0, "stand-in GPUs", ProbeResult.ok, create)
    backend = spec.create()
    backend.spec = spec
    source = ModelSource(str(model), "safetensors", str(model), str(model))
    config = EngineConfig(model_id=str(model), dtype="float32", num_shard=2)
    runner = TensorParallelRunner.start(backend, source, config, 2, shutdown_process=False)
    # the stand-in collective has no rendezvous to hold rank 0 until the worker is up, and a worker leaves at
    # once when told to shut down: wait for its record first
    deadline = time.monotonic() + 120
    while not (tmp_path / "rank-1.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.shutdown()
    records = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    for rank, record in enumerate(records):
        assert record == {"set_device_calls": [rank], "current_device": rank, "torch_device": f"cuda:{rank}"}


def test_a_rank_without_a_device_is_refused_naming_the_count(tmp_path):
    backend = DeviceRecordingBackend(str(tmp_path), num_devices=2)
    with pytest.raises(ConfigError, match=r"rank 2 needs cuda:2, but this process sees 2 cuda device"):
        backend.bind_rank(2)
    assert backend.device_module.set_device_calls == []
