"""Tokenizer loading, chat templates and stop tokens.

A GGUF file embeds its tokenizer and chat template; transformers rebuilds a fast tokenizer from that metadata
(`AutoTokenizer.from_pretrained(folder, gguf_file=name)`), which takes ~6 s for SmolLM2's 49k-token vocabulary.
The result is cached on disk (`save_pretrained` under `$TGI_CACHE_DIR/tokenizers/`, default
`~/.cache/tgi/tokenizers/`, keyed by the file's path, size and mtime and the transformers version), so later
loads take ~0.2 s. Set `TGI_TOKENIZER_CACHE=0` to disable the cache.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi.core.loading.source import ModelSource

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

_CACHE_FORMAT = "1"  # bump when what is cached changes
# Tokens that end an assistant turn in common chat templates; added to the stop ids when the template uses them.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


def cache_dir() -> Path:
    """tgi's on-disk cache: `$TGI_CACHE_DIR`, else `$XDG_CACHE_HOME/tgi`, else `~/.cache/tgi`."""
    if os.environ.get("TGI_CACHE_DIR"):
        return Path(os.environ["TGI_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tgi"


def _cache_enabled() -> bool:
    return os.environ.get("TGI_TOKENIZER_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def gguf_cache_entry(gguf_path: str | Path, kind: str, version: str) -> Path:
    """Where something transformers derives from the GGUF file `gguf_path` is cached: `cache_dir()/kind/`,
    named by the file's path, size and mtime, transformers' version and the entry's format `version`."""
    import transformers

    st = os.stat(gguf_path)
    key = "|".join(
        (os.path.abspath(gguf_path), str(st.st_size), str(st.st_mtime_ns), transformers.__version__, version)
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_dir() / kind / f"{Path(gguf_path).stem}-{digest}"


def _load_gguf_tokenizer(gguf_path: str, use_cache: bool) -> PreTrainedTokenizerFast:
    from transformers import AutoTokenizer

    cached = gguf_cache_entry(gguf_path, "tokenizers", _CACHE_FORMAT) if use_cache else None
    if cached is not None and (cached / "tokenizer.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(cached))
        except Exception as e:  # a damaged cache entry: rebuild it
            log.warning("ignoring the cached tokenizer in %s: %s", cached, e)
            shutil.rmtree(cached, ignore_errors=True)

    folder, name = os.path.split(os.path.abspath(gguf_path))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if cached is not None:
        tmp = cached.with_name(f"{cached.name}.tmp-{os.getpid()}")
        try:
            tokenizer.save_pretrained(str(tmp))
            os.replace(tmp, cached)  # atomic; fails if another process won the race, which is fine
        except OSError as e:
            log.info("could not cache the tokenizer in %s: %s", cached, e)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def load_tokenizer(source: ModelSource, use_cache: bool | None = None) -> PreTrainedTokenizerFast:
    """The model's fast tokenizer (with its chat template, when the model has one).

    GGUF: built from the file's metadata, cached on disk (see the module docstring); folders:
    `AutoTokenizer.from_pretrained(folder)`, a tokenizer class of the checkpoint's own (`auto_map`) only
    with `source.trust_remote_code` (else `ConfigError` naming `--trust-remote-code`).
    """
    from transformers import AutoTokenizer

    from tgi.core.config import ConfigError

    if use_cache is None:
        use_cache = _cache_enabled()
    path = source.tokenizer_path
    if path.lower().endswith(".gguf"):
        tokenizer = _load_gguf_tokenizer(path, use_cache)
    else:
        try:  # never None: transformers would ask on a terminal
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=source.trust_remote_code)
        except ValueError as e:
            if source.trust_remote_code or "trust_remote_code" not in str(e):
                raise
            raise ConfigError(
                f"{source.model_id}: its tokenizer needs the checkpoint's own code; pass --trust-remote-code "
                "(TRUST_REMOTE_CODE=true) to run it"
            ) from e
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{source.model_id}: only fast (tokenizers-backed) tokenizers are supported")
    return tokenizer


def apply_chat_template(
    tokenizer: PreTrainedTokenizerFast,
    messages: Sequence[dict[str, Any]],
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> list[int]:
    """Render `messages` with the model's chat template and tokenize the text (no extra special tokens: the
    template writes them itself). Raises ValueError when the model has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or "this model"
        raise ValueError(
            f"{name} has no chat template: send a plain prompt (completions) instead of chat messages"
        )
    text = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=add_generation_prompt, tokenize=False, **template_kwargs
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def count_tokens(tokenizer: PreTrainedTokenizerFast, text: str, add_special_tokens: bool = True) -> int:
    """How many tokens `tokenizer(text, add_special_tokens=...)` gives, counted in the Rust tokenizer: its
    batch encode runs with the GIL released and nothing is turned into Python objects. A megabyte of text is
    ~175,000 tokens; building their ids and offsets as Python lists holds the GIL for tens of milliseconds,
    in which the engine's thread cannot start its next kernel (a stall of every stream), so a route that refuses
    past a limit counts first and converts only what it keeps.

    The special-token splitting is the one transformers' own call sets (`split_special_tokens`). A truncation
    stored in the tokenizer file, which transformers turns off at its first plain call, would make this count
    short, never long: a count past a limit is always a true one."""
    backend = tokenizer.backend_tokenizer
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    if backend.encode_special_tokens != split:
        backend.encode_special_tokens = split  # what transformers sets before each of its own calls
    (encoding,) = backend.encode_batch([text], add_special_tokens=add_special_tokens)
    return len(encoding)


def _ids(value: int | Iterable[int] | None) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def config_eos_token_ids(config: PretrainedConfig) -> tuple[int, ...]:
    """The model's own eos ids: the config's, and generation_config.json's (folders), without repeats."""
    found = _ids(getattr(config, "eos_token_id", None))
    folder = getattr(config, "_name_or_path", "") or ""
    if folder and os.path.isfile(os.path.join(folder, "generation_config.json")):
        try:
            from transformers import GenerationConfig

            found += _ids(GenerationConfig.from_pretrained(folder).eos_token_id)
        except Exception as e:  # a broken generation_config.json must not stop the server
            log.warning("ignoring %s/generation_config.json: %s", folder, e)
    return tuple(dict.fromkeys(found))


def eos_token_ids(
    tokenizer: PreTrainedTokenizerFast, config: PretrainedConfig | None = None
) -> tuple[int, ...]:
    """Token ids that end generation: the config's eos id(s), the tokenizer's eos id, generation_config.json's
    eos ids (folders), and the end-of-turn token of the chat template (e.g. `<|im_end|>`), so that a chat
    completion stops at the end of the assistant's turn. In config / tokenizer order, without repeats."""
    found = list(config_eos_token_ids(config)) if config is not None else []
    found += _ids(getattr(tokenizer, "eos_token_id", None))
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates
        template = "\n".join(str(t) for t in template.values())
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        # Only the turn terminator the template emits; "<|endoftext|>"/"</s>" count only as such, too.
        if token in template and token in vocab:
            found.append(vocab[token])
    return tuple(dict.fromkeys(found))
