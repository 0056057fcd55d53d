"""`tgi benchmark engine --parallel 1,pp2`: process layouts parsed and refused by name, each timed into one
table with a ranks column."""

from __future__ import annotations

import multiprocessing

import pytest

from tgi.benchmarks import engine_bench
from tgi.benchmarks.parallel_layouts import Layout, parse_layouts
from tgi.core.testing.tiny_models import save_random_model


def test_layouts_parse_and_bad_ones_are_named():
    assert parse_layouts("1, tp2,pp2,tp2xpp2") == [
        Layout("1", 1, 1), Layout("tp2", 2, 1), Layout("pp2", 1, 2), Layout("tp2xpp2", 2, 2),
    ]  # fmt: skip
    for bad in ("pp", "2", "tp2pp2", "", "pp0"):
        with pytest.raises(ValueError, match="--parallel"):
            parse_layouts(bad)


def test_one_process_and_two_stages_time_into_one_table(tmp_path, capsys):
    model = save_random_model(tmp_path / "llama", "llama", num_layers=2)
    argv = ["--model-id", str(model), "--dtype", "float32", "--batch-size", "2", "--sequence-length", "8"]
    argv += ["--decode-length", "2", "--runs", "1", "--warmups", "0", "--parallel", "1,pp2"]
    assert engine_bench.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[0] == "ranks" and [ln.split()[0] for ln in lines[2:]] == ["1", "pp2"]
    assert not multiprocessing.active_children()  # the last layout's ranks stopped with the run
