"""What rank 0 broadcasts per decode step of `--num-shard 2` (gloo): a delta per sequence, so its bytes do not
grow with the context (measured at 128 and 4,096 tokens)."""

from __future__ import annotations

import multiprocessing

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.tiny_models import save_random_model

VOCAB = 250


def decode_step_bytes(folder: str, context: int) -> int:
    """The most bytes rank 0 broadcast for a step that decodes both sequences (no prefill in it)."""
    config = EngineConfig(
        model_id=folder, num_shard=2, dtype="float32", max_batch_total_tokens=16384, max_total_tokens=4200,
        max_batch_prefill_tokens=8192, max_num_seqs=4,
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    runner, measured = engine.runner, []
    execute = runner.execute

    def measure(batch):
        output = execute(batch)
        if batch.num_prefill_seqs == 0 and len(batch.sequences) == 2:
            measured.append(runner.last_command_bytes)
        return output

    runner.execute = measure
    try:
        prompts = [[(7 * i + k) % VOCAB for i in range(context)] for k in (1, 2)]
        engine.generate(prompts, SamplingParams(max_new_tokens=4, ignore_eos=True))
    finally:
        runner.shutdown()
    assert len(measured) >= 2, measured
    return max(measured)


def test_decode_step_bytes_do_not_grow_with_the_context(tmp_path):
    folder = str(tmp_path / "llama")
    save_random_model(
        folder,
        "llama",
        vocab_size=VOCAB,
        num_kv_heads=2,
        tie_word_embeddings=False,
        max_position_embeddings=4608,
    )
    small, large = decode_step_bytes(folder, 128), decode_step_bytes(folder, 4096)
    print(f"bytes per decode step of 2 sequences: {small} at 128 tokens of context, {large} at 4096")
    assert small > 0 and large <= small * 1.10, (small, large)
    assert not multiprocessing.active_children()
