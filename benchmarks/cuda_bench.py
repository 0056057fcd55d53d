"""Benchmark of the CUDA backend on a Llama-3.1-8B-shaped model with random weights (no download).

Run on a machine with an NVIDIA GPU (about 16 GB for the weights plus the KV cache; an H100/H200 is the
target). It writes the checkpoint once (bfloat16 safetensors + a word-level tokenizer, ~16 GB on disk), then:

1. batch-1 decode: tokens/s after the first token, against the memory-bandwidth ceiling
   (bandwidth / weight bytes: every decode step reads every weight once); goal >= 80 % of the ceiling;
2. throughput: 128 concurrent requests of 512 prompt and 256 output tokens (ignore_eos), output tokens/s
   over the whole run; goal >= 10,000 tokens/s on an H100;
3. the same two measurements with `transformers` (`generate`, static batch, left padding) on the same card,
   in the same run, unless --skip-transformers; goal >= 3x transformers' throughput.

    python benchmarks/cuda_bench.py --model-dir /tmp/llama8b-random --json $OUT/cuda_bench.json

With --quantize eetq or fp8 the model is quantized at load and its linears computed by the Triton
weight-only GEMMs (weight bytes and the bandwidth ceiling counted from the quantized tensors).

With --quant-gemm it times instead the Triton quantized GEMMs (GPTQ int4 with and without act-order, GPTQ
int8, AWQ int4, FP8; `cuda_quant_gemm.py`) against the dense product on the 8B model's linear shapes, at
--quant-rows input rows, and checks each against its dequantized weight (no checkpoint is written):

    python benchmarks/cuda_bench.py --quant-gemm --json $OUT/quant_gemm.json

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

#: published peak memory bandwidth (bytes/s) by device-name fragment
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.039e12, "A100": 1.555e12, "L40S": 864e9}
LLAMA_31_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=128001,
    torch_dtype="bfloat16",
)
#: the dry run's model: Llama-3.1-8B's architecture (llama3 RoPE scaling, GQA, untied head), tiny
DRY_MODEL = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
    rope_scaling=dict(LLAMA_31_8B["rope_scaling"], original_max_position_embeddings=1024),
)  # fmt: skip
SECTIONS = ("batch1", "throughput", "step", "transformers")
ENV_DRY_RUN = "TGI_GPU_DRY_RUN"
#: prompt tokens of the batch-1 and decode-step requests
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
    p.add_argument("--bandwidth", type=float, default=None, help="TB/s of the card (default: from its name)")
    p.add_argument("--attention", default="triton", help="attention implementation (TGI_ATTENTION)")
    p.add_argument("--cuda-graphs", action="store_true", help="capture decode steps as CUDA graphs")
    p.add_argument("--max-num-seqs", type=int, default=256)
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


def write_checkpoint(path: Path, num_layers: int | None, dry_run: bool = False) -> None:
    """Random bfloat16 weights (normal, std 0.02) of the Llama-3.1-8B shapes (`DRY_MODEL`'s with
    `dry_run`, drawn on the CPU), sharded safetensors."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cfg = dict(LLAMA_31_8B, **(DRY_MODEL if dry_run else {}))
    cfg.update({"num_hidden_layers": num_layers} if num_layers else {})
    config = transformers.LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    path.mkdir(parents=True, exist_ok=True)
    device = "cpu" if dry_run else "cuda"
    gen = torch.Generator(device=device).manual_seed(0)
    weight_map, shard, shard_bytes, n = {}, {}, 0, 0

    def flush():
        nonlocal shard, shard_bytes, n
        if shard:
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(path / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard, shard_bytes, n = {}, 0, n + 1

    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (
                (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02)
                .to(torch.bfloat16)
                .cpu()
            )
        shard[name] = t
        shard_bytes += t.numel() * 2
        if shard_bytes > 4 << 30:
            flush()
    flush()
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.save_pretrained(path)
    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, config.vocab_size)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token=f"t{config.eos_token_id}"
    )
    fast.save_pretrained(path)


def bandwidth_of(device_name: str, override_tbs: float | None) -> float | None:
    if override_tbs:
        return override_tbs * 1e12
    return next((bw for key, bw in BANDWIDTH.items() if key in device_name), None)


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


