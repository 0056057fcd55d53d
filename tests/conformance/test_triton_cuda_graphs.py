"""CUDA graphs of decode steps (`graphs.py`, `--cuda-graphs`) on a GPU: a tiny Llama served with decode steps
captured at batch sizes 1, 2 and 4 gives the greedy tokens and logprobs of the same engine run eagerly,
the graphs are replayed (3 requests are padded to the graph of 4, then 2 and 1 as they finish), and
capture succeeds at all (a host sync inside the decode step fails it: see
test_triton_decode_host_syncs.py for the check that runs without a GPU). Skipped where no CUDA device is
visible: a graph can only be captured and replayed on one."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip(
        "CUDA graphs are captured and replayed on a CUDA device: none is visible", allow_module_level=True
    )
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from triton_device import kernel_test_backend

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama

SIZES = (1, 2, 4)


class CountingGraph:
    """A captured graph that counts its replays."""

    def __init__(self, graph) -> None:
        self.graph, self.replays = graph, 0

    def replay(self) -> None:
        self.replays += 1
        self.graph.replay()


def _generate(folder, cuda_graphs):
    config = EngineConfig(
        model_id=str(folder), backend="cuda-test", dtype="float32", block_size=16, max_total_tokens=128,
        max_batch_total_tokens=1024, max_batch_prefill_tokens=64, max_num_seqs=4, cuda_graphs=cuda_graphs,
    )  # fmt: skip
    engine = LLMEngine.from_config(config, registry=backend_registry("cuda-test", kernel_test_backend()))
    graphed = engine.runner.graphed
    if graphed is not None:
        graphed.graphs = {n: CountingGraph(g) for n, g in graphed.graphs.items()}
    lengths = (10, 7, 4)  # requests finish one after another: batches of 3, 2 and 1
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True, logprobs=True) for n in lengths]
    results = engine.generate([list(p) for p in PROMPTS], params)
    tokens = [r.token_ids for r in results]
    logprobs = [[e.logprob for e in r.events] for r in results]
    return tokens, logprobs, graphed


def test_graphed_decode_steps_equal_eager_ones(tmp_path):
    folder = write_tiny_llama(tmp_path / "llama")
    eager_tokens, eager_logprobs, none = _generate(folder, None)
    assert none is None
    tokens, logprobs, graphed = _generate(folder, SIZES)
    assert graphed is not None and sorted(graphed.graphs) == list(SIZES)
    assert all(graphed.graphs[n].replays > 0 for n in SIZES), {
        n: g.replays for n, g in graphed.graphs.items()
    }
    assert tokens == eager_tokens
    for got, want in zip(logprobs, eager_logprobs, strict=True):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)
