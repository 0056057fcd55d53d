"""`tgi benchmark make-model`: the serving benchmark's model at a real size (Llama-3.2-1B's shapes, or
Llama-3.1-8B's with `--model-shape 8b`; random weights of a fixed seed; the default model's tokenizer), made
once and kept in a cache folder keyed by the shape, the seed and the format.

With llama.cpp's tools (`--llama-cpp-dir`, or found beside `--llama-server`), the files are llama.cpp's own:
a Hugging Face folder in bfloat16 (`hf_random_model`) -> `convert_hf_to_gguf.py` -> a bf16 GGUF ->
`llama-quantize` (Q8_0, Q4_K_M). Without them it says so, and `make_model`'s writer makes the GGUF (gguf's
quantizer; tgi's reference K-quant quantizer for Q4_K_M). Format "safetensors" is the bfloat16 Hugging Face
folder, for our server (llama.cpp then serves the bf16 GGUF). Every file says which tool made it.

`--model-shape smolvlm-256m` makes a vision-language model instead (`vlm_model`: SmolVLM-256M-Instruct's
shapes, random weights, a float32 safetensors folder with its real Idefics3 processor) for our server only:
format "safetensors", no GGUF (llama.cpp would need an mmproj file besides).
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
from tgi.benchmarks.vlm_model import DTYPE, VLM_SHAPES, write_vlm_folder
from tgi.core.testing.tiny_idefics3 import Idefics3Shape

FORMATS = ("Q4_K_M", "Q8_0", "bf16", "safetensors")
DEFAULT_CACHE = os.path.expanduser("~/.cache/tgi/benchmark-models")
LLAMA_CPP = "llama.cpp (convert_hf_to_gguf.py, llama-quantize)"
TGI_WRITER = "tgi make_model (gguf's quantizer; tgi's reference K-quant quantizer)"
VLM_WRITER = "tgi vlm_model (transformers' Idefics3ForConditionalGeneration, random initialisation)"
#: every name `--model-shape` takes: the Llamas of `make_model`, then the vision-language models
SHAPE_NAMES = (*sorted(SIZES), *sorted(VLM_SHAPES))


def is_vlm(name: str | None) -> bool:
    """Whether the shape `name` is a vision-language model (`vlm_model.VLM_SHAPES`): our server only."""
    return name in VLM_SHAPES


def default_format(name: str | None) -> str:
    """The format made when none is asked for: "safetensors" for a vision-language shape, else Q4_K_M."""
    return "safetensors" if is_vlm(name) else "Q4_K_M"


@dataclass(frozen=True)
class BenchModel:
    """A made model: what our server loads (`ours`), the GGUF llama.cpp loads (`gguf`), and what made them."""

    shape: str  # "1b", "8b" (or a test's own name)
    format: str  # one of FORMATS
    ours: str
    gguf: str  # "" for a vision-language model (no GGUF is made)
    made_by: str

    def describe(self) -> dict:
        return dataclasses.asdict(self)


def cache_folder(cache_dir: str | Path, name: str, shape: ModelShape | Idefics3Shape, seed: int) -> Path:
    """`<cache_dir>/llama-<name>-<digest of the shape and seed>` (`idefics3-...` for an `Idefics3Shape`):
    another shape or seed, another folder."""
    digest = hashlib.sha256(json.dumps([dataclasses.asdict(shape), seed]).encode()).hexdigest()[:12]
    kind = "idefics3" if isinstance(shape, Idefics3Shape) else "llama"
    return Path(cache_dir) / f"{kind}-{name}-{digest}"


def prepare(
    fmt: str,
    tools: LlamaCppTools,
    cache_dir: str | Path = DEFAULT_CACHE,
    name: str = "1b",
    shape: ModelShape | Idefics3Shape | None = None,
    seed: int = 0,
    log=print,
) -> BenchModel:
    """The model of shape `name` (`SIZES[name]` or `VLM_SHAPES[name]` unless `shape` is given) in `fmt`,
    made unless cached: by llama.cpp's tools where `tools` has the converter and llama-quantize, else by
    `make_model`'s writer; a vision-language shape by `vlm_model` (safetensors only, `tools` unused)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown model format {fmt!r} (known: {', '.join(FORMATS)})")
    if isinstance(shape, Idefics3Shape) or (shape is None and is_vlm(name)):
        return _prepare_vlm(fmt, cache_dir, name, shape or VLM_SHAPES[name], seed, log)
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


def _prepare_vlm(fmt: str, cache_dir, name: str, shape: Idefics3Shape, seed: int, log) -> BenchModel:
    if fmt != "safetensors":
        raise ValueError(f"--model-shape {name} is made as safetensors only (our server), not {fmt}")
    folder = cache_folder(cache_dir, name, shape, seed) / f"hf-{DTYPE}"
    if not folder.is_dir():
        log(f"writing the {DTYPE} safetensors folder {folder}")
        write_vlm_folder(folder, shape, seed)
    return BenchModel(name, fmt, str(folder), "", VLM_WRITER)


def add_model_arguments(p: argparse.ArgumentParser, for_serving: bool) -> None:
    """The flags that choose and make the model (shared by `make-model` and `serving`)."""
    a = p.add_argument
    a(
        "--model-shape",
        choices=SHAPE_NAMES,
        default=None if for_serving else "1b",
        help="make (or reuse) a random-weight model of these shapes: 1b (Llama-3.2-1B), 8b (Llama-3.1-8B), "
        "smolvlm-256m (SmolVLM-256M-Instruct, an Idefics3 for image requests; safetensors, our server only)"
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
        "--formats",
        default=None,
        help=f"comma-separated, of {', '.join(FORMATS)} (default Q4_K_M; safetensors for smolvlm-256m)",
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
        formats = args.formats or default_format(args.model_shape)
        for fmt in [f.strip() for f in formats.split(",") if f.strip()]:
            made = prepare(fmt, tools, args.model_cache_dir, args.model_shape, log=_note)
            peer = f"; llama.cpp {made.gguf}" if made.gguf else ""
            print(f"{made.format}: ours {made.ours}{peer} (made by {made.made_by})")
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
