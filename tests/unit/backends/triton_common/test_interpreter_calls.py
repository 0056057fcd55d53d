"""`interpreter_calls`: inside an interpreted launch, a `@triton.jit` helper's call does not walk and patch
`triton.language` again; what a launch patched is restored after it; the results are the kernel's."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 is not set (a GPU is visible)", allow_module_level=True)
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from tgi.backends.triton_common import interpreter_calls  # noqa: E402
from tgi.backends.triton_common.kernels import common  # noqa: E402, F401  (installs under the interpreter)

PROGRAMS = 8


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _twice_plus_one_kernel(X, Y, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, _twice(tl.load(X + offs)) + 1)


def test_the_pinned_triton_has_the_interpreter_it_was_written_for():
    assert interpreter_calls.install()  # a new triton without this shape fails here, not by slowing down


def test_a_launch_patches_the_language_once_not_once_per_helper_call(monkeypatch):
    calls = []
    patch_lang = interpreter._patch_lang
    monkeypatch.setattr(interpreter, "_patch_lang", lambda fn: calls.append(fn.__name__) or patch_lang(fn))
    original = (tl.load, tl.store, tl.arange, tl.tensor.__add__)
    x = torch.arange(PROGRAMS * 4, dtype=torch.float32)
    y = torch.empty_like(x)
    _twice_plus_one_kernel[(PROGRAMS,)](x, y, BLOCK=4)
    assert torch.equal(y, 2 * x + 1)
    assert calls == ["_twice_plus_one_kernel"]  # triton's own: once more for each of the 8 helper calls
    assert (tl.load, tl.store, tl.arange, tl.tensor.__add__) == original  # restored after the launch
