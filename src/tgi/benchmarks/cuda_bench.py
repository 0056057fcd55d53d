"""Benchmark of the CUDA backend on a Llama-3.1-8B-shaped model with random weights (no download).

Run on a machine with an NVIDIA GPU (about 16 GB for the weights plus the KV cache; an H100/H200 is the
target). It writes the checkpoint once (bfloat16 safetensors + a word-level tokenizer, ~16 GB on disk), then:

1. batch-1 decode: tokens/s after the first token, against the memory-bandwidth ceiling
   (bandwidth / weight bytes: every decode step reads every weight once); goal >= 80 % of the ceiling;
2. throughput: 128 concurrent requests of 512 prompt and 256 output tokens (ignore_eos), output tokens/s
   over the whole run; goal >= 10,000 tokens/s on an H100;
3. the same two measurements with `transformers` (`generate`, static batch, left padding) on the same card,
   in the same run, unless --skip-transformers; goal >= 3x transformers' throughput.

    python src/tgi/benchmarks/cuda_bench.py --model-dir /tmp/llama8b-random --json $OUT/cuda_bench.json

With --quantize eetq or fp8 the model is quantized at load and its linears computed by the Triton
weight-only GEMMs (weight bytes and the bandwidth ceiling counted from the quantized tensors).

With --quant-gemm it times instead the Triton quantized GEMMs (GPTQ int4 with and without act-order, GPTQ
int8, AWQ int4, FP8; `cuda_quant_gemm.py`) against the dense product on the 8B model's linear shapes, at
--quant-rows input rows, and checks each against its dequantized weight (no checkpoint is written):

    python src/tgi/benchmarks/cuda_bench.py --quant-gemm --json $OUT/quant_gemm.json

Every timed figure follows a warm-up of the same shape (kernels compiled, CUDA graphs captured, the caching
allocator filled). The batch-1 roofline divides the bandwidth by the bytes a decode step reads
(`weight_bytes_read_per_step`: every weight but the input embedding table, of which a step gathers one row; a
table tied to the output head is read by the head and counts). Section `step` times `--step-concurrency`
(128) decode steps' latency with CUDA events and reports the GPU-busy fraction (the union of the kernels'
intervals over the wall time, from `torch.profiler`) and the kernels launched per step.

With `--dry-run` (or `TGI_GPU_DRY_RUN=1`) every section runs on the CPU, on a 2-layer model of the same
architecture, `CudaBackend` on CPU tensors in Triton's interpreter, a few requests and steps: it checks the
benchmark itself (each field is written; the figures mean nothing).

Prints one line per figure, with the device name; nothing here has been run on a GPU yet.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

from tgi.benchmarks.cuda_bench_device import Device, bandwidth_of, dry_backend

SECTIONS = ("batch1", "throughput", "step", "transformers")
ENV_DRY_RUN = "TGI_GPU_DRY_RUN"
#: prompt tokens of the batch-1 and decode-step requests (`--prompt-len`)
PROMPT_LEN = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--model-dir", default="/tmp/tgi-llama-3.1-8b-random", help="checkpoint folder (written if missing)"
    )
    p.add_argument("--num-layers", type=int, default=None, help="fewer layers for a quick smoke run")
    p.add_argument("--num-requests", type=int, default=128)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=256, help="tokens generated in the batch-1 run")
    p.add_argument(
        "--prompt-len",
        type=int,
        default=PROMPT_LEN,
        help="prompt tokens of the batch-1 and decode-step requests",
    )
    p.add_argument(
        "--max-batch-prefill-tokens", type=int, default=None,
        help="the engine's token budget of one step (default: the engine's), the warm-up's largest prefill",
    )  # fmt: skip
    p.add_argument("--bandwidth", type=float, default=None, help="TB/s of the card (default: from its name)")
    p.add_argument("--attention", default="triton", help="attention implementation (TGI_ATTENTION)")
    p.add_argument("--cuda-graphs", action="store_true", help="capture decode steps as CUDA graphs")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument(
        "--compare-waited", action="store_true",
        help="section 'throughput' runs twice on one engine: steps overlapped (--async-scheduling, the "
        "default) and every step waited for",
    )  # fmt: skip
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument(
        "--quantize", choices=("eetq", "fp8"), default=None,
        help="quantize the random bfloat16 checkpoint at load (the Triton int8 / FP8 GEMMs); transformers "
        "stays bfloat16",
    )  # fmt: skip
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument(
        "--quant-gemm", action="store_true", help="time the quantized GEMM kernels instead of the model"
    )
    p.add_argument("--quant-rows", default="1,16,64,256,2048", help="input row counts for --quant-gemm")
    p.add_argument("--quant-dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--quant-iters", type=int, default=50, help="timed calls per measurement")
    p.add_argument(
        "--quant-split",
        type=int,
        default=None,
        help="programs along K for every product (default: heuristic)",
    )
    p.add_argument(
        "--sections", default=",".join(SECTIONS),
        help=f"comma-separated parts to run, of {', '.join(SECTIONS)} (default: all)",
    )  # fmt: skip
    p.add_argument("--step-concurrency", type=int, default=128, help="requests decoding in section 'step'")
    p.add_argument("--step-iters", type=int, default=20, help="timed decode steps in section 'step'")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed decode steps before each timing")
    p.add_argument(
        "--dry-run", action="store_true", default=os.environ.get(ENV_DRY_RUN, "") not in ("", "0"),
        help=f"run every section on the CPU on a tiny model (Triton's interpreter): checks the benchmark, "
        f"measures nothing (env {ENV_DRY_RUN}=1)",
    )  # fmt: skip
    args = p.parse_args(argv)
    args.sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown or not args.sections:
        p.error(f"--sections takes names of {', '.join(SECTIONS)}, got {unknown or 'none'}")
    for name in (
        "step_concurrency",
        "step_iters",
        "num_requests",
        "input_len",
        "output_len",
        "decode_tokens",
        "prompt_len",
    ):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup_steps < 0:
        p.error("--warmup-steps must be >= 0")
    if args.dry_run and args.quant_gemm:
        p.error(
            "--dry-run runs the model benchmark; --quant-gemm has no dry run (cuda_quant_gemm needs a GPU)"
        )
    try:
        args.quant_rows = [int(r) for r in args.quant_rows.split(",")]
    except ValueError:
        p.error(f"--quant-rows must be comma-separated integers, got {args.quant_rows!r}")
    if any(r < 1 for r in args.quant_rows):
        p.error("--quant-rows must be positive")
    return args


def random_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(length)] for _ in range(n)]


def weight_bytes_read_per_step(model) -> int:
    """The weight bytes one decode step reads: every parameter (and every quantized linear's packed tensors)
    once, except the input embedding table, of which a step gathers only its tokens' rows; a table tied to
    the output head is read whole by the head, so it counts then."""
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    embed_weight = getattr(embed, "weight", None)
    head_weight = getattr(getattr(model, "lm_head", None), "weight", None)
    tied = embed_weight is not None and head_weight is not None and head_weight is embed_weight
    total = 0
    for p in model.parameters():  # each tensor once (a tied table is one parameter)
        if p is embed_weight and not tied:
            continue
        total += p.numel() * p.element_size()
    # quantized linears hold no dense parameter: their kernels' tensors count instead
    total += sum(
        getattr(m.linear_kernel, "nbytes", 0) for m in model.modules() if getattr(m, "quant_format", None)
    )
    return total


def step_tokens(args: argparse.Namespace) -> int:
    """The tokens each request of section `step` generates: its warm-up, timed and profiled steps, and the
    step that finishes its prefill."""
    return args.warmup_steps + 2 * args.step_iters + 2


def make_engine(args: argparse.Namespace):
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.testing.model import backend_registry

    os.environ["TGI_ATTENTION"] = args.attention
    os.environ["TGI_CUDA_GRAPHS"] = "1" if args.cuda_graphs else "0"
    if args.dry_run:
        create = lambda: dry_backend(one_split=True)  # noqa: E731 - its contexts never reach a split
    else:
        from tgi.backends.cuda.backend import CudaBackend

        create = (
            CudaBackend  # through the plugin host, no entry point needed (the repo need not be installed)
        )
    config = EngineConfig(
        model_id=args.model_dir, backend="cuda", dtype="float32" if args.dry_run else "bfloat16",
        max_total_tokens=8 + max(
            args.input_len + args.output_len,
            args.prompt_len + args.decode_tokens + 1,
            args.prompt_len + step_tokens(args),
        ),
        max_num_seqs=max(args.max_num_seqs, args.step_concurrency), quantize=args.quantize,
        max_batch_prefill_tokens=args.max_batch_prefill_tokens,
    )  # fmt: skip
    return LLMEngine.from_config(config, registry=backend_registry("cuda", create), progress=print)


def bench_batch1(args, engine, device: Device, figures: dict) -> None:
    """Tokens/s of one request after its first token, after a warm-up request of the same shape."""
    from tgi.core.sampling_params import SamplingParams

    vocab = engine.model_info.vocab_size
    prompt = random_prompts(1, args.prompt_len, vocab, 1)[0]
    engine.generate([prompt], SamplingParams(max_new_tokens=min(8, args.decode_tokens) + 1, ignore_eos=True))
    engine.add_request(prompt, SamplingParams(max_new_tokens=args.decode_tokens + 1, ignore_eos=True))
    stamps = []
    while engine.has_unfinished():
        if engine.step():
            device.synchronize()
            stamps.append(time.perf_counter())
    decode_tps = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    figures["tgi_batch1_decode_tokens_per_s"] = decode_tps
    figures["tgi_batch1_decode_step_ms"] = 1e3 / decode_tps
    bw = None if args.dry_run else bandwidth_of(device.name, args.bandwidth)
    ceiling = bw / figures["weight_bytes_read_per_step"] if bw else None
    figures["bandwidth_ceiling_tokens_per_s"] = ceiling
    figures["tgi_batch1_fraction_of_ceiling"] = decode_tps / ceiling if ceiling else None
    print(
        f"tgi batch-1 decode: {decode_tps:.1f} tokens/s"
        + (
            f" ({decode_tps / ceiling:.0%} of {ceiling:.1f})"
            if ceiling
            else " (no bandwidth known: no roofline)"
        )
    )


def bench_throughput(args, engine, device: Device, figures: dict) -> None:
    """Output tokens/s of `--num-requests` requests, after a warm-up of a few requests of the same shape."""
    from tgi.core.sampling_params import SamplingParams

    vocab = engine.model_info.vocab_size
    warm = random_prompts(min(8, args.num_requests), args.input_len, vocab, 3)
    engine.generate(warm, SamplingParams(max_new_tokens=min(4, args.output_len), ignore_eos=True))
    params = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    prompts = random_prompts(args.num_requests, args.input_len, vocab, 2)
    figures["async_scheduling"] = engine.steps.overlapping
    overlapping = [engine.steps.overlapping] + (
        [False] if args.compare_waited and engine.steps.overlapping else []
    )
    keys = ("tgi_throughput_output_tokens_per_s", "tgi_throughput_waited_output_tokens_per_s")
    for key, overlap in zip(keys, overlapping, strict=False):
        engine.steps.overlapping = overlap  # the same engine and prompts, steps waited for the second time
        device.synchronize()
        t0 = time.perf_counter()
        results = engine.generate(prompts, params)
        device.synchronize()
        elapsed = time.perf_counter() - t0
        out_tokens = sum(len(r.token_ids) for r in results)
        figures[key] = out_tokens / elapsed
        print(
            f"tgi {args.num_requests} x ({args.input_len} in, {args.output_len} out), steps "
            f"{'overlapped' if overlap else 'waited for'}: {out_tokens / elapsed:.0f} output tokens/s in {elapsed:.1f}s"
        )
    engine.steps.overlapping = overlapping[0]
    if len(overlapping) == 2:
        figures["async_scheduling_speedup"] = (
            figures["tgi_throughput_output_tokens_per_s"]
            / figures["tgi_throughput_waited_output_tokens_per_s"]
        )


def bench_tgi(args: argparse.Namespace, device: Device, figures: dict) -> None:
    import torch

    engine = make_engine(args)
    figures["kv_cache_tokens"] = engine.config.max_batch_total_tokens
    graphed = getattr(engine.runner, "graphed", None)
    figures["cuda_graphs_captured"] = graphed is not None
    if args.cuda_graphs and graphed is None:
        print("CUDA graphs asked for but none captured (the dry run's CPU tensors, or LoRA): decode is eager")
    model = graphed.model if graphed is not None else engine.runner.model  # the graphs replay this model
    figures["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        getattr(m.linear_kernel, "nbytes", 0) for m in model.modules() if getattr(m, "quant_format", None)
    )
    figures["weight_bytes_read_per_step"] = weight_bytes_read_per_step(model)
    figures["quantization"] = str(engine.model_info.quantization)
    if "batch1" in args.sections:
        bench_batch1(args, engine, device, figures)
    if "throughput" in args.sections:
        bench_throughput(args, engine, device, figures)
    if "step" in args.sections:
        from tgi.benchmarks.cuda_step_bench import bench_decode_step

        bench_decode_step(args, engine, device, figures)
    engine.close()
    del engine, model
    gc.collect()
    if not args.dry_run:
        torch.cuda.empty_cache()


def bench_transformers(args: argparse.Namespace, device: Device, figures: dict) -> None:
    import torch
    import transformers

    where = "cpu" if args.dry_run else "cuda"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.float32 if args.dry_run else torch.bfloat16, device_map=where
    )
    model.eval()
    vocab = model.config.vocab_size
    with torch.inference_mode():
        ids = torch.tensor(random_prompts(1, args.prompt_len, vocab, 1), device=where)
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)  # warm-up
        device.synchronize()
        t0 = time.perf_counter()
        model.generate(
            ids, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens, do_sample=False
        )
        device.synchronize()
        figures["transformers_batch1_decode_tokens_per_s"] = args.decode_tokens / (time.perf_counter() - t0)
        ids = torch.tensor(random_prompts(args.num_requests, args.input_len, vocab, 2), device=where)
        t0 = time.perf_counter()
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.output_len,
            min_new_tokens=args.output_len, do_sample=False,
        )  # fmt: skip
        device.synchronize()
        elapsed = time.perf_counter() - t0
    n_out = (out.shape[1] - ids.shape[1]) * out.shape[0]
    figures["transformers_throughput_output_tokens_per_s"] = n_out / elapsed
    print(f"transformers batch-1: {figures['transformers_batch1_decode_tokens_per_s']:.1f} tokens/s; "
          f"{args.num_requests} requests: {n_out / elapsed:.0f} output tokens/s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:  # the kernels are interpreted: set before triton is first imported
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device visible: this benchmark needs a GPU (or --dry-run)", file=sys.stderr)
        return 2
    device = Device(args.dry_run)
    figures: dict = {
        "device": device.name,
        "torch": torch.__version__,
        "dry_run": args.dry_run,
        "args": vars(args),
    }
    print(f"device: {figures['device']}")
    if args.quant_gemm:
        from tgi.benchmarks.cuda_quant_gemm import run

        dtype = getattr(torch, args.quant_dtype)
        figures["quant_gemm"] = run(
            args.quant_rows, dtype, "cuda", iters=args.quant_iters, split=args.quant_split
        )
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
        return 0
    path = Path(args.model_dir)
    if not (path / "config.json").exists():
        t0 = time.perf_counter()
        from tgi.benchmarks.cuda_bench_checkpoint import write_checkpoint

        write_checkpoint(path, args.num_layers, args.dry_run)
        print(f"random checkpoint written to {path} in {time.perf_counter() - t0:.0f}s")
    if {"batch1", "throughput", "step"} & set(args.sections):
        bench_tgi(args, device, figures)
    if "transformers" in args.sections:
        bench_transformers(args, device, figures)
        if "tgi_throughput_output_tokens_per_s" in figures:
            ratio = (
                figures["tgi_throughput_output_tokens_per_s"]
                / figures["transformers_throughput_output_tokens_per_s"]
            )
            figures["throughput_vs_transformers"] = ratio
            print(f"throughput vs transformers: {ratio:.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
