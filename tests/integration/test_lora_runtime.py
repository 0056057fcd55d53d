"""LoRA adapters loaded and unloaded at run time (`LLMEngine.lora`, `POST /v1/load_lora_adapter`'s engine side)
on a tiny random Llama with adapters made by `peft`: an adapter loaded into a running engine gives transformers
+ peft's greedy tokens; one that does not fit is refused with the reason and changes nothing; an adapter in
use is retired (new requests refused) and unloaded only once its requests have finished; an id unloaded and
loaded again with other weights never reads the prefix-cache blocks of the old ones; under tensor
parallelism every rank loads it, after every rank has checked it (a refusal on rank 1 alone leaves the group
serving); `max_loras` and `max_lora_rank` are refused by their flags' names."""

from __future__ import annotations

import multiprocessing

import pytest

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.lora import AdapterError
from tgi.core.lora.served_adapters import AdapterInUseError, LoRALimitError
from tgi.core.request import ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.lora import peft_greedy, write_random_lora
from tgi.core.testing.model import PROMPTS, write_tiny_llama
from tgi.core.testing.tiny_models import save_random_model

N = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-runtime")
    base = write_tiny_llama(root / "base")
    paths = {
        "one": write_random_lora(root / "one", base, seed=21),
        "two": write_random_lora(root / "two", base, r=4, target_modules=("q_proj", "up_proj"), seed=22),
    }
    want = {name: peft_greedy(base, path, PROMPTS, N) for name, path in paths.items()}
    return base, paths, want


def _engine(base, **kw) -> LLMEngine:
    config = EngineConfig(
        model_id=str(base), backend="cpu", dtype="float32", block_size=16, max_total_tokens=128,
        max_batch_total_tokens=2048, max_num_seqs=8, **kw,
    )  # fmt: skip
    return LLMEngine.from_config(config)


def _run(engine: LLMEngine, requests) -> list[list[int]]:
    params = [SamplingParams(max_new_tokens=N, ignore_eos=True, adapter_id=a) for _, a in requests]
    return [r.token_ids for r in engine.generate([list(p) for p, _ in requests], params)]


def test_load_refuse_retire_unload(model, tmp_path):
    base, paths, want = model
    engine = _engine(base)  # started without adapters
    engine.lora.load("one", str(paths["one"]))
    assert engine.model_info.lora_adapters == ("one",)
    requests = [(p, a) for p in PROMPTS for a in (None, "one")]
    got = _run(engine, requests)
    assert got[1::2] == want["one"]
    other = save_random_model(tmp_path / "other", "llama", hidden_size=32, intermediate_size=64, num_heads=4)
    with pytest.raises(AdapterError, match=r"'bad'.*trained for another model"):
        engine.lora.load("bad", str(write_random_lora(tmp_path / "bad", other, seed=4)))
    with pytest.raises(ValueError, match="loaded already"):
        engine.lora.load("one", str(paths["two"]))
    assert engine.model_info.lora_adapters == ("one",)
    assert _run(engine, requests) == got  # the refusals changed nothing

    # in use: retired at once (new requests refused), unloaded once its request has finished
    rid = engine.add_request(
        list(PROMPTS[1]), SamplingParams(max_new_tokens=N, ignore_eos=True, adapter_id="one")
    )
    tokens = [e.token_id for e in engine.step() if e.request_id == rid]
    with pytest.raises(AdapterInUseError, match="in use by 1"):
        engine.lora.unload("one")
    engine.lora.retire("one")
    assert engine.model_info.lora_adapters == ()
    with pytest.raises(ValidationError, match="`one` is not loaded"):
        engine.add_request([1, 2, 3], SamplingParams(adapter_id="one"))
    while engine.has_unfinished():
        tokens += [e.token_id for e in engine.step() if e.request_id == rid]
    assert tokens == want["one"][1]  # it kept its adapter to the end
    engine.lora.unload("one")
    assert engine.lora.loaded == () and engine.runner.lora.num_linears == 0
    with pytest.raises(KeyError):
        engine.lora.unload("one")
    assert _run(engine, [(PROMPTS[2], None)]) == [got[4]]  # the base model's own again


