"""What every script of the GPU plan shares: its command line (`--dry-run`, `--out`), the folder its results
go to, `tgi` importable from this checkout without installing it, child processes with a time limit, and
the summary each script writes.

The lent machine has torch with CUDA, triton, transformers, tokenizers, safetensors, pluggy, numpy, jinja2,
pytest and pytest-timeout, and nothing can be installed there. The scripts need no more: where `tgi` is not
installed, `ensure_tgi_importable` puts this checkout's `src/` (the package's folder: the src layout) first
on `sys.path` and on the children's `PYTHONPATH`. No entry point is needed: the scripts name `CudaBackend` directly.

Dry mode (`--dry-run`, or `TGI_GPU_DRY_RUN=1`): each script runs end to end on the CPU, the Triton kernels
in the interpreter, on a tiny model, with a couple of iterations; its figures mean nothing, its fields and
files are those of the real run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: the checkout this script belongs to (src/tgi/benchmarks/gpu/ in it), and the folder its `tgi` imports from
REPO = Path(__file__).resolve().parents[4]
SRC = REPO / "src"
ENV_DRY_RUN = "TGI_GPU_DRY_RUN"
ENV_OUT = "OUT"
DEFAULT_OUT = "gpu-results"


@dataclass(frozen=True)
class PlanArgs:
    """A plan script's command line: where its results go, whether it is a dry run, its time limit."""

    out: Path
    dry_run: bool
    time_limit_s: float


def parse_plan_args(description: str, time_limit_s: float, argv: list[str] | None = None) -> PlanArgs:
    """`--dry-run` (default: `$TGI_GPU_DRY_RUN` set and not 0), `--out` (default: `$OUT`, else
    ./gpu-results), `--time-limit` (seconds, default `time_limit_s`: the plan's budget for this call)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--dry-run", action="store_true", default=os.environ.get(ENV_DRY_RUN, "") not in ("", "0"),
        help=f"run on the CPU (Triton interpreter, tiny model, a couple of iterations): checks the plan, "
        f"measures nothing (env {ENV_DRY_RUN}=1)",
    )  # fmt: skip
    p.add_argument(
        "--out", default=os.environ.get(ENV_OUT) or DEFAULT_OUT,
        help=f"folder for the results (env {ENV_OUT}, else ./{DEFAULT_OUT})",
    )  # fmt: skip
    p.add_argument("--time-limit", type=float, default=time_limit_s, help="seconds this script may take")
    args = p.parse_args(argv)
    if args.time_limit <= 0:
        p.error("--time-limit must be positive")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return PlanArgs(out, args.dry_run, args.time_limit)


def ensure_tgi_importable() -> str | None:
    """Make `import tgi.core` work: already installed (returns None), or from this checkout's `src/` (the src
    layout), put first on `sys.path` and `PYTHONPATH` (returned)."""
    try:
        import tgi.core  # noqa: F401

        return None
    except ImportError:
        pass
    sys.path.insert(0, str(SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
    return str(SRC)


def child_env(dry_run: bool) -> dict[str, str]:
    """The environment of a child process: `tgi` importable, unbuffered output, no hub access; dry runs
    interpret the Triton kernels, real runs compile them (never interpret on a GPU)."""
    ensure_tgi_importable()
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    if dry_run:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


@dataclass(frozen=True)
class ChildRun:
    """A child process's exit status, its output and how long it ran (`timed_out` when it was killed)."""

    command: list[str]
    returncode: int
    seconds: float
    timed_out: bool
    output: str


def run_child(command: list[str], env: dict[str, str], timeout_s: float, log: Path | None = None) -> ChildRun:
    """Run `command` in the checkout's root, its output echoed and kept (and written to `log`); killed after
    `timeout_s` seconds (returncode 124 then)."""
    print("$ " + " ".join(command), flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=timeout_s,
        )  # fmt: skip
        code, output, timed_out = proc.returncode, proc.stdout, False
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        code, output, timed_out = 124, out if isinstance(out, str) else out.decode(errors="replace"), True
    print(output, end="", flush=True)
    if log is not None:
        log.write_text(output)
    return ChildRun(command, code, time.perf_counter() - t0, timed_out, output)


