"""Mixture-of-experts micro-benchmark: the engine (`engine_bench`) on a tiny random Mixtral, its expert
products grouped per expert (`tgi.core.models.moe.grouped_moe`, what serving runs) against the per-token
loop (`per_token_moe`, the reference), on the same engine and the same requests.

    python src/tgi/benchmarks/moe_bench.py [--batch-size 1,8] [--sequence-length 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile

from tgi.benchmarks.engine_bench import _ints, bench, engine_config_for, format_table

SCHEMA = "tgi-bench-moe/1"
#: the model: 2 layers, hidden 256, 8 experts of intermediate 512, top 2 (Mixtral's routing)
SHAPE = dict(
    vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
    num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=1024,
    bos_token_id=0, eos_token_id=1,
)  # fmt: skip


def use_experts(engine, mode: str) -> int:
    """Make every `GroupedExperts` of the engine's model compute its products `mode`-wise ("grouped", the
    default path, or "per-token"); returns how many layers were switched."""
    from tgi.core.models.moe import GroupedExperts, per_token_moe

    count = 0
    for module in engine.runner.model.modules():
        if isinstance(module, GroupedExperts):
            act = module.act
            module.experts_kernel = (
                None
                if mode == "grouped"
                else (lambda x, w13, w2, w, ids, act=act: per_token_moe(x, w13, w2, w, ids, act))
            )
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=_ints, default=[1, 8])
    p.add_argument("--sequence-length", type=_ints, default=[32])
    p.add_argument("--decode-length", type=int, default=16)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)

    import transformers

    from tgi.benchmarks.report import machine_info
    from tgi.core.engine import LLMEngine
    from tgi.core.testing.tiny_models import save_random_checkpoint

    results = {}
    with tempfile.TemporaryDirectory() as folder:
        save_random_checkpoint(folder, transformers.MixtralConfig(**SHAPE), init_std=0.05)
        config = engine_config_for(
            args.batch_size, args.sequence_length, args.decode_length, folder, "cpu", args.dtype
        )
        engine = LLMEngine.from_config(config)
        for mode in ("grouped", "per-token"):
            use_experts(engine, mode)
            print(f"-- experts {mode}", file=sys.stderr, flush=True)
            rows = bench(engine, args.batch_size, args.sequence_length, args.decode_length, args.runs,
                         log=lambda s: print(s, file=sys.stderr, flush=True))  # fmt: skip
            results[mode] = rows
            print(f"experts {mode}:\n{format_table(rows)}\n")
    for g, t in zip(results["grouped"], results["per-token"], strict=True):
        print(
            f"B={g['batch_size']} L={g['sequence_length']}: prefill x"
            f"{t['prefill_ms']['p50'] / g['prefill_ms']['p50']:.1f}, decode step x"
            f"{t['decode_step_ms']['p50'] / g['decode_step_ms']['p50']:.1f} (per-token / grouped)"
        )
    if args.json_path:
        report = {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(),
            "model": {"architecture": "MixtralForCausalLM", "shape": SHAPE, "dtype": args.dtype},
            "results": results,
        }
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
