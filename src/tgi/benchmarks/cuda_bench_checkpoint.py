"""The model `cuda_bench.py` runs: random bfloat16 weights of Llama-3.1-8B's shapes (or, for a dry run on the
CPU, a tiny model of the same architecture) written as a sharded safetensors checkpoint with a word-level
tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_31_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=128001,
    torch_dtype="bfloat16",
)
#: the dry run's model: Llama-3.1-8B's architecture (llama3 RoPE scaling, GQA, untied head), tiny
DRY_MODEL = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
    rope_scaling=dict(LLAMA_31_8B["rope_scaling"], original_max_position_embeddings=1024),
)  # fmt: skip


def write_checkpoint(path: Path, num_layers: int | None, dry_run: bool = False) -> None:
    """Random bfloat16 weights (normal, std 0.02) of the Llama-3.1-8B shapes (`DRY_MODEL`'s with
    `dry_run`, drawn on the CPU), sharded safetensors."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cfg = dict(LLAMA_31_8B, **(DRY_MODEL if dry_run else {}))
    cfg.update({"num_hidden_layers": num_layers} if num_layers else {})
    config = transformers.LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    path.mkdir(parents=True, exist_ok=True)
    device = "cpu" if dry_run else "cuda"
    gen = torch.Generator(device=device).manual_seed(0)
    weight_map, shard, shard_bytes, n = {}, {}, 0, 0

    def flush():
        nonlocal shard, shard_bytes, n
        if shard:
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(path / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard, shard_bytes, n = {}, 0, n + 1

    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (
                (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02)
                .to(torch.bfloat16)
                .cpu()
            )
        shard[name] = t
        shard_bytes += t.numel() * 2
        if shard_bytes > 4 << 30:
            flush()
    flush()
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.save_pretrained(path)
    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, config.vocab_size)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token=f"t{config.eos_token_id}"
    )
    fast.save_pretrained(path)
