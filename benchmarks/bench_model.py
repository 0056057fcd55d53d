"""`tgi benchmark make-model`: the serving benchmark's model at a real size (Llama-3.2-1B's shapes, or
Llama-3.1-8B's with `--model-shape 8b`; random weights of a fixed seed; the default model's tokenizer), made
once and kept in a cache folder keyed by the shape, the seed and the format.

With llama.cpp's tools (`--llama-cpp-dir`, or found beside `--llama-server`), the files are llama.cpp's own:
a Hugging Face folder in bfloat16 (`hf_random_model`) -> `convert_hf_to_gguf.py` -> a bf16 GGUF ->
`llama-quantize` (Q8_0, Q4_K_M). Without them it says so, and `make_model`'s writer makes the GGUF (gguf's
quantizer; tgi's reference K-quant quantizer for Q4_K_M). Format "safetensors" is the bfloat16 Hugging Face
folder, for our server (llama.cpp then serves the bf16 GGUF). Every file says which tool made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tgi.benchmarks.hf_random_model import write_hf_folder
from tgi.benchmarks.llama_cpp_tools import LlamaCppTools, convert_hf, find_tools, quantize
from tgi.benchmarks.make_model import SIZES, ModelShape, write_gguf

FORMATS = ("Q4_K_M", "Q8_0", "bf16", "safetensors")
DEFAULT_CACHE = os.path.expanduser("~/.cache/tgi/benchmark-models")
LLAMA_CPP = "llama.cpp (convert_hf_to_gguf.py, llama-quantize)"
TGI_WRITER = "tgi make_model (gguf's quantizer; tgi's reference K-quant quantizer)"


@dataclass(frozen=True)
class BenchModel:
    """A made model: what our server loads (`ours`), the GGUF llama.cpp loads (`gguf`), and what made them."""

    shape: str  # "1b", "8b" (or a test's own name)
    format: str  # one of FORMATS
    ours: str
    gguf: str
    made_by: str

    def describe(self) -> dict:
        return dataclasses.asdict(self)


def cache_folder(cache_dir: str | Path, name: str, shape: ModelShape, seed: int) -> Path:
    """`<cache_dir>/llama-<name>-<digest of the shape and seed>`: another shape or seed, another folder."""
    digest = hashlib.sha256(json.dumps([dataclasses.asdict(shape), seed]).encode()).hexdigest()[:12]
    return Path(cache_dir) / f"llama-{name}-{digest}"


def prepare(
    fmt: str,
    tools: LlamaCppTools,
    cache_dir: str | Path = DEFAULT_CACHE,
    name: str = "1b",
    shape: ModelShape | None = None,
    seed: int = 0,
    log=print,
) -> BenchModel:
    """The model of shape `name` (`SIZES[name]` unless `shape` is given) in `fmt`, made unless cached: by
    llama.cpp's tools where `tools` has the converter and llama-quantize, else by `make_model`'s writer."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown model format {fmt!r} (known: {', '.join(FORMATS)})")
    shape = shape or SIZES[name]
    folder = cache_folder(cache_dir, name, shape, seed)
    folder.mkdir(parents=True, exist_ok=True)
    hf = folder / "hf-bf16"
    gguf_type = "bf16" if fmt == "safetensors" else fmt
    if fmt == "safetensors" and not hf.is_dir():
        log(f"writing the bfloat16 safetensors folder {hf}")
        write_hf_folder(hf, shape, seed)
    missing = tools.missing("convert", "quantize")
    if missing:
        log(
            f"llama.cpp's {' and '.join(missing)} not found (--llama-cpp-dir): tgi's own writer makes the GGUF"
        )
        path = folder / f"tgi-{gguf_type}.gguf"
        if not path.exists():
            write_gguf(str(path) + ".partial", gguf_type, shape, seed)
            os.replace(str(path) + ".partial", path)
        made_by = TGI_WRITER
    else:
        bf16 = folder / "llama.cpp-bf16.gguf"
        if not bf16.exists():
            if not hf.is_dir():
                log(f"writing the bfloat16 safetensors folder {hf}")
                write_hf_folder(hf, shape, seed)
            log(f"converting {hf} with {tools.convert}")
            convert_hf(tools, hf, bf16, "bf16")
        path = folder / f"llama.cpp-{gguf_type}.gguf"
        if not path.exists():
            log(f"quantizing to {gguf_type} with {tools.quantize}")
            quantize(tools, bf16, path, gguf_type)
        made_by = LLAMA_CPP
    ours = str(hf) if fmt == "safetensors" else str(path)
    return BenchModel(name, fmt, ours, str(path), made_by)


def add_model_arguments(p: argparse.ArgumentParser, for_serving: bool) -> None:
    """The flags that choose and make the model (shared by `make-model` and `serving`)."""
    a = p.add_argument
    a(
        "--model-shape",
        choices=sorted(SIZES),
        default=None if for_serving else "1b",
        help="make (or reuse) a random-weight Llama of these shapes: 1b (Llama-3.2-1B), 8b (Llama-3.1-8B)"
        + (" and serve it instead of --model-id" if for_serving else ""),
    )
    a(
        "--model-cache-dir",
        default=DEFAULT_CACHE,
        help=f"where made models are kept (default {DEFAULT_CACHE})",
    )
    a(
        "--llama-cpp-dir",
        default=None,
        help="llama.cpp's source root (convert_hf_to_gguf.py, build/bin/llama-quantize)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, for_serving=False)
    p.add_argument(
        "--formats", default="Q4_K_M", help=f"comma-separated, of {', '.join(FORMATS)} (default Q4_K_M)"
    )
    p.add_argument(
        "--llama-server",
        default=None,
        help="a llama-server binary: llama.cpp's tools are looked for beside it",
    )


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark make-model`: prints each file and what made it; 2 for bad arguments or a failed tool."""
    try:
        tools = find_tools(args.llama_cpp_dir, args.llama_server)
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            made = prepare(fmt, tools, args.model_cache_dir, args.model_shape, log=_note)
            print(f"{made.format}: ours {made.ours}; llama.cpp {made.gguf} (made by {made.made_by})")
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
