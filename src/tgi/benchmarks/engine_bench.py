"""The engine micro-benchmark (like TGI's `text-generation-benchmark`), straight on `LLMEngine`, no HTTP.

For every batch size B and sequence length L: B requests of L random prompt tokens are added at once; the
prefill is timed from the first `step()` until every request has its first token (one step when the step
budget holds B×L tokens), then each decode `step()` is timed (B tokens each). Each step's time inside
`runner.execute` (the model and the sampler) is noted too, so the rest (scheduling, detokenisation, Python)
shows as the difference. Warm-up runs are not counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tgi.benchmarks.stats import summarize

SCHEMA = "tgi-bench-engine/1"


@dataclass
class RunTimes:
    """One run of one (B, L) point, in seconds."""

    prefill: float  # first step until every request has its first token
    prefill_model: float  # of which in runner.execute
    prefill_steps: int
    decode_steps: list[float]  # each decode step's wall time
    decode_model: list[float]  # of which in runner.execute
    decode_tokens: int


class _TimedRunner:
    """Wraps `runner.execute` to add up the time spent in it."""

    def __init__(self, engine) -> None:
        self.inner = engine.runner.execute
        self.elapsed = 0.0
        engine.runner.execute = self

    def __call__(self, batch):
        t0 = time.perf_counter()
        try:
            return self.inner(batch)
        finally:
            self.elapsed += time.perf_counter() - t0


def engine_config_for(
    batch_sizes: Sequence[int],
    sequence_lengths: Sequence[int],
    decode_length: int,
    model_id: str | None = None,
    backend: str = "auto",
    dtype: str | None = None,
    max_batch_prefill_tokens: int | None = None,
    block_size: int = 16,
    quantize: str | None = None,
):
    """An `EngineConfig` whose KV cache and step budget hold the largest point of the grid."""
    from tgi.core.config import EngineConfig

    max_len = max(sequence_lengths) + decode_length + 1
    blocks_per_seq = -(-max_len // block_size)
    return EngineConfig(
        model_id=model_id,
        backend=backend,
        dtype=dtype,
        block_size=block_size,
        max_num_seqs=max(batch_sizes),
        max_input_tokens=max(sequence_lengths),
        max_total_tokens=max_len,
        max_batch_prefill_tokens=max_batch_prefill_tokens
        or max(b * s for b in batch_sizes for s in sequence_lengths),
        max_batch_total_tokens=max(batch_sizes) * blocks_per_seq * block_size,
        quantize=quantize,
    )


def run_point(engine, batch_size: int, seq_len: int, decode_length: int, rng: random.Random) -> RunTimes:
    """One run: add `batch_size` requests of `seq_len` random tokens, step until they are done."""
    from tgi.core.sampling_params import SamplingParams

    timer = engine.runner.execute if isinstance(engine.runner.execute, _TimedRunner) else _TimedRunner(engine)
    vocab = engine.model_info.vocab_size
    params = SamplingParams(max_new_tokens=decode_length + 1, ignore_eos=True)
    ids = [
        engine.add_request([rng.randrange(min(100, vocab // 2), vocab) for _ in range(seq_len)], params)
        for _ in range(batch_size)
    ]
    pending = set(ids)
    prefill = prefill_model = 0.0
    prefill_steps = 0
    decode_steps: list[float] = []
    decode_model: list[float] = []
    decode_tokens = 0
    while engine.has_unfinished():
        m0 = timer.elapsed
        t0 = time.perf_counter()
        events = engine.step()
        dt = time.perf_counter() - t0
        dm = timer.elapsed - m0
        if pending:
            prefill += dt
            prefill_model += dm
            prefill_steps += 1
            pending.difference_update(e.request_id for e in events if e.index == 0)
        else:
            decode_steps.append(dt)
            decode_model.append(dm)
            decode_tokens += len(events)
    return RunTimes(prefill, prefill_model, prefill_steps, decode_steps, decode_model, decode_tokens)


def bench(
    engine,
    batch_sizes: Sequence[int],
    sequence_lengths: Sequence[int],
    decode_length: int = 32,
    runs: int = 3,
    warmups: int = 1,
    seed: int = 0,
    log=None,
) -> list[dict]:
    """Every (B, L) point: `warmups` uncounted runs, then `runs` measured; one summary row per point."""
    rng = random.Random(seed)
    rows = []
    for seq_len in sequence_lengths:
        for b in batch_sizes:
            for _ in range(warmups):
                run_point(engine, b, seq_len, decode_length, rng)
            times = [run_point(engine, b, seq_len, decode_length, rng) for _ in range(runs)]
            row = summarize_point(b, seq_len, decode_length, times)
            rows.append(row)
            if log:
                log(_one_line(row))
    return rows


def summarize_point(batch_size: int, seq_len: int, decode_length: int, times: Sequence[RunTimes]) -> dict:
    prefills = [t.prefill for t in times]
    steps = [x for t in times for x in t.decode_steps]
    models = [x for t in times for x in t.decode_model]
    decode_time = sum(steps)
    prefill_time = sum(prefills)
    return {
        "batch_size": batch_size,
        "sequence_length": seq_len,
        "decode_length": decode_length,
        "runs": len(times),
        "prefill_steps": times[0].prefill_steps if times else 0,
        "prefill_ms": summarize(prefills, 1000),
        # tokens/s of prompt processed, and of sequences prefilled (TGI's "prefill throughput")
        "prefill_tok_s": batch_size * seq_len * len(times) / prefill_time if prefill_time else None,
        "prefill_seq_s": batch_size * len(times) / prefill_time if prefill_time else None,
        "prefill_model_share": sum(t.prefill_model for t in times) / prefill_time if prefill_time else None,
        "decode_step_ms": summarize(steps, 1000),
        "decode_total_ms": summarize([sum(t.decode_steps) for t in times], 1000),
        "decode_tok_s": sum(t.decode_tokens for t in times) / decode_time if decode_time else None,
        "decode_model_share": sum(models) / decode_time if decode_time else None,
    }


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _one_line(r: dict) -> str:
    return (
        f"B={r['batch_size']} L={r['sequence_length']}: prefill {_f(r['prefill_ms']['p50'])} ms "
        f"({_f(r['prefill_tok_s'], 0)} tok/s), decode step {_f(r['decode_step_ms']['p50'], 2)} ms "
        f"({_f(r['decode_tok_s'], 0)} tok/s)"
    )


def format_table(rows: Sequence[dict]) -> str:
    header = [
        "batch",
        "seq len",
        "prefill ms p50",
        "prefill tok/s",
        "decode step ms p50",
        "p90",
        "decode tok/s",
        "model share",
    ]
    variants = any("variant" in r for r in rows)
    if variants:
        header.insert(0, "weights")
    backends = any("backend" in r for r in rows)
    if backends:
        header.insert(0, "backend")
    layouts = any("parallel" in r for r in rows)
    if layouts:
        header.insert(0, "ranks")
    body = [
        [
            *([r.get("parallel", "")] if layouts else []),
            *([r.get("backend", "")] if backends else []),
            *([r.get("variant", "")] if variants else []),
            str(r["batch_size"]),
            str(r["sequence_length"]),
            _f(r["prefill_ms"]["p50"]),
            _f(r["prefill_tok_s"], 0),
            _f(r["decode_step_ms"]["p50"], 2),
            _f(r["decode_step_ms"]["p90"], 2),
            _f(r["decode_tok_s"], 0),
            "-" if r["decode_model_share"] is None else f"{r['decode_model_share']:.0%}",
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,8,32, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model-id", default=None, help="model (default: the default model)")
    a(
        "--backend",
        default="auto",
        help="backend plugin, or auto; several, comma-separated (e.g. cpu,tpu), run one after another into one "
        "table (the tpu backend on JAX's CPU devices needs TGI_JAX_PLATFORM=cpu)",
    )
    a("--dtype", default=None, help="default: the backend's")
    a("--batch-size", type=_ints, default=[1, 8, 32], help="batch sizes, e.g. 1,8,32 (default)")
    a("--sequence-length", type=_ints, default=[128], help="prompt lengths in tokens, e.g. 32,128,512")
    a("--decode-length", type=int, default=32, help="decode steps per run (default 32)")
    a("--runs", type=int, default=3, help="measured runs per point (default 3)")
    a("--warmups", type=int, default=1, help="uncounted runs per point first (default 1)")
    a("--max-batch-prefill-tokens", type=int, default=None, help="step budget (default: B×L of the grid)")
    a("--seed", type=int, default=0)
    a("--json", dest="json_path", default=None, help="write the results as JSON here")
    a(
        "--quantize",
        default=None,
        help="weight formats to run one after another, e.g. gguf,bfloat16,eetq,fp8,gptq,bitsandbytes-nf4 "
        "(see src/tgi/benchmarks/quant_variants.py; default: the model as it is)",
    )
    a("--export-dir", default="/tmp/tgi-bench-export", help="where --quantize's checkpoints are made once")
    a(
        "--parallel",
        default=None,
        help="process layouts to run one after another, e.g. 1,tp2,pp2,tp2xpp2 (one process, 2 tensor-parallel "
        "shards, 2 pipeline stages, both; see src/tgi/benchmarks/parallel_layouts.py; default: one process)",
    )


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark engine`."""
    import logging

    from tgi.benchmarks.report import machine_info
    from tgi.core.config import ConfigError
    from tgi.core.engine import LLMEngine

    if args.decode_length < 1 or args.runs < 1 or args.warmups < 0:
        print("error: --decode-length and --runs must be >= 1, --warmups >= 0", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    variants = [None]
    if args.quantize:
        from tgi.benchmarks.quant_variants import parse_variants

        try:
            variants = parse_variants(args.quantize)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    layouts = [None]
    if args.parallel:
        from tgi.benchmarks.parallel_layouts import parse_layouts

        try:
            layouts = parse_layouts(args.parallel)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    backends = [b.strip() for b in args.backend.split(",") if b.strip()] or ["auto"]
    runs = [(backend, variant, layout) for backend in backends for variant in variants for layout in layouts]
    rows = []
    for backend, variant, layout in runs:
        model_id, quantize = args.model_id, None
        if variant is not None:
            from tgi.benchmarks.quant_variants import variant_model

            model_id, quantize = variant_model(variant, args.model_id, args.export_dir)
            say(f"--- {variant}")
        if len(backends) > 1:
            say(f"--- backend {backend}")
        try:
            config = engine_config_for(
                args.batch_size,
                args.sequence_length,
                args.decode_length,
                model_id,
                backend,
                args.dtype,
                args.max_batch_prefill_tokens,
                quantize=quantize,
            )
            if layout is not None:
                say(f"--- {layout.label}")
                config = dataclasses.replace(
                    config, num_shard=layout.num_shard, pipeline_parallel_size=layout.pipeline_parallel_size
                )
            engine = LLMEngine.from_config(config, progress=say)
        except (ConfigError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        points = bench(
            engine,
            args.batch_size,
            args.sequence_length,
            args.decode_length,
            args.runs,
            args.warmups,
            args.seed,
            log=say,
        )
        for row in points:
            if variant is not None:
                row["variant"] = variant
            if len(backends) > 1:
                row["backend"] = backend
            if layout is not None:
                row["parallel"] = layout.label
        rows += points
        if (backend, variant, layout) != runs[-1]:
            engine.runner.shutdown()
            del engine  # its weights go before the next variant's load
    print(format_table(rows))
    if args.json_path:
        report = {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(),
            "model": {
                "id": engine.config.model_id,
                "architecture": engine.model_info.architecture,
                "dtype": engine.config.dtype,
                "backend": type(engine.backend).__name__,
            },
            "config": {
                "max_batch_prefill_tokens": engine.config.max_batch_prefill_tokens,
                "max_batch_total_tokens": engine.config.max_batch_total_tokens,
                "runs": args.runs,
                "warmups": args.warmups,
                "seed": args.seed,
                "quantize": args.quantize,
                "parallel": args.parallel,
            },
            "results": rows,
        }
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
        say(f"JSON report: {args.json_path}")
    engine.runner.shutdown()  # the last one too: its rank processes end with it, not with this process
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark engine", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # `python src/tgi/benchmarks/<this file> ...`
    import sys

    sys.exit(main())
