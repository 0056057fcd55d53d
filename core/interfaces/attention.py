"""Deprecated location, kept as a re-export: the torch attention interface is `tgi.core.torch.attention`.

`backends/cpu/attention.py` still imports it from here (that file belongs to the CPU backend's speed work,
issue 22); remove this module once it imports `tgi.core.torch`. Nothing else may import it (an import-linter
contract in pyproject.toml).
"""

from tgi.core.torch.attention import AttentionBackend, AttentionLayerSpec, AttentionMetadata, UnsupportedError

__all__ = ["AttentionBackend", "AttentionLayerSpec", "AttentionMetadata", "UnsupportedError"]
