"""A tiny random model that reasons in `<think>` tags as far as its chat template and tokenizer go: a
byte-level tokenizer (every text encodes) with `<think>` and `</think>` added as single tokens, as Qwen3's
and DeepSeek-R1's tokenizers have them, and a chat template written here."""

from __future__ import annotations

from pathlib import Path

from tgi.core.testing.tiny_models import save_random_model

#: DeepSeek-R1's way: the generation prompt opens the reasoning
DEEPSEEK_R1_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|User|>{{ m['content'] }}"
    "{% else %}<|Assistant|>{{ m['content'].split('</think>')[-1] }}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}"
)
THINK_TAGS = ("<think>", "</think>")
VOCAB_SIZE = 2 + 256 + len(THINK_TAGS)  # <unk>, </s>, the 256 bytes, the tags


def byte_tokenizer(added: tuple[str, ...] = THINK_TAGS, chat_template: str | None = None):
    """A `PreTrainedTokenizerFast` with one token per byte (ids 2..257 after `<unk>` and `</s>`) and
    `added` as single tokens after them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_tokens(list(added))
    tokenizer.chat_template = chat_template
    return tokenizer


def save_reasoning_model(folder: Path | str, chat_template: str = DEEPSEEK_R1_TEMPLATE) -> Path:
    """A random Llama with the byte tokenizer above and `chat_template`, saved to `folder`."""
    folder = save_random_model(folder, vocab_size=VOCAB_SIZE)
    byte_tokenizer(chat_template=chat_template).save_pretrained(folder)
    return folder
