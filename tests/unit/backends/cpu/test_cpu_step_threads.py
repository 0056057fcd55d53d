"""The CPU backend's thread count for small steps while serving: measured per group of step sizes."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.backends.cpu import backend as cpu_backend
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.step_threads import StepThreadChooser, step_thread_policy


class Steps:
    """Drives a chooser as the runner does: `choose` at each step's start, the step then lasting what
    `cost(threads, tokens)` says (a fake clock)."""

    def __init__(self, chooser_args: dict, cost) -> None:
        self.now = 0.0
        self.cost = cost
        self.chooser = StepThreadChooser(clock=lambda: self.now, **chooser_args)
        self.threads: list[int] = []

    def run(self, tokens: int, n: int) -> list[int]:
        picked = []
        for _ in range(n):
            threads = self.chooser.choose(tokens)
            picked.append(threads)
            self.now += self.cost(threads, tokens)
        return picked


def test_keeps_the_faster_option_per_group_of_step_sizes():
    # one request: one thread cycles faster (the event loop gets a core); 32: both threads do
    def cost(threads, tokens):
        if tokens == 1:
            return 0.010 if threads == 1 else 0.012
        return tokens * (0.002 if threads == 2 else 0.003)

    steps = Steps({"all_threads": 2, "max_tokens": 32, "samples": 4}, cost)
    first = steps.run(1, 8)
    assert sorted(first) == [1] * 4 + [2] * 4  # both measured, alternately
    assert first[:2] == [1, 2]
    assert set(steps.run(1, 50)) == {1}
    steps.run(32, 8)
    assert set(steps.run(32, 50)) == {2}
    assert steps.chooser.chosen() == {1: 1, 32: 2}
    assert steps.run(33, 3) == [2, 2, 2]  # above max_tokens: every thread, unmeasured


def test_steps_of_similar_size_share_a_group_and_are_compared_per_token():
    assert [StepThreadChooser.group_of(n) for n in (1, 2, 3, 4, 5, 8, 9, 32)] == [1, 2, 4, 4, 8, 8, 16, 32]

    def cost(threads, tokens):  # 3- and 4-token steps mixed: per token, two threads are faster
        return tokens * (0.004 if threads == 2 else 0.005)

    steps = Steps({"all_threads": 2, "max_tokens": 32, "samples": 4}, cost)
    for _ in range(8):
        steps.run(3, 1)
        steps.run(4, 1)
    assert steps.chooser.chosen() == {4: 2}


def test_an_idle_gap_does_not_decide():
    # a cycle that spans the wait for the next request is one sample among several: the median ignores it
    calls = {"n": 0}

    def cost(threads, tokens):
        calls["n"] += 1
        gap = 30.0 if calls["n"] == 1 else 0.0  # the first fewer-thread cycle waited for a client
        return (0.010 if threads == 1 else 0.013) + gap

    steps = Steps({"all_threads": 2, "max_tokens": 8, "samples": 5}, cost)
    steps.run(1, 11)  # a step's cycle is known at the next one's start
    assert steps.chooser.chosen() == {1: 1}


def test_measures_again_after_recheck_every_steps():
    state = {"slow_one": False}

    def cost(threads, tokens):
        if threads == 1:
            return 0.020 if state["slow_one"] else 0.010
        return 0.015

    steps = Steps({"all_threads": 2, "max_tokens": 8, "samples": 3, "recheck_every": 20}, cost)
    steps.run(1, 7)
    assert steps.chooser.chosen() == {1: 1}
    state["slow_one"] = True  # the load changed: one thread is now the slower
    steps.run(1, 30)
    assert steps.chooser.chosen() == {1: 2}
    assert set(steps.run(1, 10)) == {2}


def test_a_tie_keeps_every_thread():
    steps = Steps({"all_threads": 4, "max_tokens": 8, "samples": 2}, lambda threads, tokens: 0.01)
    steps.run(1, 5)
    assert steps.chooser.chosen() == {1: 4}
    with pytest.raises(ValueError, match="at least 2"):
        StepThreadChooser(all_threads=1, max_tokens=8)


def test_policy_names(monkeypatch):
    monkeypatch.delenv("TGI_CPU_STEP_THREADS", raising=False)
    assert step_thread_policy() == "auto"
    monkeypatch.setenv("TGI_CPU_STEP_THREADS", "Fewer")
    assert step_thread_policy() == "fewer"
    monkeypatch.setenv("TGI_CPU_STEP_THREADS", "half")
    with pytest.raises(ValueError, match=r"TGI_CPU_STEP_THREADS='half'.*auto, all, fewer"):
        step_thread_policy()


def test_serving_backend_measures_by_default(monkeypatch):
    import torch

    for name in ("OMP_NUM_THREADS", "TGI_CPU_SMALL_STEP_TOKENS", "TGI_CPU_STEP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    info = dataclasses.replace(cpu_info(), cores=2)
    monkeypatch.setattr(cpu_backend, "cpu_info", lambda: info)
    before = torch.get_num_threads()
    try:
        backend = cpu_backend.CpuBackend()
        assert "whichever cycles faster" in backend.describe_kernels("float32")["threads"]
        assert [backend.step_threads(1) for _ in range(3)] == [2, 2, 2]  # offline: every thread
        backend.serve_beside_event_loop()
        assert [backend.step_threads(1) for _ in range(4)] == [1, 2, 1, 2]  # measuring both
        assert backend.step_threads(33) == 2
        backend.begin_step(1)
        assert torch.get_num_threads() in (1, 2)
    finally:
        torch.set_num_threads(before)
