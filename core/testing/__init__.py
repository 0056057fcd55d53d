"""Test helpers that backends of any framework reuse: the reference sampler and its cases
(`reference_sampler`, `sampling_cases`), small random-weight checkpoints (`tiny_models`, `model`).

The torch-level conformance suite (attention, KV cache, sampler on torch tensors) is
`tgi.core.torch.testing.TorchBackendConformance`.
"""
