"""The interpreted CUDA backend the Triton conformance tests serve models with: `CudaBackend` on CPU tensors,
its kernels run by Triton's interpreter. It lives in the package (`tgi.backends.cuda.interpreted`), where
`cuda_bench.py --dry-run` uses it too; this name stays for the tests that import it from here."""

from tgi.backends.cuda.interpreted import InterpretedCudaBackend

__all__ = ["InterpretedCudaBackend"]