def test_an_id_loaded_again_never_reads_the_old_weights_blocks(model):
    base, paths, want = model
    engine = _engine(base, prefix_caching=True)
    prompt = PROMPTS[0]  # 45 tokens: two full blocks of 16 are cached
    engine.lora.load("x", str(paths["one"]))
    assert _run(engine, [(prompt, "x")]) == [want["one"][0]]
    hits = engine.stats().num_prefix_cache_hit_tokens
    assert _run(engine, [(prompt, "x")]) == [want["one"][0]]
    assert engine.stats().num_prefix_cache_hit_tokens > hits  # the same load of "x" reuses its blocks
    engine.lora.unload("x")
    engine.lora.load("x", str(paths["two"]))  # the same id, other weights
    hits = engine.stats().num_prefix_cache_hit_tokens
    assert _run(engine, [(prompt, "x")]) == [want["two"][0]]
    assert engine.stats().num_prefix_cache_hit_tokens == hits


@pytest.fixture(scope="module")
def two_ranks(model, tmp_path_factory):
    """One group of two ranks for the module's tensor-parallel tests (each leaves it without adapters),
    its worker spawned in a working folder of its own (`spawned_in`), and rank 0's folder beside it."""
    base, _, _ = model
    root = tmp_path_factory.mktemp("two-ranks")
    spawned_in, here = root / "workers", root / "rank0"
    spawned_in.mkdir()
    here.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(spawned_in)
        engine = _engine(base, num_shard=2)
    try:
        yield engine, here
    finally:
        engine.runner.shutdown()
    assert not multiprocessing.active_children()


def test_two_ranks_load_and_refuse_at_run_time(model, two_ranks, tmp_path):
    _, paths, want = model
    engine, _ = two_ranks
    engine.lora.load("two", str(paths["two"]))
    requests = [(p, "two") for p in PROMPTS]
    assert _run(engine, requests) == want["two"]
    bad = tmp_path / "missing"
    with pytest.raises(AdapterError, match="is not a folder"):
        engine.lora.load("bad", str(bad))
    engine.lora.unload("two")
    engine.lora.load("one", str(paths["one"]))  # the group still serves after a refusal
    assert _run(engine, [(p, "one") for p in PROMPTS]) == want["one"]
    engine.lora.unload("one")


def test_max_loras_and_max_lora_rank_are_refused_by_name(model, tmp_path):
    base, paths, _ = model
    with pytest.raises(ConfigError, match="--lora-adapters names 2 adapters, more than --max-loras 1"):
        EngineConfig(model_id=str(base), lora_adapters=tuple(paths.items()), max_loras=1)
    with pytest.raises(AdapterError, match="'one': its rank 8 is larger than --max-lora-rank 4"):
        _engine(base, lora_adapters=(("one", str(paths["one"])),), max_lora_rank=4)  # at start
    engine = _engine(base, max_loras=1, max_lora_rank=4)
    with pytest.raises(AdapterError, match="rank 8 is larger than --max-lora-rank 4") as info:
        engine.lora.load("one", str(paths["one"]))  # r=8
    assert str(tmp_path) not in info.value.reason
    engine.lora.load("two", str(paths["two"]))  # r=4
    with pytest.raises(LoRALimitError, match="as many as --max-loras 1"):
        engine.lora.load("three", str(paths["two"]))
    engine.lora.unload("two")
    engine.lora.load("three", str(paths["two"]))
    assert engine.model_info.lora_adapters == ("three",)


def test_a_refusal_on_another_rank_than_0_leaves_the_group_serving(model, two_ranks, monkeypatch):
    """Rank 1 alone cannot read the adapter: the workers were started in another working folder, where the
    relative `lora_path` names nothing. Every rank checks before any applies, so it is only refused."""
    _, paths, want = model
    engine, here = two_ranks
    monkeypatch.chdir(here)
    (here / "adapter").symlink_to(paths["one"])  # rank 0 finds it, rank 1 (in `spawned_in`) does not
    with pytest.raises(AdapterError, match=r"refused on tensor-parallel rank\(s\) \[1\]"):
        engine.lora.load("one", "adapter")
    assert engine.model_info.lora_adapters == ()
    engine.lora.load("one", str(paths["one"]))  # the group still serves
    assert _run(engine, [(p, "one") for p in PROMPTS]) == want["one"]
    engine.lora.unload("one")
