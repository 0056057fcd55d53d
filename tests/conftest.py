"""Shared test set-up.

Plugins that happen to be installed on the machine are ignored: only the in-tree `cpu` backend is loaded
from entry points unless a test asks for more (`TGI_PLUGINS`).
"""

from __future__ import annotations

import json
import os
import pathlib
import resource

# Each pytest-xdist worker (and every process it starts: servers, ranks) computes on one thread, unless the
# caller set OMP_NUM_THREADS: two workers of two OpenMP threads each on two cores spent their time in each
# other's barriers (tests/integration took 5.6x as long as on one worker; one thread a worker: 0.85x).
# Read by torch at import and by the CPU backend at creation, so it is set before torch is imported. The
# native kernels' own tests run on every core (tests/unit/backends/cpu/conftest.py).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE
from launch_zygote import reaped_cpu_seconds

os.environ.setdefault("TGI_PLUGINS", "cpu")
# Without a GPU, Triton kernels (CUDA/ROCm/XPU backends) run on CPU tensors in Triton's interpreter; it must be
# switched on before triton is first imported, so it is set here, before any test module loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tests never reach a model hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

Q4_K_M_NAME = "SmolLM2-135M-Instruct.Q4_K_M.gguf"


@pytest.fixture(scope="session")
def default_q4_k_m(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """The default model requantized to Q4_K_M by core's reference K-quantizer (`write_k_quant_gguf`): (its
    path, {tensor: type}), written once per test run for every worker (`helpers.built_once`)."""
    from helpers.built_once import built_once

    from tgi.core.loading import default_model_path
    from tgi.core.testing.kquants import write_k_quant_gguf

    def build(folder: pathlib.Path) -> None:
        types = write_k_quant_gguf(default_model_path(), str(folder / Q4_K_M_NAME), "Q4_K_M")
        (folder / "types.json").write_text(json.dumps(types))

    folder = built_once(tmp_path_factory, "default-q4-k-m", build)
    return str(folder / Q4_K_M_NAME), json.loads((folder / "types.json").read_text())


_PHASE_START = pytest.StashKey[float]()
_LAST = pytest.StashKey[bool]()


#: seconds spent per folder of tests (setup, call and teardown), summed over the run: where the time goes
_FOLDER_SECONDS: dict[str, float] = {}
#: seconds (setup, call and teardown) per test file
_FILE_SECONDS: dict[str, float] = {}
#: where the run's per-file seconds and CPU seconds are written as JSON (`TGI_SUITE_TIMES=path`), to compare
#: two runs file by file
TIMES_VARIABLE = "TGI_SUITE_TIMES"
#: CPU seconds (user and system) per test file, of the worker and of the processes it started and reaped
#: (servers, ranks: counted when a fixture stops them, in its file's last teardown)
_FILE_CPU: dict[str, float] = {}
#: the suite's CPU time per file travels from the xdist workers in each report's user_properties, named so
CPU_PROPERTY = "cpu_seconds"
#: a worker's last teardown, which stops the session's fixtures (the shared servers), counted apart
SESSION_CPU_PROPERTY = "session_cpu_seconds"
_SESSION_CPU: list[float] = []


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    depth = 3 if len(parts) > 3 and parts[1] == "unit" else 2  # tests/unit/core, tests/e2e, tests/unit/x.py
    return "/".join(parts[: min(depth, len(parts) - 1)]) or parts[0]


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its reaped children, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # launches forked by the worker's zygote are its children, not the worker's (helpers/launch_zygote.py)
    forked = reaped_cpu_seconds()
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_PHASE_START] = _cpu_seconds()
    item.stash[_LAST] = nextitem is None  # its teardown also tears down the session's fixtures
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the CPU seconds spent since the previous phase's report was made."""
    outcome = yield
    now = _cpu_seconds()
    report = outcome.get_result()
    spent = now - item.stash.get(_PHASE_START, now)
    last = call.when == "teardown" and item.stash.get(_LAST, False)
    report.user_properties.append((SESSION_CPU_PROPERTY if last else CPU_PROPERTY, spent))
    item.stash[_PHASE_START] = now


def pytest_runtest_logreport(report) -> None:
    _FOLDER_SECONDS[_folder(report.nodeid)] = (
        _FOLDER_SECONDS.get(_folder(report.nodeid), 0.0) + report.duration
    )
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == CPU_PROPERTY:
            _FILE_CPU[path] = _FILE_CPU.get(path, 0.0) + value
        elif name == SESSION_CPU_PROPERTY:
            _SESSION_CPU.append(value)


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def _cpu() -> str:
    """The CPU's model name and the instruction sets the kernels choose their paths by."""
    try:
        first = pathlib.Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
    except OSError:
        return "unknown CPU"
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    flags = fields.get("flags", "").split()
    have = [
        f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f in flags
    ]
    return f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')}; {' '.join(have) or 'no avx2'})"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    """Where the time went (per folder), and every skip counted by its reason: a kind of machine that skips
    half the suite (no AMX, no AVX-512, no compiler) is seen at the end of its run. The tests skipped for lack
    of a CPU feature are summed on one line of their own."""
    write = terminalreporter.write_line
    terminalreporter.section("where the time went, and what was skipped")
    write(f"CPU: {_cpu()}")
    total = sum(_FOLDER_SECONDS.values())
    for folder, seconds in sorted(_FOLDER_SECONDS.items(), key=lambda kv: -kv[1]):
        write(f"{seconds:8.1f} s {100 * seconds / max(total, 1e-9):5.1f} %  {folder}")
    write(f"{total:8.1f} s in tests (summed over workers)")
    cpu = sum(_FILE_CPU.values())
    session = sum(_SESSION_CPU)
    write(f"{cpu + session:8.1f} CPU s (user and system, with the processes tests started), of which")
    write(
        f"{session:8.1f} CPU s in the session's fixtures (the shared servers, stopped at each worker's end)"
    )
    write("and the most in:")
    for path, seconds in sorted(_FILE_CPU.items(), key=lambda kv: -kv[1])[:15]:
        write(f"{seconds:8.1f} CPU s {100 * seconds / max(cpu, 1e-9):5.1f} %  {path}")
    if os.environ.get(TIMES_VARIABLE):
        record = {
            path: {"seconds": round(seconds, 2), "cpu_seconds": round(_FILE_CPU.get(path, 0.0), 2)}
            for path, seconds in sorted(_FILE_SECONDS.items())
        }
        pathlib.Path(os.environ[TIMES_VARIABLE]).write_text(json.dumps(record, indent=1) + "\n")
        write(f"per-file seconds and CPU seconds written to {os.environ[TIMES_VARIABLE]}")
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = _skip_reason(report).removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        write(f"{n:6d} skipped: {reason[:150]}")
    features: dict[str, int] = {}
    for report in skipped:
        reason = _skip_reason(report)
        if MISSING_CPU_FEATURE in reason:
            what = reason.split(MISSING_CPU_FEATURE, 1)[1].lstrip(": ")
            features[what] = features.get(what, 0) + 1
    if features:
        parts = ", ".join(f"{n} for lack of {what}" for what, n in sorted(features.items()))
        write(f"{sum(features.values())} tests skipped for a CPU feature this machine lacks ({parts})")
