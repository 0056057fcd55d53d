"""`cuda_bench.py`'s `step` section: the latency of a decode step at `--step-concurrency` rows, the kernels
it launches and the share of its wall time the GPU is busy."""

from __future__ import annotations

import time

from tgi.benchmarks.cuda_bench import random_prompts, step_tokens


def busy_fraction(intervals: list[tuple[float, float]], wall: float) -> float:
    """The share of `wall` covered by the union of the (start, end) `intervals` (same unit)."""
    covered, end_so_far = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= end_so_far:
            continue
        covered += end - max(start, end_so_far)
        end_so_far = end
    return covered / wall if wall > 0 else 0.0


def bench_decode_step(args, engine, device, figures: dict) -> None:
    """`--step-concurrency` requests decoding together: once all are prefilled, `--warmup-steps` untimed
    steps, then `--step-iters` steps each timed on the device (CUDA events), then the same number under
    `torch.profiler`: kernels launched per step and the GPU-busy fraction (the union of kernel intervals over
    the profiled wall time). The dry run reports the fields, from the CPU: no kernel is a CUDA kernel there."""
    from torch.profiler import ProfilerActivity, profile

    from tgi.core.sampling_params import SamplingParams

    c = args.step_concurrency
    total = step_tokens(args)
    vocab = engine.model_info.vocab_size
    for prompt in random_prompts(c, args.prompt_len, vocab, 4):
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
