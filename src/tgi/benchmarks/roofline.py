"""`tgi benchmark roofline`: this machine's own limits, measured, and serving figures as fractions of them.

Two ceilings bound a decoder on a CPU. Batch-1 decode reads every weight once per step, so its step time is at
least the weights' bytes over the memory's read bandwidth; batched decode and prefill multiply those weights
by many rows, so their tokens per second are at most the product instructions' multiply-adds per second over
the multiply-adds a token costs. Both ceilings are measured here by the native module
(`tgi.backends.cpu.native`, `roofline.cpp`), not read from a data sheet:

- **read bandwidth**: a streaming read on every thread over a buffer of several times the last-level cache
  (64-byte vector loads, each thread its own contiguous share), the best of a few passes;
- **peaks**: a tight loop of each product instruction the kernels are built on (float32 FMA, the AVX-512
  bfloat16 dot product, AVX2's int8 multiply-add chain, AVX512-VNNI's `vpdpbusd`, AMX's bfloat16 and int8
  tiles), on every thread, with enough independent accumulators that the instruction's throughput bounds it
  and its operands held in registers (tiles): a kernel that also streams its weights approaches it, never
  passes it.

`tgi benchmark serving --roofline FILE` (the JSON this command writes with `--json`) adds two columns to its
table, for a GGUF model it can read: the share of the bandwidth one step's weight reads use at the measured
inter-token latency, and the share of the reference peak the level's tokens per second use
(`serving_fractions`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "Roofline",
    "WeightCost",
    "add_arguments",
    "format_roofline",
    "last_level_cache_bytes",
    "measure",
    "reference_peak",
    "run",
    "serving_fractions",
    "weight_cost",
]

#: the loops whose peaks are the reference for a model's products, in order of preference: the int8 paths
#: (GGUF's K-quants, Q8_0 and Q4_x on int8 inputs) and the bfloat16 ones (dense weights, AMX block linear).
#: int8 AMX is measured but not a reference: no kernel uses it yet.
INT8_REFERENCES = ("int8-vnni-avx512", "int8-avx2")
BF16_REFERENCES = ("bf16-amx", "bf16-dot-avx512", "f32-fma-avx512", "f32-fma-avx2")


@dataclass(frozen=True)
class Roofline:
    """What `measure` found: the CPU, the threads used, bytes read per second, and multiply-adds per second
    of each product loop by name."""

    cpu: str
    threads: int
    buffer_bytes: int
    read_bytes_per_s: float
    peaks: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Roofline:
        return cls(**{k: data[k] for k in ("cpu", "threads", "buffer_bytes", "read_bytes_per_s", "peaks")})


def last_level_cache_bytes() -> int | None:
    """The largest cache the kernel lists for CPU 0 (sysfs), or None where it lists none."""
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            size = int(digits) * scale
            best = size if best is None else max(best, size)
    return best


def _threads(threads: int | None) -> int:
    return threads or len(os.sched_getaffinity(0))


def measure_bandwidth(threads: int, buffer_bytes: int, passes: int = 3, repeats: int = 3) -> float:
    """Bytes read per second: the best of `repeats` timings of `passes` streaming reads of the buffer."""
    import torch

    from tgi.backends.cpu import native

    buffer = torch.ones(buffer_bytes, dtype=torch.uint8)  # written once: every page is mapped before timing
    lib = native.load()
    lib.roofline_read(buffer, 1, threads)  # a first pass warms the TLB and the threads
    best = 0.0
    for _ in range(repeats):
        seconds, read = lib.roofline_read(buffer, passes, threads)
        best = max(best, read / seconds)
    return best


def measure_peak(name: str, threads: int, seconds: float = 0.2, repeats: int = 3) -> float:
    """Multiply-adds per second of one product loop: iterations grown until a run takes `seconds`, then the
    best of `repeats` runs."""
    from tgi.backends.cpu import native

    lib = native.load()
    iterations = 1024
    while True:
        took, _ = lib.roofline_peak(name, iterations, threads)
        if took >= seconds / 4 or iterations >= 2**40:
            break
        iterations *= 4
    iterations = max(1, int(iterations * seconds / max(took, 1e-9)))
    best = 0.0
    for _ in range(repeats):
        took, macs = lib.roofline_peak(name, iterations, threads)
        best = max(best, macs / took)
    return best


def measure(threads: int | None = None, buffer_bytes: int | None = None, seconds: float = 0.2) -> Roofline:
    """This machine's read bandwidth and the peak of every product loop it can run, on `threads` threads
    (default: every CPU this process may use). The buffer defaults to four times the last-level cache, at
    least 256 MiB and at most 4 GiB."""
    from tgi.backends.cpu import native
    from tgi.benchmarks.report import machine_info

    n = _threads(threads)
    if buffer_bytes is None:
        llc = last_level_cache_bytes() or 64 * 2**20
        buffer_bytes = min(max(4 * llc, 256 * 2**20), 4 * 2**30)
    peaks = {name: measure_peak(name, n, seconds) for name in native.load().roofline_peaks()}
    return Roofline(
        cpu=str(machine_info().get("cpu")),
        threads=n,
        buffer_bytes=buffer_bytes,
        read_bytes_per_s=measure_bandwidth(n, buffer_bytes),
        peaks=peaks,
    )


def reference_peak(roofline: Roofline, products: str) -> tuple[str, float] | None:
    """The loop (name, multiply-adds per second) a model's products are held to: `int8` for GGUF
    block-quantized weights, `bf16` for dense ones; None where this machine measured none of them."""
    for name in INT8_REFERENCES if products == "int8" else BF16_REFERENCES:
        if name in roofline.peaks:
            return name, roofline.peaks[name]
    return None


@dataclass(frozen=True)
class WeightCost:
    """What one decode step reads and one token costs: the bytes of every weight a step multiplies by (the
    token embedding read row by row is left out, unless the output head shares it) and as many multiply-adds
    per token as those weights have elements (attention over the KV cache, small at short context, is not
    counted)."""

    bytes_per_step: int
    macs_per_token: int
    products: str  # "int8" (block-quantized) or "bf16"


def weight_cost(gguf_path: str) -> WeightCost:
    """A GGUF file's `WeightCost`, read from its tensor table (the project's own reader: it maps the file and
    parses only the header, where gguf's `GGUFReader` takes seconds to build every tensor's view)."""
    from tgi.core.loading.gguf_file import GGUFFile

    tensors = GGUFFile(gguf_path).tensors
    tied = "output.weight" not in {t.name for t in tensors}
    nbytes = macs = 0
    quantized = False
    for t in tensors:
        if len(t.shape) < 2 or (t.name == "token_embd.weight" and not tied):
            continue
        nbytes += int(t.data.nbytes)
        macs += math.prod(int(d) for d in t.shape)
        quantized |= t.tensor_type.name not in ("F32", "F16", "BF16")
    return WeightCost(nbytes, macs, "int8" if quantized else "bf16")


def serving_fractions(row: dict, cost: WeightCost, roofline: Roofline) -> dict:
    """One serving level's shares of the roofline: `bandwidth_share`, the weights' bytes over the median
    inter-token latency against the read bandwidth (a step reads them once, whatever the batch); and
    `peak_share`, the level's tokens per second (prompt and output where the server counted the prompt's)
    times the multiply-adds per token against the reference peak, named in `peak`."""
    out: dict = {"bandwidth_share": None, "peak_share": None, "peak": None}
    itl = (row.get("itl_ms") or {}).get("p50")
    if itl:
        out["bandwidth_share"] = cost.bytes_per_step / (itl / 1000) / roofline.read_bytes_per_s
    reference = reference_peak(roofline, cost.products)
    tokens_per_s = row.get("total_tok_s") or row.get("output_tok_s")
    if reference and tokens_per_s:
        out["peak"] = reference[0]
        out["peak_share"] = tokens_per_s * cost.macs_per_token / reference[1]
    return out


def format_roofline(roofline: Roofline) -> str:
    lines = [
        f"CPU: {roofline.cpu}, {roofline.threads} threads",
        f"read bandwidth: {roofline.read_bytes_per_s / 1e9:.1f} GB/s "
        f"(streaming read of {roofline.buffer_bytes / 2**20:.0f} MiB)",
        "peaks (multiply-adds per second, operands in registers):",
    ]
    for name, value in sorted(roofline.peaks.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:18s} {value / 1e9:10.1f} G/s")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a(
        "--threads",
        type=int,
        default=None,
        help="threads to measure on (default: every CPU this process may use)",
    )
    a(
        "--buffer-mib",
        type=int,
        default=None,
        help="the read's buffer (default: 4x the last-level cache, 256 MiB-4 GiB)",
    )
    a("--seconds", type=float, default=0.2, help="how long each peak's loop runs per timing (default 0.2)")
    a(
        "--json",
        dest="json_path",
        default=None,
        help="also write the measurements here (for serving --roofline)",
    )


def run(args: argparse.Namespace) -> int:
    from tgi.backends.cpu import native

    if not native.available():
        print("error: the native CPU kernels are not built here (make install builds them)", file=sys.stderr)
        return 2
    buffer = args.buffer_mib * 2**20 if args.buffer_mib else None
    roofline = measure(args.threads, buffer, args.seconds)
    print(format_roofline(roofline))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(roofline.to_json(), indent=2) + "\n")
        print(f"JSON: {args.json_path}", file=sys.stderr)
    return 0
