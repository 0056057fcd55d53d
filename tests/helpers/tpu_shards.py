"""Run in a subprocess by tests/integration/test_tpu_engine.py (JAX's device count is fixed when JAX starts):
greedy tokens of small random-weight checkpoints on the TPU backend over 3 JAX CPU devices
(`--num-shard 3`), printed as JSON. Usage: python tpu_shards.py CACHE_DIR FOLDER..."""

from __future__ import annotations

import json
import sys

from tgi.backends.tpu.backend import TpuBackend
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import backend_registry

PROMPTS = ([(7 * i + 3) % 240 for i in range(21)], [5, 17, 99, 4, 200, 8, 31], list(range(40, 52)))


def main(cache: str, folders: list[str]) -> None:
    backend = TpuBackend(platform="cpu", cache_dir=cache)
    backend.prepare_devices(3)  # before JAX starts: three CPU devices
    out: dict[str, list[list[int]]] = {}
    for folder in folders:
        config = EngineConfig(
            model_id=folder, backend="tpu", dtype="float32", max_total_tokens=64,
            max_batch_total_tokens=512, max_batch_prefill_tokens=16, max_num_seqs=4, num_shard=3,
        )  # fmt: skip
        engine = LLMEngine.from_config(config, registry=backend_registry("tpu", lambda: backend))
        assert engine.runner.collective.world_size == 3
        results = engine.generate(
            [list(p) for p in PROMPTS], SamplingParams(max_new_tokens=8, ignore_eos=True)
        )
        out[folder] = [r.token_ids for r in results]
        engine.runner.shutdown()
    print(json.dumps({"devices": backend.notes, "tokens": out}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
