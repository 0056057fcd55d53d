"""A small random-weight Llama checkpoint on disk, and greedy generation through `LLMEngine` on a backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tgi.core.interfaces import Backend
from tgi.core.plugins import BackendRegistry, BackendSpec, hookimpl

VOCAB_SIZE = 256
#: prompts (token ids); the first is longer than the prefill budget below, so it is chunked
PROMPTS = ([(7 * i + 3) % VOCAB_SIZE for i in range(45)], [5, 17, 99, 4, 250, 8, 31], list(range(40, 59)))


def write_tiny_llama(path: str | Path, seed: int = 0) -> Path:
    """Save the conformance suite's random-weight Llama (safetensors, config.json, a word-level tokenizer)."""
    from tgi.core.testing.tiny_models import save_random_model

    return save_random_model(
        path, "llama", vocab_size=VOCAB_SIZE, num_heads=4, num_kv_heads=2, max_position_embeddings=256,
        init_std=0.08, seed=seed,
    )  # fmt: skip


class _SinglePlugin:
    """A plugin object registering one backend built by `create`, so the engine selects it by name."""

    def __init__(self, name: str, create: Callable[[], Backend]) -> None:
        self.name, self.create = name, create

    @hookimpl
    def tgi_register_backends(self, register):
        from tgi.core import __version__
        from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult

        register(
            BackendSpec(
                self.name, __version__, INTERFACE_VERSION, 0, "under test", ProbeResult.ok, self.create
            )
        )


def backend_registry(name: str, create: Callable[[], Backend]) -> BackendRegistry:
    """A plugin host that knows one backend, `name`, built by `create` (no entry points loaded)."""
    return BackendRegistry(plugins={name: _SinglePlugin(name, create)}, autoload=False)


def generate_greedy(
    model_path: str | Path,
    name: str,
    create: Callable[[], Backend],
    dtype: str,
    block_size: int,
    prompts: Sequence[Sequence[int]] = PROMPTS,
    max_new_tokens: int = 8,
) -> list[list[int]]:
    """Greedy tokens for `prompts`, generated together (continuous batching, chunked prefill) by an
    `LLMEngine` on the backend `create()` builds, selected by `name` through the plugin host."""
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    registry = backend_registry(name, create)
    config = EngineConfig(
        model_id=str(model_path),
        backend=name,
        dtype=dtype,
        block_size=block_size,
        max_total_tokens=128,
        max_batch_total_tokens=1024,
        max_batch_prefill_tokens=32,  # the 45-token prompt is prefilled in two chunks
        max_num_seqs=8,
    )
    engine = LLMEngine.from_config(config, registry=registry)
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    return [r.token_ids for r in engine.generate([list(p) for p in prompts], params)]


def transformers_greedy(
    model_path: str | Path, prompts: Sequence[Sequence[int]] = PROMPTS, max_new_tokens: int = 8
) -> list[list[int]]:
    """The reference for `generate_greedy`: `transformers`' float32 model of the same checkpoint, each
    prompt on its own, the full sequence run again for every token (no KV cache), the first maximum of the
    last position's logits taken, EOS not stopping it."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = list(prompt)
            for _ in range(max_new_tokens):
                logits = model(torch.tensor([ids])).logits[0, -1]
                ids.append(int(logits.argmax()))
            out.append(ids[len(prompt) :])
    return out


def transformers_prompt_logprobs(model_path: str | Path, prompt: Sequence[int]) -> list[float]:
    """The reference for prompt logprobs: `transformers`' float32 log-probability of each prompt token
    after the ones before it (positions 1 .. len-1; position 0 has none)."""
    rows = transformers_prompt_logprob_rows(model_path, prompt)
    return [row[t] for row, t in zip(rows, prompt[1:], strict=True)]


def transformers_prompt_logprob_rows(model_path: str | Path, prompt: Sequence[int]) -> list[list[float]]:
    """`transformers`' float32 log-softmax over the vocabulary at each prompt position but the last (row j
    is the distribution of the prompt token at position j + 1): the reference for prompt ranks and top tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([list(prompt)])).logits[0, :-1].float(), dim=-1)
    return logprobs.tolist()


def transformers_last_hidden_state(model_path: str | Path, prompt: Sequence[int]) -> list[float]:
    """The reference for last-token pooling: `transformers`' float32 final hidden state (after the last norm)
    of the prompt's last token, by the checkpoint's base model (its causal LM without the head)."""
    return transformers_hidden_states(model_path, prompt)[-1]


def transformers_hidden_states(model_path: str | Path, prompt: Sequence[int]) -> list[list[float]]:
    """The reference for token embeddings: `transformers`' float32 final hidden state (after the last norm) of
    each token of the prompt, by the checkpoint's base model (its causal LM without the head)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([list(prompt)])).last_hidden_state[0].tolist()
