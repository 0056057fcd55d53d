"""Which attention the CPU backend serves: the two it has, the default (cpu-native where a C++ compiler is
found), and making one by name."""

from __future__ import annotations

import logging

from tgi.core.torch import AttentionBackend

log = logging.getLogger("tgi.backends.cpu.backend")  # the backend's own log, as before this module split off

#: "cpu-native": decode on the C++ paged kernel (compiled at first use; needs g++ and ninja);
#: "cpu-sdpa": the pure-torch reference (index_select gather + masked SDPA). Prefill is the same in both.
ATTENTION_NAMES = ("cpu-native", "cpu-sdpa")


def default_attention() -> str:
    """cpu-native where a C++ compiler is found to build it (it is ~1.1-1.2x faster per decode step), else
    the reference, with a warning that says why. Asking for cpu-native explicitly, or a failed build where
    a compiler exists, is an error, never a fallback."""
    from tgi.backends.cpu import native

    if native.compiler_found():
        return "cpu-native"
    log.warning("attention cpu-sdpa: no C++ compiler found (cpu-native compiles its decode kernel at start)")
    return "cpu-sdpa"


def create_attention(name: str, batch_invariant: bool = False) -> AttentionBackend:
    """The attention `name` (one of `ATTENTION_NAMES`); cpu-native that cannot be built is an error naming
    the reference, never a silent fallback."""
    from tgi.backends.cpu.attention import CpuAttention, CpuNativeAttention
    from tgi.backends.cpu.native import NativeBuildError
    from tgi.core.interfaces import UnsupportedError

    if name == "cpu-sdpa":
        return CpuAttention()
    try:
        return CpuNativeAttention(batch_invariant)
    except NativeBuildError as e:  # never fall back silently: the user picks the reference explicitly
        raise UnsupportedError(
            f"attention 'cpu-native' is unavailable: {e} (use --attention cpu-sdpa)"
        ) from e
