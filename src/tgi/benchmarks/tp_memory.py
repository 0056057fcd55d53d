"""Peak resident memory per rank with tensor parallelism: `python src/tgi/benchmarks/tp_memory.py [--num-shard 1 2]`.

Saves a random-weight Llama of about 500 MB (float32 safetensors), then for each N starts a fresh process
that loads it with `--num-shard N`, generates a few tokens, and reports every rank's peak resident memory
(VmHWM) and current resident memory (VmRSS). A process that imports the same libraries but loads no model
gives the baseline that every rank pays anyway (Python, torch, transformers).

VmHWM counts the checkpoint's memory-mapped pages a rank touched while reading (page cache, shared by the
ranks and reclaimable) as well as its parameters: N = 1 touches the whole file; a rank of N touches its
row slices, but every page of the tensors it slices by columns (o_proj, down_proj).

Measured on the 2-core CI machine (482 MiB model), peak (current) MiB per rank:
    baseline, no model  300
    --num-shard 1       1483 (1029)
    --num-shard 2       1077 (794), 983 (726)
    --num-shard 4       861 (667), 779 (600), 789 (608), 764 (608)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = dict(
    vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_layers=4, num_heads=16, num_kv_heads=4
)


def child(num_shard: int, folder: str) -> None:
    from tgi.core.parallel.worker import peak_rss_bytes

    if num_shard == 0:  # baseline: the libraries, no model
        import importlib

        for module in ("tgi.backends.cpu.backend", "tgi.core.engine", "tgi.core.loading.safetensors_loader"):
            importlib.import_module(module)

        print(json.dumps([peak_rss_bytes()]))
        return
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    config = EngineConfig(
        model_id=folder,
        num_shard=num_shard,
        dtype="float32",
        max_batch_total_tokens=512,
        max_total_tokens=256,
        max_batch_prefill_tokens=32,
        max_num_seqs=2,
    )
    engine = LLMEngine.from_config(config)
    engine.generate([[5, 6, 7, 8]], SamplingParams(max_new_tokens=4))
    peaks = engine.runner.peak_memory() if num_shard > 1 else [peak_rss_bytes()]
    engine.runner.shutdown()
    print(json.dumps(peaks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-shard", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1])
        return 0
    from tgi.core.testing.tiny_models import save_random_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = save_random_model(Path(tmp) / "model", "llama", **MODEL)
        size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        print(f"model: random Llama {MODEL}, {size / 2**20:.0f} MiB of float32 safetensors")
        mib = 2**20
        for n in [0, *args.num_shard]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(n), str(folder)],
                capture_output=True,
                text=True,
                check=True,
            )
            ranks = json.loads(out.stdout.strip().splitlines()[-1])
            label = "baseline (no model)" if n == 0 else f"--num-shard {n}"
            cells = ", ".join(
                f"rank {r}: peak {peak / mib:.0f} MiB (now {now / mib:.0f})"
                for r, (peak, now) in enumerate(ranks)
            )
            print(f"{label:>20}: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
