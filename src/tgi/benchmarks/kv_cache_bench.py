"""`tgi benchmark kv-cache` (or `python -m tgi.benchmarks.kv_cache_bench`): what a quantized KV cache
(`--kv-cache-dtype`) buys and costs on a model (the default one unless `--model-id`), each KV dtype beside the
model's own (`auto`):

- capacity: bytes a token takes in the cache (keys and values of every layer, scales included) and how many
  tokens the same memory holds, against `auto`;
- quality, teacher-forced (never free-running greedy, whose first near-tie decides the rest): the perplexity of
  a fixed text (`perplexity.py`: llama-perplexity's windows of `--n-ctx` tokens, each prefilled in chunks of a
  quarter window, so that the chunks read each other's keys from the cache), and the second half of the text's
  first window fed one decode at a time after its first half: the share of decodes whose top token is
  `auto`'s (top-1 agreement) and the largest |difference| of that token's logprob where they agree. The
  row `float32` is the model's dtype against float32 (KV `auto` both): the stray a cache's should stay within;
- speed: decode steps of `--batch` requests over prompts of `--context` tokens (`engine_bench.run_point`),
  the median step and the decode throughput, per KV dtype.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

KV_DTYPES = ("auto", "int8", "fp8_e4m3fn", "fp8_e5m2")
DEFAULT_TEXT = Path(__file__).parent / "texts" / "coriolanus_act1.txt"


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model-id", default=None, help="the model (default: the default model)")
    a(
        "--kv-dtypes",
        default=",".join(KV_DTYPES),
        help=f"KV dtypes to compare (default: {','.join(KV_DTYPES)})",
    )
    a("--text", default=str(DEFAULT_TEXT), help="UTF-8 text file (default: Coriolanus, Act I, Scene 1)")
    a(
        "--n-ctx",
        type=int,
        default=512,
        help="perplexity window, and the teacher-forced decode's (default 512)",
    )
    a("--batch", type=int, default=8, help="decode batch of the speed rows (default 8)")
    a(
        "--context",
        default="512,2048",
        help="prompt lengths of the speed rows, comma-separated (default 512,2048)",
    )
    a("--decode-steps", type=int, default=32, help="decode steps timed per speed row (default 32)")
    a("--skip", default="", help="parts to leave out: capacity, quality, speed (comma-separated)")
    a("--json", dest="json_path", default=None, help="write the results as JSON here")


def _engine(model_id, kv: str, dtype: str | None, n_ctx: int):
    from tgi.benchmarks.perplexity import perplexity_engine_config
    from tgi.core.engine import LLMEngine

    config = perplexity_engine_config(model_id, n_ctx, dtype, None)
    config = dataclasses.replace(config, kv_cache_dtype=kv, max_batch_prefill_tokens=max(n_ctx // 4, 16))
    return LLMEngine.from_config(config)


def _token_ids(text_path: str, tokenizer) -> list[int]:
    """The text's tokens, no BOS (the same for every row: the comparison is between rows)."""
    return list(tokenizer.encode(Path(text_path).read_text(encoding="utf-8"), add_special_tokens=False))


