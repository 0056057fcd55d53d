"""The XPU backend: Intel GPUs through upstream `torch.xpu`, with the Triton kernels shared with CUDA and ROCm."""
