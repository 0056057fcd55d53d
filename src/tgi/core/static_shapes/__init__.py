"""Static shapes for runners that compile whole steps (TPU/JAX, Gaudi graphs, Neuron): no torch here.

A compiled step has fixed array shapes. This package picks them and moves a `ScheduledBatch` into and out
of them, for every such backend (`buckets`, `padding`: shared; `flat`, `rows`: one module per layout):

* **Buckets** (`Buckets`): the sizes a dimension may take; a real size is padded up to the smallest bucket
  that holds it (`Buckets.fit`), and a size above the largest is an error, never a silent truncation.
  `Buckets.multiples(step, maximum)` is TGI Gaudi's rule (`BATCH_BUCKET_SIZE`, `PREFILL_BATCH_BUCKET_SIZE`,
  `PAD_SEQUENCE_TO_MULTIPLE_OF`: pad to a multiple of `step`); `Buckets.powers_of_two(maximum)` doubles
  (vLLM's TPU runner), always ending at `maximum` itself.
* **Two layouts** of a step:
  - *flat* (`flat.FlatShapes`, `StepShape`): the step's tokens on one axis, padded to a token bucket `T`; its
    sequences padded to a sequence bucket `S`; block tables padded to a width bucket `W`. Ragged attention
    (each token attends to its own sequence's cache up to its position), so prefill chunks and decodes may
    share a step (`mixed_batches=True`);
  - *rows* (`rows.RowShapes`, `RowShape`): one row per sequence, `[B, L]` (Gaudi's layout); a step is either
    all prefill chunks (each padded to a prefill bucket `L`) or all decodes (`L = 1`), `mixed_batches=False`.
* **Constraints**: `constraints()` of each policy is the `RunnerConstraints` a runner declares, so the
  scheduler only builds steps that fit a bucket (the row layout also declares its prefill row buckets and
  the padded-area bound `B x L`, which the scheduler keeps each prefill step within); `warmup_shapes()` lists every shape such a step can take
  (each is compiled at warm-up: a step never compiles while serving); `shape_for(batch)` is the one a batch
  takes, and it is always one of `warmup_shapes()` (tests/unit/core/test_static_shapes.py drives the scheduler
  to check it).
* **Padding** (`FlatShapes.pad`, `RowShapes.pad`): numpy arrays of the padded step. Padding never reaches
  an output: padded tokens write their keys/values to `pad_slot` (a slot the runner drops or reserves,
  e.g. one past the cache for JAX's `mode="drop"` scatters), padded sequences are never sampled, and only
  the first `num_sampled` rows of what a runner samples are real (`unpad`).
"""

from tgi.core.static_shapes.buckets import Buckets, ShapeError
from tgi.core.static_shapes.flat import FlatBatch, FlatShapes, StepShape
from tgi.core.static_shapes.padding import unpad
from tgi.core.static_shapes.rows import RowBatch, RowShape, RowShapes

__all__ = [
    "Buckets",
    "FlatBatch",
    "FlatShapes",
    "RowBatch",
    "RowShape",
    "RowShapes",
    "ShapeError",
    "StepShape",
    "unpad",
]
