"""Core's models against transformers' own implementations, on small random-weight models (a helper of
tests/unit/core/models/test_models_vs_transformers.py, test_native_models.py and test_moe_models.py).

The same weights go into both: transformers' model is saved with `save_pretrained` and ours loads the
safetensors as written there (the names and layout real checkpoints have). Our model runs the paged CPU
attention over a ragged batch: step 1 prefills two whole prompts and the first chunk of a third; step 2
prefills that prompt's second chunk while the other two decode; then every sequence decodes for a few steps.
Every logit row we produce is compared with transformers' forward over the whole sequence (prompt + the
tokens fed so far): attention is causal, so row p of the full forward is the logits after position p.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import transformers

from tgi.backends.cpu.attention import CpuAttention
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.core.models import attention_layer_specs, kv_cache_spec, model_class_for
from tgi.core.models.context import AttentionContext, SeqChunk, build_attention_metadata, build_positions

#: the logits tolerance of the parity tests (float32; measured differences are ~1e-6)
ATOL = 1e-4
#: the shape of the small random models the parity tests build from transformers' configs
SMALL = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)

BLOCK_SIZE = 4
PROMPT_LENS = (20, 13, 7)
SPLIT = 6  # the second prompt is prefilled as [0, 6) then [6, 13)
NUM_DECODES = 4


def hf_model(config, seed: int = 0):
    """transformers' model for `config` with weights larger than its 0.02 init, so that differences show."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    return model


def checkpoint_tensors(model) -> dict[str, torch.Tensor]:
    """The tensors `save_pretrained` writes for `model`, by their names in the file."""
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, safe_serialization=True)
        tensors: dict[str, torch.Tensor] = {}
        for file in sorted(Path(folder).glob("*.safetensors")):
            tensors.update(load_file(file))
    return tensors


def load_ours(config, hf, dtype=torch.float32):
    ours = model_class_for(config)(config, dtype=dtype)
    ours.load_weights(checkpoint_tensors(hf).items())
    return ours


def run_and_compare(config, dtype=torch.float32, hf=None) -> float:
    """Run the schedule on our model; return the max abs logit difference to transformers."""
    hf = hf if hf is not None else hf_model(config)
    ours = load_ours(config, hf, dtype)

    gen = torch.Generator().manual_seed(1)
    full = [torch.randint(0, config.vocab_size, (n + NUM_DECODES,), generator=gen) for n in PROMPT_LENS]
    # per sequence: the (start, end, is_prefill) pieces fed at each step
    pieces = [
        [(0, 20, True)] + [(20 + i, 21 + i, False) for i in range(NUM_DECODES)],
        [(0, SPLIT, True), (SPLIT, 13, True)] + [(13 + i, 14 + i, False) for i in range(NUM_DECODES - 1)],
        [(0, 7, True)] + [(7 + i, 8 + i, False) for i in range(NUM_DECODES)],
    ]
    with torch.no_grad():  # over the tokens fed (LongRoPE's choice depends on the whole length)
        expected = [hf(ids[None, : p[-1][1]]).logits[0].float() for ids, p in zip(full, pieces, strict=True)]
    spec = kv_cache_spec(config, BLOCK_SIZE, str(dtype).removeprefix("torch."))
    blocks_per_seq = [(len(t) + BLOCK_SIZE - 1) // BLOCK_SIZE for t in full]
    perm = torch.randperm(sum(blocks_per_seq) + 2, generator=gen).tolist()
    tables, off = [], 0
    for n in blocks_per_seq:
        tables.append(perm[off : off + n])
        off += n
    cache = CpuKVCache(spec, len(perm))
    attn = CpuAttention()
    for layer in attention_layer_specs(config):
        attn.check(layer, BLOCK_SIZE, spec.dtype)

    max_diff = 0.0
    for step in range(max(len(p) for p in pieces)):
        work = [(i, *pieces[i][step]) for i in range(len(pieces)) if step < len(pieces[i])]
        work.sort(key=lambda w: not w[3])  # prefill chunks first
        chunks = [SeqChunk(a, b - a, tables[i], pf) for i, a, b, pf in work]
        meta = build_attention_metadata(chunks, BLOCK_SIZE)
        attn.prepare(meta)
        input_ids = torch.cat([full[i][a:b] for i, a, b, _ in work])
        with torch.no_grad():
            hidden = ours(input_ids, build_positions(chunks), AttentionContext(attn, cache, meta))
            logits = ours.compute_logits(hidden)
        assert logits.dtype == torch.float32 and logits.shape == (len(input_ids), config.vocab_size)
        ref = torch.cat([expected[i][a:b] for i, a, b, _ in work])
        max_diff = max(max_diff, (logits - ref).abs().max().item())
    return max_diff
