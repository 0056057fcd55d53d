"""How many intra-op threads a step gets while the server shares the cores: chosen by measuring, not fixed.

On a few cores a server's event loop (HTTP, SSE, detokenisation) competes with the step's OpenMP team, and a
team that loses a core mid-step waits for it. Whether a small step is faster on every thread or on one fewer
(the freed core runs the event loop meanwhile) depends on how long the step is against the event loop's
work per step: measured on 2-core Xeons, the 135M default model decodes faster on one thread (a ~10 ms step,
where the event loop's share is large), a 1B-class model on both (a ~70 ms step reads 0.7 GB: one core
cannot pull the memory bandwidth of two). No fixed rule is right for both, so `StepThreadChooser` times the
steps themselves and keeps the faster option.

What it measures is the step cycle: the time from one step's start to the next one's, per token of the step
— the inter-token latency a client sees at one request, and the inverse of throughput at many. Steps are
grouped by size (powers of two); within a group the two options are first tried alternately (so that both
see the same load) until each has `samples` cycles, then the one with the lower median cycle runs (one fewer thread only when it is at least
`margin` faster), and
every `recheck_every` steps of the group both are measured again (a load that changes, a longer context).
The median ignores the odd cycle that spans an idle gap between requests.

Torch-free: the backend applies the count (`torch.set_num_threads`).
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("tgi.backends.cpu")

#: `TGI_CPU_STEP_THREADS`: auto (measure), all (every thread for every step), fewer (one fewer thread for
#: steps of at most `TGI_CPU_SMALL_STEP_TOKENS` tokens, the fixed rule of earlier versions)
POLICIES = ("auto", "all", "fewer")


def step_thread_policy() -> str:
    """The policy named by `TGI_CPU_STEP_THREADS` (default auto); an unknown name is a `ValueError`."""
    policy = os.environ.get("TGI_CPU_STEP_THREADS", "auto").strip().lower() or "auto"
    if policy not in POLICIES:
        raise ValueError(f"TGI_CPU_STEP_THREADS={policy!r}: expected one of {', '.join(POLICIES)}")
    return policy


def small_step_tokens() -> int:
    """The largest step (in tokens) whose thread count is chosen (`TGI_CPU_SMALL_STEP_TOKENS`, default 32:
    a decode step of 32 requests; 0: every step runs on every thread)."""
    return int(os.environ.get("TGI_CPU_SMALL_STEP_TOKENS", "32"))


@dataclass
class _Group:
    """The measurements of one group of step sizes: cycles per token of each option, newest last."""

    cycles: dict[int, list[float]] = field(default_factory=dict)
    steps_since_check: int = 0
    chosen: int | None = None  # None: still measuring


class StepThreadChooser:
    """Chooses between `fewer` and `all` threads for steps of at most `max_tokens` tokens (see the module
    docstring); larger steps always get `all`.

    `choose(num_tokens)` is called at the start of every step and returns its thread count; the time since
    the previous call is that step's cycle, recorded against the option it ran with."""

    def __init__(
        self,
        all_threads: int,
        max_tokens: int,
        samples: int = 8,
        recheck_every: int = 1024,
        margin: float = 0.03,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if all_threads < 2:
            raise ValueError("a choice needs at least 2 threads")
        self.all = all_threads
        self.fewer = all_threads - 1
        self.max_tokens = max_tokens
        self.samples = samples
        self.recheck_every = recheck_every
        self.margin = margin  # one fewer thread must be this much faster to be kept (noise is no reason)
        self._clock = clock
        self._groups: dict[int, _Group] = {}
        self._last: tuple[float, int, int, int] | None = None  # start, group, threads, tokens

    @staticmethod
    def group_of(num_tokens: int) -> int:
        """The power of two at or above `num_tokens`: steps of 3 and 4 tokens share a group."""
        return 1 << max(0, num_tokens - 1).bit_length()

    def choose(self, num_tokens: int) -> int:
        now = self._clock()
        if self._last is not None:
            start, group, threads, tokens = self._last
            self._record(group, threads, (now - start) / tokens)
            self._last = None
        if num_tokens > self.max_tokens or num_tokens < 1:
            return self.all
        group = self.group_of(num_tokens)
        threads = self._option(group)
        self._last = (now, group, threads, num_tokens)
        return threads

    def chosen(self) -> dict[int, int]:
        """Group -> thread count for the groups measured so far (for logs and tests)."""
        return {g: s.chosen for g, s in sorted(self._groups.items()) if s.chosen is not None}

    def _option(self, group: int) -> int:
        state = self._groups.setdefault(group, _Group())
        if state.chosen is not None:
            state.steps_since_check += 1
            if state.steps_since_check < self.recheck_every:
                return state.chosen
            state.chosen, state.cycles, state.steps_since_check = None, {}, 0  # measure both again
        counts = {t: len(state.cycles.get(t, ())) for t in (self.fewer, self.all)}
        return min(counts, key=lambda t: (counts[t], t == self.all))  # alternate, fewer first

    def _record(self, group: int, threads: int, cycle: float) -> None:
        state = self._groups[group]
        if state.chosen is not None:
            return  # only measuring phases are recorded
        state.cycles.setdefault(threads, []).append(cycle)
        if all(len(state.cycles.get(t, ())) >= self.samples for t in (self.fewer, self.all)):
            fewer, every = (statistics.median(state.cycles[t]) for t in (self.fewer, self.all))
            state.chosen = self.fewer if fewer < every * (1 - self.margin) else self.all
            log.info(
                "steps of up to %d tokens: %d threads (median cycle per token %.2f ms on %d, %.2f ms on %d)",
                group, state.chosen, fewer * 1e3, self.fewer, every * 1e3, self.all,
            )  # fmt: skip
