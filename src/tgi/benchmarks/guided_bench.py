"""The cost of guided decoding, straight on the engine (no HTTP): `tgi benchmark guided`.

1. Compile time of every grammar in `tgi.core.testing.guided_cases` (20 JSON schemas, 3 regexes) and of a
   `tool_choice: "auto"` grammar, each on a fresh compiler (cold), and a cached lookup.
2. Decode step time at each batch size, without and with a JSON schema on every request: B requests decode
   together (the schema is a list of at least `--min-items` strings, so that the constrained requests
   cannot end early; the unconstrained ones ignore EOS and generate as many tokens); only steps in which
   all B requests decode are counted. The two kinds run alternately, `--repeats` times each, and the
   median step is reported, with the time spent computing the masks. Two schemas: free strings (their
   masks come from llguidance's precomputed token sets) and strings with `maxLength` (whose masks walk the
   vocabulary at every step: the costly case).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from tgi.benchmarks.report import machine_info

SCHEMA = "tgi-bench-guided/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-id", default=None, help="default: the default model")
    p.add_argument("--dtype", default=None, help="default: the backend's (as `tgi launch` chooses)")
    p.add_argument("--batch-sizes", default="1,32", help="comma-separated (default 1,32)")
    p.add_argument("--steps", type=int, default=48, help="decode steps per run (default 48)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each kind per batch size (default 3)")
    p.add_argument("--min-items", type=int, default=40, help="items the benchmark schema requires")
    p.add_argument("--json", dest="json_path", default=None, help="write the results here")


def compile_times(engine) -> dict:
    from tgi.core.guided import Grammar
    from tgi.core.guided.compiler import GrammarCompiler
    from tgi.core.testing.guided_cases import JSON_SCHEMAS, REGEXES

    grammars = {f"json:{n}": Grammar.json_schema(s) for n, s in JSON_SCHEMAS.items()}
    grammars |= {f"regex:{n}": Grammar.regex(r) for n, (r, _) in REGEXES.items()}
    tool = {"type": "function", "function": {"name": "f", "parameters": JSON_SCHEMAS["recipe"]}}
    from tgi.server.chat.tools import plan_tools

    grammars["tools:auto"] = plan_tools([tool], "auto").grammar
    compiler = GrammarCompiler(engine.tokenizer, engine.model_info.vocab_size, engine.eos_token_ids)
    compiler.lltokenizer()  # built once per server, not per grammar
    cold, cached = {}, []
    for name, grammar in grammars.items():
        t0 = time.perf_counter()
        compiler.compile(grammar)
        cold[name] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        compiler.compile(grammar)
        cached.append((time.perf_counter() - t0) * 1e3)
    values = sorted(cold.values())
    return {
        "cold_ms": cold,
        "cold_ms_median": statistics.median(values),
        "cold_ms_max": values[-1],
        "cached_ms_median": statistics.median(cached),
    }


def _decode_steps(engine, batch: int, steps: int, grammar) -> tuple[list[float], list[float]]:
    """(wall time of each all-decode step, time in `guided.masks` during it), in ms."""
    from tgi.core.sampling_params import SamplingParams

    masks_time = [0.0]
    inner = engine.guided.masks

    def timed(sampled):
        t0 = time.perf_counter()
        try:
            return inner(sampled)
        finally:
            masks_time[0] += time.perf_counter() - t0

    engine.guided.masks = timed
    try:
        prompt = engine.tokenizer.encode("Here is a long list of short words as JSON:")
        params = SamplingParams(max_new_tokens=steps + 2, grammar=grammar, ignore_eos=grammar is None)
        for _ in range(batch):
            engine.add_request(list(prompt), params)
        walls, masks = [], []
        while engine.has_unfinished():
            before, t0 = masks_time[0], time.perf_counter()
            events = engine.step()
            wall = time.perf_counter() - t0
            if len(events) == batch and all(e.index > 0 for e in events):
                walls.append(wall * 1e3)
                masks.append((masks_time[0] - before) * 1e3)
        return walls, masks
    finally:
        del engine.guided.masks


def step_times(engine, batch_sizes: list[int], steps: int, repeats: int, min_items: int) -> list[dict]:
    from tgi.core.guided import Grammar

    rows = []
    for b in batch_sizes:
        for kind, item in (
            ("free strings", {"type": "string"}),
            ("maxLength 24", {"type": "string", "maxLength": 24}),
        ):
            schema = {"type": "array", "items": item, "minItems": min_items, "maxItems": min_items + 8}
            grammar = Grammar.json_schema(schema)
            engine.compile_grammar(grammar)
            plain, guided, masks = [], [], []
            _decode_steps(engine, b, 4, None)  # warm-up of this batch size
            for _ in range(repeats):
                plain += _decode_steps(engine, b, steps, None)[0]
                walls, mask = _decode_steps(engine, b, steps, grammar)
                guided += walls
                masks += mask
            p50_plain, p50_guided = statistics.median(plain), statistics.median(guided)
            rows.append(
                {
                    "batch_size": b,
                    "schema": kind,
                    "steps_counted": [len(plain), len(guided)],
                    "step_ms_p50_unconstrained": p50_plain,
                    "step_ms_p50_json_schema": p50_guided,
                    "mask_ms_p50": statistics.median(masks),
                    "slowdown_pct": 100 * (p50_guided / p50_plain - 1),
                }
            )
    return rows


def markdown(result: dict) -> str:
    m, c = result["machine"], result["compile"]
    lines = [
        f"Machine: {m.get('cpu')} ({', '.join(m.get('cpu_features', []))}), {m.get('cpu_count')} CPUs; "
        f"dtype {result['dtype']}",
        "",
        "| batch | schema | step p50, no grammar (ms) | step p50, JSON schema (ms) | of which masks (ms) | slower by |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["steps"]:
        lines.append(
            f"| {r['batch_size']} | {r.get('schema', '')} | {r['step_ms_p50_unconstrained']:.2f} | {r['step_ms_p50_json_schema']:.2f} "
            f"| {r['mask_ms_p50']:.3f} | {r['slowdown_pct']:+.1f} % |"
        )
    lines += [
        "",
        f"Compile (cold, {len(c['cold_ms'])} grammars): median {c['cold_ms_median']:.2f} ms, "
        f"max {c['cold_ms_max']:.2f} ms; cached lookup {c['cached_ms_median'] * 1e3:.1f} us",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine

    sizes = [int(x) for x in args.batch_sizes.split(",")]
    config = EngineConfig(
        model_id=args.model_id,
        dtype=args.dtype,
        max_num_seqs=max(sizes),
        max_total_tokens=1024,
        max_batch_total_tokens=max(sizes) * 1024,
        max_batch_prefill_tokens=1024,
        prefix_caching=False,  # every run prefills its prompts, as the first one did
    )
    engine = LLMEngine.from_config(config, progress=lambda msg: print(msg, file=sys.stderr))
    result = {
        "schema": SCHEMA,
        "machine": machine_info(),
        "dtype": engine.config.dtype,
        "compile": compile_times(engine),
        "steps": step_times(engine, sizes, args.steps, args.repeats, args.min_items),
    }
    print(markdown(result))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=2)
    return 0
