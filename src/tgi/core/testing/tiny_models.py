"""Random-weight checkpoints (Llama / Qwen2 by name, or any transformers config) (config.json + safetensors + a word-level tokenizer), for tests
and benchmarks of code paths that need a real checkpoint but not a trained one."""

from __future__ import annotations

from pathlib import Path


def save_random_model(
    folder: Path | str,
    kind: str = "llama",
    *,
    vocab_size: int = 250,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 8,
    num_kv_heads: int = 2,
    tie_word_embeddings: bool = False,
    max_position_embeddings: int = 512,
    init_std: float | None = None,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised model of `kind` ("llama" or "qwen2") to `folder` and return it.
    `init_std` redraws every matrix with that standard deviation (larger weights put logits far apart, so
    that greedy choices are stable across kernels)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kwargs))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**kwargs))
        with torch.no_grad():  # transformers initialises biases to zero: make them count
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    else:
        raise ValueError(kind)
    return _save(folder, model, vocab_size, init_std, dtype)


def save_random_checkpoint(
    folder: Path | str,
    config,
    *,
    init_std: float | None = None,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised model of any transformers `config` (with a word-level tokenizer of
    `config.vocab_size` words) to `folder` and return it; `init_std` as in `save_random_model`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    return _save(folder, model, config.vocab_size, init_std, dtype)


def _save(folder: Path | str, model, vocab_size: int, init_std: float | None, dtype: str) -> Path:
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    if init_std is not None:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, init_std)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(folder)
    return folder
