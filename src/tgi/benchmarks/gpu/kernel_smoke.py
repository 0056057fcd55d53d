"""Call 2 of the GPU plan (about 3 minutes on an H100): the Triton attention kernels compiled and run on the
device, case by case, then their compiled resources.

1. every case of the conformance suite's attention grid (`ATTENTION_CASES`: MHA/GQA/MQA, head sizes 32-80,
   block sizes 1-16, window, soft-cap, a long context) in float32, bfloat16 and float16, through
   `CudaBackend`, against dense float64 attention (`run_attention_schedule`): pass or fail per case, its
   error and time (the first case of a shape includes its compiles);
2. every attention variant serving launches (decode with 1 and 16 splits and its reduce, prefill, KV write)
   for the grid's head sizes plus 128 and 256, compiled for this GPU's compute capability
   (`tgi.backends.triton_common.aot`): shared memory, registers and spilled bytes, one line each.

Writes `$OUT/kernel_smoke.json`; exits 1 when a case fails or a variant does not compile. The dry run takes
two cases in float32 on the CPU (interpreter) and compiles one variant for sm_90 where this triton can.

    python src/tgi/benchmarks/gpu/kernel_smoke.py [--dry-run]
"""

from __future__ import annotations

import json
import os
import sys
import time

from plan_run import child_env, ensure_tgi_importable, parse_plan_args, run_child, write_summary

DRY_CASES = ("mha-d32-bs4", "gqa4-d64-bs16")
_COMPILE = """
import json, sys, torch
from tgi.backends.triton_common.aot import attention_variants, compile_variant, H100_SHARED_MEMORY_BYTES
head_dims, dtypes, capability = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
variants = attention_variants(tuple(head_dims), tuple(getattr(torch, d) for d in dtypes), num_splits=(1, 16))
if len(sys.argv) > 4:
    variants = variants[: int(sys.argv[4])]
for v in variants:
    try:
        r = compile_variant(v, capability)
        print(json.dumps({"line": r.line(), "shared": r.shared_bytes, "registers": r.registers,
                          "spills": r.spill_bytes, "compiled": True}), flush=True)
    except Exception as exc:
        print(json.dumps({"line": f"{v.kernel} d={v.head_dim} {v.dtype}: {type(exc).__name__}: {exc}",
                          "compiled": False}), flush=True)
"""


def attention_cases(backend, names, dtypes) -> list[dict]:
    """Each (case, dtype) run against the float64 reference: error, tolerance, passed, seconds."""
    from tgi.core.torch.testing.conformance import ATTENTION_CASES
    from tgi.core.torch.testing.reference import (
        TOLERANCE,
        AttentionCase,
        pick_block_size,
        run_attention_schedule,
    )

    caps = backend.attention().caps()
    results = []
    for name in names:
        case = ATTENTION_CASES[name]
        case = AttentionCase(
            **{**case.__dict__, "block_size": pick_block_size(case.block_size, caps.block_sizes)}
        )
        for dtype in dtypes:
            t0 = time.perf_counter()
            try:
                err = run_attention_schedule(backend, case, dtype)
                failure = None if err <= TOLERANCE[dtype] else f"max abs error {err:.3g} > {TOLERANCE[dtype]}"
            except Exception as exc:  # a kernel that does not compile or launch fails its case, the rest run
                err, failure = None, f"{type(exc).__name__}: {exc}"
            row = {"case": name, "dtype": dtype, "error": err, "tolerance": TOLERANCE[dtype],
                   "passed": failure is None, "failure": failure, "seconds": time.perf_counter() - t0}  # fmt: skip
            results.append(row)
            print(f"{'PASS' if row['passed'] else 'FAIL'} {name} {dtype}: "
                  f"{failure or f'max abs error {err:.2e}'} ({row['seconds']:.1f}s)", flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_plan_args(__doc__.splitlines()[0], time_limit_s=300, argv=argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported
    ensure_tgi_importable()
    import torch

    from tgi.core.torch.testing.conformance import ATTENTION_CASES

    if args.dry_run:
        from tgi.benchmarks.cuda_bench import dry_backend

        backend, names, dtypes, capability = dry_backend(), DRY_CASES, ("float32",), 90
    else:
        if not torch.cuda.is_available():
            print("no GPU visible (use --dry-run on a machine without one)", file=sys.stderr)
            return 1
        from tgi.backends.cuda.backend import CudaBackend

        backend, names = CudaBackend(attention="triton", cuda_graphs=False), tuple(ATTENTION_CASES)
        dtypes = tuple(
            d for d in ("float32", "bfloat16", "float16") if d in backend.attention().caps().dtypes
        )
        major, minor = torch.cuda.get_device_capability()
        capability = 10 * major + minor
    t0 = time.perf_counter()
    cases = attention_cases(backend, names, dtypes)
    head_dims = sorted({ATTENTION_CASES[n].head_dim for n in names} | (set() if args.dry_run else {128, 256}))
    command = [
        sys.executable,
        "-c",
        _COMPILE,
        json.dumps(head_dims),
        json.dumps(list(dtypes)),
        str(capability),
    ]
    if args.dry_run:
        command += ["1"]
    budget = max(30.0, args.time_limit_s - (time.perf_counter() - t0))
    run = run_child(command, child_env(dry_run=False), budget)
    compiles = [json.loads(line) for line in run.output.splitlines() if line.startswith("{")]
    compile_error = None if run.returncode == 0 else run.output.strip().splitlines()[-1:]
    failed = [f"{c['case']} {c['dtype']}" for c in cases if not c["passed"]]
    not_compiled = [c["line"] for c in compiles if not c["compiled"]]
    write_summary(args, "kernel_smoke", {
        "device": torch.cuda.get_device_name() if not args.dry_run else "host CPU (Triton interpreter)",
        "compute_capability": capability, "cases": cases, "failed": failed, "compiles": compiles,
        "not_compiled": not_compiled, "compile_error": compile_error,
    })  # fmt: skip
    print(f"{len(cases) - len(failed)}/{len(cases)} attention cases pass; {len(compiles)} variants compiled"
          f" for sm_{capability}, {len(not_compiled)} failed" + (f"; compiler: {compile_error}" if compile_error else ""))  # fmt: skip
    if (
        args.dry_run
    ):  # a triton without its NVIDIA compiler here: the cases still ran, which is what a dry run checks
        return 1 if failed else 0
    return 1 if failed or not_compiled or compile_error or not compiles else 0


if __name__ == "__main__":
    sys.exit(main())
