"""Device-function calls in Triton's interpreter without re-patching `triton.language` on every call.

Under `TRITON_INTERPRET=1` a kernel launch swaps `triton.language`'s builtins for numpy versions (its
`_patch_lang`) and restores them when the grid has run. Every call of a `@triton.jit` helper from inside a
kernel then does the same walk again (`inspect.getmembers` over `tl`, `tl.tensor`, `tl.math`, ...), although
the launch around it has already swapped everything the helper's module can see: measured on the
conformance suite's deterministic test, a quarter of the interpreted run went to those walks (six per
helper call, 240,000 in one test). This module makes a helper's call patch only the language modules the
launch around it has not patched yet (none, when the helper's module sees `triton.language` as the kernel's
does: every module here), and undoes those patches after the launch's own (triton never undoes a helper's).
The interpreter's Triton-to-numpy type lookup, a pure function that builds a dict of 19 types on each of
its calls, answers from a cache.

Only the interpreter is touched: compiled kernels on a GPU never go through these classes. `install` checks
the interpreter still has the shape this was written against (triton 3.x: `GridExecutor.__call__`,
`InterpretedFunction.__call__`, `_patch_lang`) and leaves it alone otherwise, which only costs speed.
"""

from __future__ import annotations

import inspect
import logging
import threading

logger = logging.getLogger(__name__)

# per thread: a stack of launches, each (ids of the language modules patched, scopes)
_state = threading.local()
_installed = False


def _launches() -> list:
    stack = getattr(_state, "launches", None)
    if stack is None:
        stack = _state.launches = []
    return stack


_LANGUAGES: dict = {}  # function -> the ids of the language modules its module sees


def _languages(fn, tl) -> frozenset[int]:
    """The ids of the language modules `_patch_lang(fn)` patches: `tl` and `tl.core` where `fn`'s module
    sees them (what triton's `_patch_lang` looks for)."""
    found = _LANGUAGES.get(fn)
    if found is None:
        modules = (v for v in fn.__globals__.values() if inspect.ismodule(v))
        found = _LANGUAGES[fn] = frozenset(id(v) for v in modules if v in (tl, tl.core))
    return found


def _remembered(np_dtype_of):
    """`np_dtype_of` (the interpreter's `_get_np_dtype`, which builds a dict of 19 types on every call: 600,000
    calls in one test) answering each Triton type from a cache after its first call."""
    cache: dict = {}

    def np_dtype(tt_dtype):
        try:
            return cache[tt_dtype]
        except KeyError:
            found = cache[tt_dtype] = np_dtype_of(tt_dtype)
            return found
        except TypeError:  # unhashable: asked each time
            return np_dtype_of(tt_dtype)

    return np_dtype


def install() -> bool:
    """Patch the interpreter's launch and device-call paths once per process; True when installed."""
    global _installed
    if _installed:
        return True
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    grid_executor = getattr(interpreter, "GridExecutor", None)
    interpreted = getattr(interpreter, "InterpretedFunction", None)
    error = getattr(interpreter, "InterpreterError", None)
    if not all((grid_executor, interpreted, error, hasattr(interpreter, "_patch_lang"))) or not hasattr(
        interpreted, "rewrite"
    ):
        logger.info("triton's interpreter has another shape: device-function calls left as they are")
        return False
    launch = grid_executor.__call__

    def launch_and_restore(self, *args, **kwargs):
        launches = _launches()
        # the launch patches its kernel's languages itself
        launches.append((set(_languages(self.fn, tl)), []))
        try:
            return launch(self, *args, **kwargs)
        finally:
            _, scopes = launches.pop()
            for scope in reversed(scopes):
                scope.restore()

    def device_call(self, *args, **kwargs):
        launches = _launches()
        if launches:
            patched, scopes = launches[-1]
            languages = _languages(self.fn, tl)
            if not languages <= patched:
                scopes.append(interpreter._patch_lang(self.fn))
                patched.update(languages)
        else:
            interpreter._patch_lang(self.fn)  # called outside a launch: as triton does
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise error(repr(e)) from e

    if hasattr(interpreter, "_get_np_dtype"):
        interpreter._get_np_dtype = _remembered(interpreter._get_np_dtype)
    grid_executor.__call__ = launch_and_restore
    interpreted.__call__ = device_call
    _installed = True
    return True