def write_summary(args: PlanArgs, name: str, summary: dict) -> Path:
    """Write `summary` (with `dry_run` added) to `<out>/<name>.json` and return its path."""
    path = args.out / f"{name}.json"
    path.write_text(json.dumps({"dry_run": args.dry_run, **summary}, indent=2, default=str))
    print(f"wrote {path}", flush=True)
    return path


#: cuda_bench.py's sizes in a dry run: the smallest that reach every code path (2 requests of 8 tokens for 2 more, a
#: step of 4 rows run twice, prompts of 8 tokens, a step budget of 32 tokens: the warm-up's prefill and the 4 rows'
#: prefills in one step): its figures mean nothing, every pass and field is the real run's
DRY_BENCH_ARGS = ["--num-requests", "2", "--input-len", "8", "--output-len", "2", "--decode-tokens", "2",
                  "--step-concurrency", "4", "--step-iters", "2", "--warmup-steps", "1", "--max-num-seqs", "4",
                  "--prompt-len", "8", "--max-batch-prefill-tokens", "32"]  # fmt: skip


def run_cuda_bench(
    args: PlanArgs, name: str, bench_args: list[str], model_dir: str, deadline: float
) -> tuple[ChildRun, dict | None]:
    """`src/tgi/benchmarks/cuda_bench.py` with `bench_args` in a process of its own (each pass starts with the GPU's
    memory free), its figures to `<out>/<name>.json` and output to `<out>/<name>.log`, stopped at
    `deadline` (a `time.perf_counter()` value). Returns the run and its figures (None if it wrote none)."""
    figures_path = args.out / f"{name}.json"
    command = [sys.executable, str(SRC / "tgi" / "benchmarks" / "cuda_bench.py"), "--model-dir", model_dir,
               "--json", str(figures_path), *bench_args]  # fmt: skip
    if args.dry_run:
        command += ["--dry-run", *DRY_BENCH_ARGS]
    timeout = max(1.0, deadline - time.perf_counter())
    run = run_child(command, child_env(args.dry_run), timeout, log=args.out / f"{name}.log")
    figures = json.loads(figures_path.read_text()) if figures_path.exists() else None
    return run, figures


def bench_model_dir(args: PlanArgs) -> str:
    """Where cuda_bench.py's random checkpoint lives: a temporary folder in a dry run (its tiny model), else
    /tmp/tgi-llama-3.1-8b-random (written by the first pass of a call, ~16 GB, reused while the machine is
    held)."""
    if args.dry_run:
        return tempfile.mkdtemp(prefix="tgi-gpu-dry-model-")
    return "/tmp/tgi-llama-3.1-8b-random"


def run_bench_passes(
    description: str,
    summary_name: str,
    passes: dict[str, list[str]],
    figures_kept: tuple[str, ...],
    argv=None,
) -> int:
    """One plan call made of `cuda_bench.py` passes (`passes`: name -> its arguments), each in a process of its
    own on one model folder (removed after a dry run), within the call's time limit; the summary keeps
    `figures_kept` of each pass, its exit and time, and the passes that failed. Returns the call's exit code."""
    args = parse_plan_args(description, time_limit_s=570, argv=argv)
    deadline = time.perf_counter() + args.time_limit_s
    model_dir = bench_model_dir(args)
    summary, failed = {}, []
    try:
        for name, bench_args in passes.items():
            run, figures = run_cuda_bench(args, name, bench_args, model_dir, deadline)
            if run.returncode or figures is None:
                failed.append(name)
            summary[name] = {"returncode": run.returncode, "seconds": run.seconds, "timed_out": run.timed_out,
                             **{k: (figures or {}).get(k) for k in figures_kept}}  # fmt: skip
            if figures:
                summary.setdefault("device", figures.get("device"))
    finally:
        if args.dry_run:
            shutil.rmtree(model_dir, ignore_errors=True)
    write_summary(args, summary_name, {**summary, "failed": failed})
    return 1 if failed else 0
