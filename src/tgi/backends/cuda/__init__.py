"""The CUDA backend: Triton paged-attention kernels on NVIDIA GPUs (also reused by the ROCm backend)."""
