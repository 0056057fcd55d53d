"""Multi-LoRA throughput: C concurrent requests (default 8) on one engine serving 4 adapters, with 0, 1 and 4
distinct adapters in the batch, in one run (issue 20's table: the cost of 4 mixed adapters against the base).

The adapters are made with `peft` (the `lora` extra) on the model (random A and B, rank `--rank`, every
attention and MLP projection). Each measurement decodes `--output-len` tokens for each of the C requests of
`--input-len` random prompt tokens, ignoring EOS; the three mixes run in turn, `--runs` times, and the table
gives the median output tokens/s of each and its cost against the base model.

    python src/tgi/benchmarks/lora_bench.py [--model-id PATH] [--concurrency 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = "tgi-bench-lora/1"
MIXES = {"base": 0, "1 adapter": 1, "4 adapters": 4}  # name -> distinct adapters in the batch


def run_once(
    engine, prompts: list[list[int]], adapters: list[str | None], output_len: int
) -> tuple[float, float]:
    """(output tokens/s, this process's CPU ms per output token) of generating `output_len` tokens for every
    prompt at once. CPU time moves less than wall time when other work shares the cores."""
    from tgi.core.sampling_params import SamplingParams

    start, cpu = time.perf_counter(), time.process_time()
    for prompt, adapter in zip(prompts, adapters, strict=True):
        params = SamplingParams(max_new_tokens=output_len, ignore_eos=True, adapter_id=adapter)
        engine.add_request(list(prompt), params)
    produced = 0
    while engine.has_unfinished():
        produced += len(engine.step())
    return produced / (time.perf_counter() - start), 1e3 * (time.process_time() - cpu) / produced


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model-id", default=None, help="a checkpoint folder or .gguf file; default: the default model"
    )
    p.add_argument("--dtype", default=None, help="default: the backend's")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)

    from tgi.benchmarks.report import machine_info
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.loading import default_model_path
    from tgi.core.testing.lora import load_base, write_random_lora

    base = args.model_id or default_model_path()
    rng = random.Random(0)
    results: dict[str, list[float]] = {name: [] for name in MIXES}  # output tok/s per run
    cpu_ms: dict[str, list[float]] = {name: [] for name in MIXES}  # CPU ms per output token per run
    with tempfile.TemporaryDirectory() as folder:
        names = [f"a{i}" for i in range(4)]
        hf_model = load_base(base)
        for i, name in enumerate(names):
            write_random_lora(
                Path(folder) / name, hf_model, r=args.rank, lora_alpha=args.rank, std=0.02, seed=i
            )
        del hf_model
        config = EngineConfig(
            model_id=args.model_id, dtype=args.dtype, max_num_seqs=max(args.concurrency, 1),
            max_total_tokens=args.input_len + args.output_len + 1,
            lora_adapters=tuple((n, str(Path(folder) / n)) for n in names),
        )  # fmt: skip
        engine = LLMEngine.from_config(config, progress=lambda m: print(m, file=sys.stderr, flush=True))
        vocab = engine.model_info.vocab_size
        for run in range(args.runs + 1):  # the first round warms up and is dropped
            order = list(MIXES)[run % 3 :] + list(MIXES)[: run % 3]  # each mix in each place in turn
            for mix in order:
                distinct = MIXES[mix]
                # fresh prompts each time: the prefix cache must not serve one mix what another computed
                prompts = [
                    [rng.randrange(vocab) for _ in range(args.input_len)] for _ in range(args.concurrency)
                ]
                adapters = [names[i % distinct] if distinct else None for i in range(args.concurrency)]
                tok_s, ms = run_once(engine, prompts, adapters, args.output_len)
                if run:
                    results[mix].append(tok_s)
                    cpu_ms[mix].append(ms)
                print(
                    f"run {run} {mix}: {tok_s:.1f} tok/s, {ms:.2f} CPU ms/token", file=sys.stderr, flush=True
                )
    base_tok_s, base_ms = statistics.median(results["base"]), statistics.median(cpu_ms["base"])
    print(
        f"| C={args.concurrency}, rank {args.rank} | output tok/s (median of {args.runs}) | cost vs base | "
        "CPU ms per token | cost vs base |"
    )
    print("|---|---|---|---|---|")
    for mix in MIXES:
        tok_s, ms = statistics.median(results[mix]), statistics.median(cpu_ms[mix])
        print(
            f"| {mix} | {tok_s:.1f} | {100 * (base_tok_s / tok_s - 1):+.1f} % | {ms:.2f} | "
            f"{100 * (ms / base_ms - 1):+.1f} % |"
        )
    if args.json_path:
        report = {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(),
            "model": str(base),
            "settings": vars(args),
            "results": results,
            "cpu_ms_per_token": cpu_ms,
        }
        Path(args.json_path).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
