"""The vision encoder's share of a server's step time over one benchmark level, read from the counters our
server exports on `/metrics` (`tgi_step_seconds_total`, `tgi_encoder_seconds_total`) before and after it.
Servers without them (llama.cpp, TGI) have no share: None."""

from __future__ import annotations

import re

_COUNTER = re.compile(r"^(tgi_step_seconds_total|tgi_encoder_seconds_total) (\S+)$", re.M)


def parse_step_times(text: str) -> tuple[float, float] | None:
    """(step seconds, encoder seconds) from a Prometheus text page; None without both counters."""
    found = {name: float(value) for name, value in _COUNTER.findall(text)}
    if len(found) != 2:
        return None
    return found["tgi_step_seconds_total"], found["tgi_encoder_seconds_total"]


async def step_times(client, url: str) -> tuple[float, float] | None:
    """The server's step and encoder seconds so far, or None where it does not export them."""
    try:
        r = await client.get(url.rstrip("/") + "/metrics", timeout=5.0)
    except Exception:
        return None
    return parse_step_times(r.text) if r.status_code == 200 else None


def encoder_share(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """The encoder's seconds over the steps' seconds between two readings; None where either is missing
    or no step ran."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])
