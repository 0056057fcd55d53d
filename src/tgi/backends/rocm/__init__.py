"""The ROCm backend: AMD GPUs through PyTorch's HIP build, reusing the CUDA backend's Triton kernels."""
