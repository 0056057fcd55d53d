"""cuda_bench.py's figures that need no GPU: the bytes a decode step reads (the roofline's denominator), the
GPU-busy fraction of overlapping kernel intervals, and the refusals of its command line."""

from __future__ import annotations

import pytest
from torch import nn

from tgi.benchmarks.cuda_bench import parse_args, weight_bytes_read_per_step
from tgi.benchmarks.cuda_step_bench import busy_fraction


class _Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(1000, 16)  # 16,000 weights: a step gathers its tokens' rows only
        self.layer = nn.Linear(16, 32, bias=False)  # 512
        self.norm = nn.LayerNorm(16, bias=False)  # 16


class _CausalLM(nn.Module):
    """The attribute layout of core's models (`model.embed_tokens`, `lm_head`), in float32."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.model = _Body()
        self.lm_head = nn.Linear(16, 1000, bias=False)  # 16,000
        if tied:
            self.lm_head.weight = self.model.embed_tokens.weight


def test_a_decode_step_reads_every_weight_but_the_input_embedding_table():
    assert weight_bytes_read_per_step(_CausalLM(tied=False)) == (512 + 16 + 16_000) * 4


def test_a_table_tied_to_the_output_head_is_read_by_the_head_once():
    assert weight_bytes_read_per_step(_CausalLM(tied=True)) == (512 + 16 + 16_000) * 4


def test_busy_fraction_counts_overlapping_kernels_once():
    assert busy_fraction([(0, 10), (5, 15), (20, 30), (22, 25)], 40) == pytest.approx(25 / 40)
    assert busy_fraction([], 10) == 0.0


def test_dry_run_from_the_environment_and_bad_sections_refused(monkeypatch, capsys):
    monkeypatch.setenv("TGI_GPU_DRY_RUN", "1")
    assert parse_args([]).dry_run
    monkeypatch.setenv("TGI_GPU_DRY_RUN", "0")
    assert not parse_args([]).dry_run
    assert parse_args(["--sections", "step,batch1"]).sections == ["step", "batch1"]
    with pytest.raises(SystemExit):
        parse_args(["--sections", "batch1,roofline"])
    assert "roofline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--step-concurrency", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--dry-run", "--quant-gemm"])