class Device:
    """Where the benchmark runs: the GPU, or (dry run) the CPU, whose 'device time' is wall time."""

    def __init__(self, dry_run: bool) -> None:
        import torch

        self.dry_run = dry_run
        self.torch = torch
        self.name = "host CPU (dry run: Triton interpreter)" if dry_run else torch.cuda.get_device_name()

    def synchronize(self) -> None:
        if not self.dry_run:
            self.torch.cuda.synchronize()

    def timed(self, fn) -> float:
        """Seconds `fn()` takes on the device: between two CUDA events on a GPU, wall time on the CPU."""
        if self.dry_run:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def dry_backend():
    """`CudaBackend` on CPU tensors, its kernels run by Triton's interpreter (`TRITON_INTERPRET=1` must be
    set before triton is imported): the dry run's backend."""
    import torch

    from tgi.backends.cuda.backend import CudaBackend
    from tgi.core.interfaces import DeviceInfo, MemoryInfo

    class CpuCudaBackend(CudaBackend):
        def __init__(self) -> None:
            super().__init__(device_index=0, attention="triton", cuda_graphs=False)
            self.device = torch.device("cpu")

        def devices(self):
            return [DeviceInfo(0, "host CPU (Triton interpreter)", 0)]

        def memory_info(self):
            return MemoryInfo(total=2 << 30, free=1 << 30)

        def synchronize(self):
            pass

        def release_memory(self):
            pass

    return CpuCudaBackend()


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
        create = dry_backend
    else:
        from tgi.backends.cuda.backend import CudaBackend

        create = (
            CudaBackend  # through the plugin host, no entry point needed (the repo need not be installed)
        )
    config = EngineConfig(
        model_id=args.model_dir, backend="cuda", dtype="float32" if args.dry_run else "bfloat16",
        max_total_tokens=8 + max(
            args.input_len + args.output_len,
            PROMPT_LEN + args.decode_tokens + 1,
            PROMPT_LEN + step_tokens(args),
        ),
        max_num_seqs=max(args.max_num_seqs, args.step_concurrency), quantize=args.quantize,
    )  # fmt: skip
    return LLMEngine.from_config(config, registry=backend_registry("cuda", create), progress=print)


def bench_batch1(args, engine, device: Device, figures: dict) -> None:
    """Tokens/s of one request after its first token, after a warm-up request of the same shape."""
    from tgi.core.sampling_params import SamplingParams

    vocab = engine.model_info.vocab_size
    prompt = random_prompts(1, PROMPT_LEN, vocab, 1)[0]
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
    device.synchronize()
    t0 = time.perf_counter()
    results = engine.generate(prompts, params)
    device.synchronize()
    elapsed = time.perf_counter() - t0
    out_tokens = sum(len(r.token_ids) for r in results)
    figures["tgi_throughput_output_tokens_per_s"] = out_tokens / elapsed
    print(
        f"tgi {args.num_requests} x ({args.input_len} in, {args.output_len} out): "
        f"{out_tokens / elapsed:.0f} output tokens/s in {elapsed:.1f}s"
    )


def busy_fraction(intervals: list[tuple[float, float]], wall: float) -> float:
    """The share of `wall` covered by the union of the (start, end) `intervals` (same unit)."""
    covered, end_so_far = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= end_so_far:
            continue
        covered += end - max(start, end_so_far)
        end_so_far = end
    return covered / wall if wall > 0 else 0.0


def bench_decode_step(args, engine, device: Device, figures: dict) -> None:
    """`--step-concurrency` requests decoding together: once all are prefilled, `--warmup-steps` untimed
    steps, then `--step-iters` steps each timed on the device (CUDA events), then the same number under
    `torch.profiler`: kernels launched per step and the GPU-busy fraction (the union of kernel intervals over
    the profiled wall time). The dry run reports the fields, from the CPU: no kernel is a CUDA kernel there."""
    from torch.profiler import ProfilerActivity, profile

    from tgi.core.sampling_params import SamplingParams

    c = args.step_concurrency
    total = step_tokens(args)
    vocab = engine.model_info.vocab_size
    for prompt in random_prompts(c, PROMPT_LEN, vocab, 4):
        engine.add_request(prompt, SamplingParams(max_new_tokens=total, ignore_eos=True))
    started: set[str] = set()
    while len(started) < c:  # prefill every request (the steps below are pure decode steps of c rows)
        started.update(e.request_id for e in engine.step())
    for _ in range(args.warmup_steps):
        engine.step()
    steps: list = []  # each timed step's events: one per row
    times = [device.timed(lambda: steps.append(engine.step())) for _ in range(args.step_iters)]
    rows = [len(events) for events in steps]
    times.sort()
    figures["step_concurrency"] = c
    figures["step_rows_per_step"] = sum(rows) / len(rows)
    figures["step_latency_ms_p50"] = times[len(times) // 2] * 1e3
    figures["step_latency_ms_min"] = times[0] * 1e3
    figures["step_tokens_per_s"] = figures["step_rows_per_step"] / (figures["step_latency_ms_p50"] / 1e3)
    activities = [ProfilerActivity.CPU] + ([] if args.dry_run else [ProfilerActivity.CUDA])
    device.synchronize()
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(args.step_iters):
            engine.step()
        device.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    kernels = [e for e in prof.events() if getattr(e.device_type, "name", "") == "CUDA"]
    intervals = [(e.time_range.start, e.time_range.end) for e in kernels]
    figures["step_kernels_per_step"] = len(kernels) / args.step_iters
    figures["step_gpu_busy_fraction"] = busy_fraction(intervals, wall_us)
    figures["step_kernel_table"] = prof.key_averages().table(
        sort_by="self_cpu_time_total" if args.dry_run else "self_cuda_time_total", row_limit=25
    )
    while engine.has_unfinished():
        engine.step()
    print(
        f"tgi decode step at C={c}: {figures['step_latency_ms_p50']:.2f} ms p50 "
        f"({figures['step_tokens_per_s']:.0f} tokens/s), {figures['step_kernels_per_step']:.0f} kernels per step, "
        f"GPU busy {figures['step_gpu_busy_fraction']:.0%}"
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
        ids = torch.tensor(random_prompts(1, 32, vocab, 1), device=where)
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
