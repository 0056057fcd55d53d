"""The Triton kernel variants a piece of code launches, keyed as a GPU's JIT cache keys its compiles.

Triton compiles a kernel once per variant: its constexpr arguments, its launch options (`num_warps`,
`num_stages`), its tensors' dtypes and 16-byte alignment, and the specialisation of its integer arguments
(divisible by 16 or not; the type, i32 or i64) unless `do_not_specialize` names them. Under
`TRITON_INTERPRET=1` nothing compiles, so `recording_variants` computes for each launch of an interpreted
kernel the key `JITFunction.run` would look its compiled kernel up by (Triton's own binder, for the CUDA
backend of an sm_90 target, on the launch's arguments): a key not yet seen is a compile on a GPU.
"""

from __future__ import annotations

import contextlib

from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, create_function_from_signature

#: the GPU whose JIT is imitated (the keys depend on the backend's specialisation rules, not on the GPU)
TARGET = GPUTarget("cuda", 90, 64)
_BINDERS: dict = {}


def _binder(kernel: InterpretedFunction):
    """Triton's argument binder of `kernel`'s compiled twin (made once per kernel)."""
    if kernel.fn not in _BINDERS:
        jit = JITFunction(kernel.fn, **kernel.kwargs)
        _BINDERS[kernel.fn] = create_function_from_signature(jit.signature, jit.params, make_backend(TARGET))
    return _BINDERS[kernel.fn]


def variant_of(kernel: InterpretedFunction, args: tuple, kwargs: dict) -> tuple:
    """(module.kernel, ((argument, its specialisation), ...), launch options): what `JITFunction.run` keys a
    compile by. A specialisation is ("constexpr", value), or a type ("*fp32", "i32", ...) and "D" (pointer
    16-byte aligned, integer divisible by 16), "" (neither) or None (not specialised on)."""
    bound, specialization, options = _binder(kernel)(*args, **kwargs)
    name = f"{kernel.fn.__module__.rsplit('.', 1)[-1]}.{kernel.__name__}"
    return (name, tuple(zip(bound, map(tuple, specialization), strict=True)), tuple(sorted(options.items())))


@contextlib.contextmanager
def recording_variants(into: set):
    """Add the variant of every interpreted kernel launched inside the block to `into`."""
    run = InterpretedFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        into.add(variant_of(self, args, kwargs))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = record
    try:
        yield
    finally:
        InterpretedFunction.run = run


def arguments(variant: tuple) -> dict:
    """A recorded variant's arguments: name -> specialisation (`variant_of`)."""
    return dict(variant[1])
