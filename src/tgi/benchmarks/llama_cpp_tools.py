"""llama.cpp's own tools, where a llama.cpp build is on this machine: `convert_hf_to_gguf.py` (a Hugging Face
folder -> GGUF), `llama-quantize` (GGUF -> another block type) and `llama-perplexity`.

Found in a llama.cpp folder given (`--llama-cpp-dir`: its source root, with the binaries in `build/bin/`,
or the `bin/` folder itself), else beside a `llama-server` binary given (`<root>/build/bin/llama-server`),
else on PATH (binaries only: the converter is a script of the source tree).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tgi.benchmarks.perplexity import PerplexityResult


@dataclass(frozen=True)
class LlamaCppTools:
    """Paths of llama.cpp's tools; None where not found."""

    convert: str | None  # convert_hf_to_gguf.py
    quantize: str | None  # llama-quantize
    perplexity: str | None  # llama-perplexity

    def missing(self, *names: str) -> list[str]:
        """Which of `names` ("convert", "quantize", "perplexity") were not found."""
        return [n for n in names if getattr(self, n) is None]


def _binary(folder: Path, name: str) -> str | None:
    path = folder / name
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def find_tools(llama_cpp_dir: str | None = None, llama_server: str | None = None) -> LlamaCppTools:
    """llama.cpp's tools in `llama_cpp_dir` (which must exist when given), else beside `llama_server`, else
    the binaries on PATH."""
    if llama_cpp_dir:
        root = Path(llama_cpp_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"--llama-cpp-dir {llama_cpp_dir!r} is not a folder")
        bins = [root / "build" / "bin", root / "bin", root]
        sources = [root, root.parent.parent if root.name == "bin" else root]
    elif llama_server:
        here = Path(llama_server).resolve().parent
        bins, sources = [here], [here.parent.parent, here.parent]
    else:
        on_path = {n: shutil.which(n) for n in ("llama-quantize", "llama-perplexity")}
        return LlamaCppTools(None, on_path["llama-quantize"], on_path["llama-perplexity"])

    def first(found):
        return next((f for f in found if f), None)

    convert = first(
        str(s / "convert_hf_to_gguf.py") for s in sources if (s / "convert_hf_to_gguf.py").is_file()
    )
    return LlamaCppTools(
        convert,
        first(_binary(b, "llama-quantize") for b in bins),
        first(_binary(b, "llama-perplexity") for b in bins),
    )


def _run(cmd: list[str], what: str, log_path: Path | None = None) -> str:
    """Run `cmd`; its output (stdout and stderr together) is returned, and kept in `log_path` when given;
    a failure raises with the output's tail."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if log_path is not None:
        log_path.write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed (status {proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}"
        )
    return proc.stdout


def convert_hf(tools: LlamaCppTools, hf_folder: str | Path, out: str | Path, outtype: str = "bf16") -> Path:
    """`python convert_hf_to_gguf.py HF_FOLDER --outfile OUT --outtype bf16` with this Python (it needs
    torch, transformers and numpy, which tgi has)."""
    if tools.convert is None:
        raise FileNotFoundError("llama.cpp's convert_hf_to_gguf.py was not found")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    cmd = [sys.executable, tools.convert, str(hf_folder), "--outfile", str(partial), "--outtype", outtype]
    _run(cmd, "convert_hf_to_gguf.py", out.with_name(out.name + ".log"))
    os.replace(partial, out)
    return out


def quantize(tools: LlamaCppTools, source: str | Path, out: str | Path, qtype: str, threads: int = 2) -> Path:
    """`llama-quantize --allow-requantize SOURCE OUT QTYPE THREADS` (requantizing a block-quantized file
    goes through float32, as llama.cpp does)."""
    if tools.quantize is None:
        raise FileNotFoundError("llama.cpp's llama-quantize was not found")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    cmd = [tools.quantize, "--allow-requantize", str(source), str(partial), qtype, str(threads)]
    _run(cmd, "llama-quantize", out.with_name(out.name + ".log"))
    os.replace(partial, out)
    return out


_FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+(?:e[+-]?\d+)?) \+/- ([0-9.]+)")
_CHUNKS = re.compile(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)")


def parse_perplexity_output(text: str) -> PerplexityResult:
    """`llama-perplexity`'s log -> its final estimate (the mean NLL is log(PPL); every window scores
    `n_ctx - 1 - n_ctx // 2` tokens)."""
    import math

    final, chunks = _FINAL.search(text), _CHUNKS.search(text)
    if final is None or chunks is None:
        raise RuntimeError(f"no final estimate in llama-perplexity's output:\n{text[-2000:]}")
    ppl, n_chunk, n_ctx = float(final.group(1)), int(chunks.group(1)), int(chunks.group(2))
    return PerplexityResult(ppl, math.log(ppl), n_chunk * (n_ctx - 1 - n_ctx // 2), n_chunk, n_ctx)


def llama_perplexity(
    tools: LlamaCppTools, gguf: str, text_file: str, n_ctx: int, threads: int = 2
) -> PerplexityResult:
    """`llama-perplexity -m GGUF -f TEXT -c N_CTX -b N_CTX -t THREADS` (one window per batch: the figures do
    not depend on the batch, only the time does)."""
    if tools.perplexity is None:
        raise FileNotFoundError("llama.cpp's llama-perplexity was not found")
    cmd = [tools.perplexity, "-m", gguf, "-f", text_file, "-c", str(n_ctx), "-b", str(n_ctx)]
    return parse_perplexity_output(_run([*cmd, "-t", str(threads)], "llama-perplexity"))
