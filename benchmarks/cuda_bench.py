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
    args = p.parse_args(argv)
    try:
        args.quant_rows = [int(r) for r in args.quant_rows.split(",")]
    except ValueError:
        p.error(f"--quant-rows must be comma-separated integers, got {args.quant_rows!r}")
    if any(r < 1 for r in args.quant_rows):
        p.error("--quant-rows must be positive")
    return args


def write_checkpoint(path: Path, num_layers: int | None) -> None:
    """Random bfloat16 weights (normal, std 0.02) of the Llama-3.1-8B shapes, sharded safetensors."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cfg = dict(LLAMA_31_8B, **({"num_hidden_layers": num_layers} if num_layers else {}))
    config = transformers.LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    path.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
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
                (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02)
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
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="t128001")
    fast.save_pretrained(path)


def bandwidth_of(device_name: str, override_tbs: float | None) -> float | None:
    if override_tbs:
        return override_tbs * 1e12
    return next((bw for key, bw in BANDWIDTH.items() if key in device_name), None)


def random_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(length)] for _ in range(n)]


def bench_tgi(args: argparse.Namespace, figures: dict) -> None:
    import torch

    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.plugins import BackendRegistry
    from tgi.core.sampling_params import SamplingParams

    os.environ["TGI_ATTENTION"] = args.attention
    os.environ["TGI_CUDA_GRAPHS"] = "1" if args.cuda_graphs else "0"
    config = EngineConfig(
        model_id=args.model_dir, backend="cuda", dtype="bfloat16",
        max_total_tokens=args.input_len + args.output_len + 8, max_num_seqs=args.max_num_seqs,
        quantize=args.quantize,
    )  # fmt: skip
    engine = LLMEngine.from_config(config, registry=BackendRegistry(allow=["cuda"]), progress=print)
    figures["kv_cache_tokens"] = engine.config.max_batch_total_tokens
    vocab = engine.model_info.vocab_size
    weight_bytes = sum(p.numel() * p.element_size() for p in engine.runner.model.parameters())
    # quantized linears hold no dense parameter: their kernels' tensors count instead
    weight_bytes += sum(getattr(m.linear_kernel, "nbytes", 0) for m in engine.runner.model.modules()
                        if getattr(m, "quant_format", None))  # fmt: skip
    figures["weight_bytes"] = weight_bytes
    figures["quantization"] = str(engine.model_info.quantization)

    # 1. batch-1 decode
    params = SamplingParams(max_new_tokens=args.decode_tokens, ignore_eos=True)
    engine.add_request(random_prompts(1, 32, vocab, 1)[0], params)
    stamps = []
    while engine.has_unfinished():
        if engine.step():
            torch.cuda.synchronize()
            stamps.append(time.perf_counter())
    decode_tps = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    figures["tgi_batch1_decode_tokens_per_s"] = decode_tps
    bw = bandwidth_of(torch.cuda.get_device_name(), args.bandwidth)
    if bw:
        ceiling = bw / weight_bytes
        figures["bandwidth_ceiling_tokens_per_s"] = ceiling
        figures["tgi_batch1_fraction_of_ceiling"] = decode_tps / ceiling
    print(
        f"tgi batch-1 decode: {decode_tps:.1f} tokens/s"
        + (f" ({decode_tps / ceiling:.0%} of {ceiling:.1f})" if bw else "")
    )

    # 2. concurrent requests
    params = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    prompts = random_prompts(args.num_requests, args.input_len, vocab, 2)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    results = engine.generate(prompts, params)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    out_tokens = sum(len(r.token_ids) for r in results)
    figures["tgi_throughput_output_tokens_per_s"] = out_tokens / elapsed
    print(
        f"tgi {args.num_requests} x ({args.input_len} in, {args.output_len} out): {out_tokens / elapsed:.0f} output tokens/s in {elapsed:.1f}s"
    )
    del engine, results
    gc.collect()
    torch.cuda.empty_cache()


def bench_transformers(args: argparse.Namespace, figures: dict) -> None:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.bfloat16, device_map="cuda"
    )
    model.eval()
    vocab = model.config.vocab_size
    with torch.inference_mode():
        ids = torch.tensor(random_prompts(1, 32, vocab, 1), device="cuda")
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(
            ids, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens, do_sample=False
        )
        torch.cuda.synchronize()
        figures["transformers_batch1_decode_tokens_per_s"] = args.decode_tokens / (time.perf_counter() - t0)
        ids = torch.tensor(random_prompts(args.num_requests, args.input_len, vocab, 2), device="cuda")
        t0 = time.perf_counter()
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.output_len,
            min_new_tokens=args.output_len, do_sample=False,
        )  # fmt: skip
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
    n_out = (out.shape[1] - ids.shape[1]) * out.shape[0]
    figures["transformers_throughput_output_tokens_per_s"] = n_out / elapsed
    print(f"transformers batch-1: {figures['transformers_batch1_decode_tokens_per_s']:.1f} tokens/s; "
          f"{args.num_requests} requests: {n_out / elapsed:.0f} output tokens/s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible: this benchmark needs a GPU", file=sys.stderr)
        return 2
    figures: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(args)}
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
        write_checkpoint(path, args.num_layers)
        print(f"random checkpoint written to {path} in {time.perf_counter() - t0:.0f}s")
    bench_tgi(args, figures)
    if not args.skip_transformers:
        bench_transformers(args, figures)
        if "transformers_throughput_output_tokens_per_s" in figures:
            ratio = (
                figures["tgi_throughput_output_tokens_per_s"]
                / figures["transformers_throughput_output_tokens_per_s"]
            )
            figures["throughput_vs_transformers"] = ratio
            print(f"throughput vs transformers: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
