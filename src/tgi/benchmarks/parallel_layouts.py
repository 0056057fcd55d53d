"""`tgi benchmark engine --parallel 1,tp2,pp2,tp2xpp2`: the process layouts to time one after another into
one table: `1` one process, `tpN` N tensor-parallel shards, `ppN` N pipeline stages, `tpNxppM` both
(N × M ranks)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LAYOUT = re.compile(r"^(?:1|tp(\d+)|pp(\d+)|tp(\d+)xpp(\d+))$")


@dataclass(frozen=True)
class Layout:
    label: str
    num_shard: int  # tensor-parallel shards (of each stage)
    pipeline_parallel_size: int


def parse_layouts(text: str) -> list[Layout]:
    """`ValueError` naming a layout that is none of 1, tpN, ppN, tpNxppM."""
    layouts = []
    for label in (part.strip() for part in text.split(",")):
        m = _LAYOUT.match(label)
        if not label or m is None:
            raise ValueError(f"--parallel: {label!r} is not 1, tpN, ppN or tpNxppM (e.g. 1,tp2,pp2,tp2xpp2)")
        tp_only, pp_only, tp, pp = m.groups()
        num_shard = int(tp_only or tp or 1)
        stages = int(pp_only or pp or 1)
        if num_shard < 1 or stages < 1:
            raise ValueError(f"--parallel: {label!r} needs sizes >= 1")
        layouts.append(Layout(label, num_shard, stages))
    return layouts
