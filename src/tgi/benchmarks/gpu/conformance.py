"""Call 3 of the GPU plan (about 6 minutes on an H100; stopped at 9): the test suites that run on the device
when a GPU is visible, through pytest: the CUDA conformance suite (`test_cuda_conformance.py`: attention,
KV writes, quantized linears, samplers, greedy generation through `LLMEngine` against `transformers`), CUDA
graphs replayed against eager decoding, the fused ops, fused MoE, LoRA and quantized-model tests (their
`tests/fakes/triton_device.py` puts them on the GPU).

Writes `$OUT/conformance.xml` (JUnit), `$OUT/conformance.log` and `$OUT/conformance.json` (counts, the failed
and skipped tests with their reasons); exits with pytest's status. Needs pytest on the machine (the lent one
has it; pytest-asyncio is not needed by these files, pytest-timeout is used where present). The dry run
selects one quick test of each file, interpreted on the CPU (the conformance and CUDA-graph files skip there).

    python src/tgi/benchmarks/gpu/conformance.py [--dry-run]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from plan_run import child_env, parse_plan_args, run_child, write_summary

FILES = (
    "tests/conformance/test_cuda_conformance.py",
    "tests/conformance/test_triton_cuda_graphs.py",
    "tests/conformance/test_triton_fused_ops.py",
    "tests/conformance/test_triton_fused_moe.py",
    "tests/conformance/test_triton_lora.py",
    "tests/conformance/test_triton_quant_model.py",
)
#: the dry run's selection: the quick tests of those files (the rest interpret whole models on the CPU)
DRY_SELECTION = "kernel_runs_where_expected or bad_shapes_are_refused or rocm_states_the_same_formats"


def junit_summary(path) -> dict:
    """Counts of the JUnit report at `path`, and each failed (with its message) and skipped test."""
    cases = ET.parse(path).getroot().iter("testcase")
    failed, skipped, passed = [], [], 0
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            failed.append({"test": name, "message": (problem.get("message") or "")[:500]})
        elif case.find("skipped") is not None:
            skipped.append({"test": name, "reason": (case.find("skipped").get("message") or "")[:200]})
        else:
            passed += 1
    return {"passed": passed, "failed": failed, "skipped": skipped}


def main(argv: list[str] | None = None) -> int:
    args = parse_plan_args(__doc__.splitlines()[0], time_limit_s=540, argv=argv)
    xml = args.out / "conformance.xml"
    command = [sys.executable, "-m", "pytest", *FILES, "-q", "-rfEs", "-p", "no:cacheprovider",
               f"--junitxml={xml}"]  # fmt: skip
    if args.dry_run:
        command += ["-k", DRY_SELECTION]
    run = run_child(command, child_env(args.dry_run), args.time_limit_s, log=args.out / "conformance.log")
    summary = {"command": run.command, "returncode": run.returncode, "seconds": run.seconds,
               "timed_out": run.timed_out}  # fmt: skip
    if xml.exists():
        summary.update(junit_summary(xml))
    write_summary(args, "conformance", summary)
    if "passed" in summary:
        print(f"{summary['passed']} passed, {len(summary['failed'])} failed, {len(summary['skipped'])} skipped "
              f"in {run.seconds:.0f}s" + (" (stopped: time limit)" if run.timed_out else ""))  # fmt: skip
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
