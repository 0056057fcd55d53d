"""`tgi.core.models.layers`: what building a model's layers does before its weights are loaded."""

from __future__ import annotations

import subprocess
import sys


def test_the_embedding_table_is_not_randomly_initialised():
    """The table is filled by `load_weights`: no random init runs (its first call imports torch._dynamo,
    ~0.7 s of a load), checked in a fresh interpreter."""
    code = (
        "import sys, torch\n"
        "from tgi.core.models.layers import LinearFactory\n"
        "e = LinearFactory().embedding(64, 8, dtype=torch.bfloat16, device='meta')\n"
        "assert (e.num_embeddings, e.embedding_dim, e.padding_idx) == (64, 8, None)\n"
        "assert e.weight.shape == (64, 8) and e.weight.dtype == torch.bfloat16 and e.weight.is_meta\n"
        "assert 'torch._dynamo' not in sys.modules, 'a random init ran'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
