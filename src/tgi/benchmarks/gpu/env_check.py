"""Call 1 of the GPU plan (under a minute): what the lent machine has. Python, torch, its CUDA, triton,
transformers; the GPU's name, compute capability, streaming multiprocessors and memory (total and free);
each of tgi's dependencies importable or not; `tgi`'s CUDA backend importable from this checkout and its
probe's answer. Writes `$OUT/env_check.json`; exits 1 when a package the plan's scripts need is missing.

    python src/tgi/benchmarks/gpu/env_check.py            # on the GPU
    python src/tgi/benchmarks/gpu/env_check.py --dry-run  # here, on the CPU
"""

from __future__ import annotations

import importlib
import platform
import sys

from plan_run import ensure_tgi_importable, parse_plan_args, write_summary

#: tgi's dependencies (pyproject.toml) by import name: those the plan's scripts need, and the others
NEEDED = ("torch", "triton", "transformers", "tokenizers", "safetensors", "huggingface_hub", "numpy", "pluggy",
          "jinja2", "pytest")  # fmt: skip
OTHERS = ("gguf", "fastapi", "uvicorn", "pydantic", "prometheus_client", "ninja", "llguidance", "pytest_timeout",
          "pytest_asyncio")  # fmt: skip


def versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Each module's version, "?" when it has none, None when it does not import."""
    found = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # missing, or broken: either way the plan cannot use it
            found[name] = None
            continue
        found[name] = str(getattr(module, "__version__", "?"))
    return found


def gpu_facts() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"gpu": None}
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_total_gib": total / 2**30,
        "memory_free_gib": free / 2**30,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_plan_args(__doc__.splitlines()[0], time_limit_s=60, argv=argv)
    linked = ensure_tgi_importable()
    needed, others = versions(NEEDED), versions(OTHERS)
    import torch

    summary = {
        "python": platform.python_version(),
        "torch_cuda": torch.version.cuda,
        "needed": needed,
        "others": others,
        "tgi_linked_from": linked,
        **gpu_facts(),
    }
    from tgi.backends.cuda import plugin

    probe = plugin._probe()
    summary["cuda_backend_probe"] = {"available": probe.available, "reason": probe.reason}
    missing = [name for name, version in needed.items() if version is None]
    summary["missing_needed"] = missing
    write_summary(args, "env_check", summary)
    print(f"python {summary['python']}, torch {needed['torch']} (CUDA {summary['torch_cuda']}), "
          f"triton {needed['triton']}, transformers {needed['transformers']}")  # fmt: skip
    print(f"GPU: {summary['gpu'] or 'none visible'}; cuda backend: {probe.reason}")
    print("not importable: " + (", ".join(n for n, v in {**needed, **others}.items() if v is None) or "none"))
    if missing:
        print(f"the plan's scripts need {', '.join(missing)}: carry them as wheels", file=sys.stderr)
        return 1
    if not args.dry_run and summary["gpu"] is None:
        print("no GPU visible (use --dry-run on a machine without one)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