def quality(model_id, kvs, text_path: str, n_ctx: int) -> list[dict]:
    """Per KV dtype (and float32 with the model's own cache): perplexity, and the teacher-forced decode's
    agreement with `auto` in the model's dtype."""
    from tgi.benchmarks.perplexity import engine_perplexity
    from tgi.core.testing.kv_cache_conformance import teacher_forced

    runs = [(kv, None) for kv in kvs] + [("auto", "float32")]
    out, base = [], None
    for kv, dtype in runs:
        engine = _engine(model_id, kv, dtype, n_ctx)
        try:
            ids = _token_ids(text_path, engine.tokenizer)
            ppl = engine_perplexity(engine, ids, n_ctx, None)
            # (on the same engine: the perplexity's requests are done, its blocks free, no prefix cache)
            _, rows = teacher_forced(engine, ids[:n_ctx], n_ctx // 2)
            row = {
                "kv": kv,
                "dtype": engine.config.dtype,
                "perplexity": ppl.perplexity,
                "scored": ppl.num_scored,
            }
        finally:
            engine.close()
        if base is None:
            base = (row["perplexity"], rows)
        agree = [a[0] == b[0] for a, b in zip(rows, base[1], strict=True)]
        diffs = [abs(a[1] - b[1]) for a, b in zip(rows, base[1], strict=True) if a[0] == b[0]]
        row.update(
            perplexity_change=row["perplexity"] / base[0] - 1,
            decodes=len(rows),
            top1_agreement=sum(agree) / len(agree),
            max_logprob_diff=max(diffs, default=0.0),
            mean_logprob_diff=sum(diffs) / max(len(diffs), 1),
        )
        out.append(row)
    return out


def capacity(model_id, kvs, n_ctx: int) -> list[dict]:
    """Bytes per token of each KV dtype's cache, and tokens held in the memory `auto` takes for 100k tokens."""
    rows = []
    for kv in kvs:
        engine = _engine(model_id, kv, None, n_ctx)
        try:
            spec = engine.runner.kv_cache_spec()
        finally:
            engine.close()
        rows.append(
            {
                "kv": kv,
                "stored": spec.describe_kv(),
                "bytes_per_token": spec.bytes_per_block // spec.block_size,
            }
        )
    per_token = rows[0]["bytes_per_token"]
    for r in rows:
        r["tokens_in_auto_100k"] = 100_000 * per_token // r["bytes_per_token"]
        r["ratio"] = per_token / r["bytes_per_token"]
    return rows


def speed(model_id, kvs, batch: int, contexts: list[int], steps: int) -> list[dict]:
    from tgi.benchmarks.engine_bench import engine_config_for, run_point
    from tgi.core.engine import LLMEngine

    rows = []
    for context in contexts:
        for kv in kvs:
            prefill = min(2048, batch * context)  # prompts prefilled in chunks of at most 2048 tokens a step
            config = engine_config_for([batch], [context], steps, model_id, max_batch_prefill_tokens=prefill)
            engine = LLMEngine.from_config(dataclasses.replace(config, kv_cache_dtype=kv))
            try:
                run_point(engine, batch, min(16, context), 1, random.Random(0))  # warm-up
                times = run_point(engine, batch, context, steps, random.Random(1))
            finally:
                engine.close()
            step = statistics.median(times.decode_steps)
            rows.append({"kv": kv, "batch": batch, "context": context, "decode_step_ms": step * 1e3,
                         "decode_tokens_per_s": times.decode_tokens / sum(times.decode_steps)})  # fmt: skip
    return rows


def format_markdown(report: dict) -> str:
    lines = [f"CPU: {report['cpu']}; model: {report['model']}", ""]
    if report.get("capacity"):
        lines += [
            "| KV dtype | stored | bytes / token | tokens in the memory of 100k `auto` |",
            "|---|---|---|---|",
        ]
        lines += [f"| {r['kv']} | {r['stored']} | {r['bytes_per_token']} | {r['tokens_in_auto_100k']:,} ({r['ratio']:.2f}x) |" for r in report["capacity"]]  # fmt: skip
        lines.append("")
    if report.get("quality"):
        lines += ["| KV dtype | dtype | perplexity | vs auto | decode top-1 agreement | logprob diff: mean, max |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for r in report["quality"]:
            lines.append(
                f"| {r['kv']} | {r['dtype']} | {r['perplexity']:.4f} | {100 * r['perplexity_change']:+.2f} % | "
                f"{100 * r['top1_agreement']:.1f} % of {r['decodes']} | "
                f"{r['mean_logprob_diff']:.4f}, {r['max_logprob_diff']:.3f} |"
            )
        lines.append("")
    if report.get("speed"):
        lines += [
            "| KV dtype | batch | context | decode step (median) | decode tokens/s |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {r['kv']} | {r['batch']} | {r['context']} | {r['decode_step_ms']:.1f} ms | {r['decode_tokens_per_s']:.1f} |" for r in report["speed"]]  # fmt: skip
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tgi.benchmarks.perplexity_cli import cpu_name

    kvs = [k for k in args.kv_dtypes.split(",") if k]
    if kvs[0] != "auto":
        kvs.insert(0, "auto")
    skip = set(args.skip.split(",")) - {""}
    t0 = time.perf_counter()
    report = {"cpu": cpu_name(), "model": args.model_id or "the default model"}
    if "capacity" not in skip:
        report["capacity"] = capacity(args.model_id, kvs, args.n_ctx)
    if "quality" not in skip:
        report["quality"] = quality(args.model_id, kvs, args.text, args.n_ctx)
    if "speed" not in skip:
        contexts = [int(c) for c in args.context.split(",") if c]
        report["speed"] = speed(args.model_id, kvs, args.batch, contexts, args.decode_steps)
    report["seconds"] = time.perf_counter() - t0
    print(format_markdown(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tgi.benchmarks.kv_cache_bench", description=__doc__)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
