"""The JAX model runner: the Llama family over a device mesh, static shapes, executables compiled at warm-up.

A step is padded to the flat layout of `tgi.core.static_shapes` (token bucket T, sequence bucket S, block
table width W). Three kinds of executables, all compiled in `warmup` (ahead of time, `lower().compile()`,
through JAX's persistent compilation cache) and called directly while serving, so a step can never compile
(a shape without an executable raises `ShapeError`; it cannot happen: the scheduler honours `constraints()`):

* the decoder for every reachable (T, W): embeddings, `lax.scan` over the stacked layers, final norm; the
  KV cache is donated and updated in place;
* the head for every reachable (T, S): the sampled tokens' logits `[S, V]` (float32);
* the sampler for every S (`greedy` and `full`, see `sampler.py`), and the prompt logprobs for every T.

Tensor parallelism: `--num-shard N` is a mesh of N devices of this host; weights and the KV cache are
placed with `NamedSharding`, and the decoder and head run under `shard_map` with `MeshCollective`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tgi.backends.tpu import sampler as smp
from tgi.backends.tpu.collective import AXIS, MeshCollective
from tgi.backends.tpu.model import decoder, logits
from tgi.backends.tpu.weights import ModelDims, load_stacked
from tgi.core.interfaces import (
    KVCacheSpec,
    MemoryInfo,
    ModelInfo,
    ModelRunner,
    RunnerCapabilities,
    RunnerConstraints,
    UnsupportedError,
)
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.static_shapes.buckets import ShapeError
from tgi.core.static_shapes.flat import FlatShapes

if TYPE_CHECKING:
    from tgi.backends.tpu.backend import TpuBackend
    from tgi.core.config import EngineConfig
    from tgi.core.loading.source import ModelSource

log = logging.getLogger(__name__)

#: sequences per step at most (the engine's --max-concurrent-requests may be larger: the scheduler caps it)
MAX_BATCH_SIZE = 32
#: buckets grow by this factor (fewer buckets: fewer compiles at warm-up, more padding)
BUCKET_FACTOR = 4

_LAYER_SPECS = {
    "attn_norm": P(), "mlp_norm": P(),
    "wq": P(None, None, AXIS), "wk": P(None, None, AXIS), "wv": P(None, None, AXIS),
    "bq": P(None, AXIS), "bk": P(None, AXIS), "bv": P(None, AXIS),
    "wo": P(None, AXIS, None),
    "w_gate": P(None, None, AXIS), "w_up": P(None, None, AXIS), "w_down": P(None, AXIS, None),
}  # fmt: skip
_CACHE_SPEC = P(None, None, None, AXIS, None)  # [L, blocks, block_size, KV heads, head_dim]


def _numpy_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


class JaxModelRunner(ModelRunner):
    """See the module docstring."""

    def __init__(self, backend: TpuBackend, source: ModelSource, config: EngineConfig, world_size: int):
        self.backend = backend
        self.source = source
        self.config = config
        self.dtype = config.dtype or backend.default_dtype()
        self.block_size = config.block_size
        self.devices = backend.jax_devices()[:world_size]
        if len(self.devices) < world_size:
            raise UnsupportedError(
                f"--num-shard {world_size}: only {len(self.devices)} JAX {backend.platform} devices"
            )
        self.mesh = jax.sharding.Mesh(np.array(self.devices), (AXIS,))
        self.collective = MeshCollective(self.mesh)
        self.shapes: FlatShapes | None = None
        self.k_cache = self.v_cache = None
        self.num_blocks = 0
        self._decoders: dict = {}
        self._heads: dict = {}
        self._samplers: dict = {}
        self._prompt_lp: dict = {}

    # -- lifecycle --------------------------------------------------------------------------------------
    def load(self) -> ModelInfo:
        from tgi.core.loading import load_config
        from tgi.core.models.rotary import compute_inv_freq
        from tgi.core.tokenization import config_eos_token_ids

        self.backend.check_dtype(self.dtype)
        self.hf_config = config = load_config(self.source)
        self.dims = dims = ModelDims.from_config(config)
        n = self.collective.world_size
        dims.check_shards(n)
        arrays, tied = load_stacked(self.source, config, dims, _numpy_dtype(self.dtype))
        self.vocab_sharded = n > 1 and dims.vocab_size % n == 0
        self.specs = {
            "embed": P(), "norm": P(), "lm_head": P(None, AXIS) if self.vocab_sharded else P(),
            "layers": {k: _LAYER_SPECS[k] for k in arrays["layers"]},
        }  # fmt: skip
        self.params = jax.tree.map(
            lambda a, s: jax.device_put(a, NamedSharding(self.mesh, s)), arrays, self.specs
        )
        inv_freq, self.attention_scaling = compute_inv_freq(config, "cpu")
        self.inv_freq = inv_freq.numpy().astype(np.float32)
        self.scale = dims.head_dim**-0.5
        num_parameters = sum(int(a.size) for a in jax.tree.leaves(arrays))
        if tied:
            num_parameters -= int(arrays["lm_head"].size)  # the embeddings, counted once
        del arrays
        return ModelInfo(
            architecture=config.architectures[0],
            vocab_size=dims.vocab_size,
            max_position_embeddings=getattr(config, "max_position_embeddings", 4096),
            eos_token_ids=config_eos_token_ids(config),
            dtype=self.dtype,
            num_parameters=num_parameters,
        )

    def capabilities(self) -> RunnerCapabilities:
        # grammar masks ride on the sampler's additive bias; no draft verification, Medusa or LoRA here; the
        # sampler runs no (torch) logits processors
        return RunnerCapabilities(
            token_masks=True,
            draft_verification=False,
            medusa_heads=0,
            prompt_top_logprobs=True,
            unsupported_sampling=smp.UNSUPPORTED_SAMPLING,
        )

    def constraints(self) -> RunnerConstraints:
        if self.shapes is not None:
            return self.shapes.constraints()
        return RunnerConstraints(max_batch_size=MAX_BATCH_SIZE, block_size=self.block_size)

    def kv_cache_spec(self) -> KVCacheSpec:
        d = self.dims
        return KVCacheSpec(
            d.num_layers,
            d.num_kv_heads // self.collective.world_size,
            d.head_dim,
            self.block_size,
            self.dtype,
        )

    def memory_info(self) -> MemoryInfo | None:
        return self.backend.memory_info()

    def initialize_cache(self, num_blocks: int) -> None:
        d = self.dims
        shape = (d.num_layers, num_blocks, self.block_size, d.num_kv_heads, d.head_dim)
        sharding = NamedSharding(self.mesh, _CACHE_SPEC)
        zeros = jax.jit(lambda: jnp.zeros(shape, self.dtype), out_shardings=sharding)
        self.k_cache, self.v_cache = zeros(), zeros()
        self.num_blocks = num_blocks

    # -- compiling --------------------------------------------------------------------------------------
    def _shard(self, f, in_specs, out_specs):
        return jax.shard_map(f, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    def _attention(self):
        from tgi.backends.tpu.attention import reference_attention

        if self.backend.attention_impl == "pallas":
            from tgi.backends.tpu.pallas_attention import paged_attention

            return lambda *a: paged_attention(*a[:-1], scale=a[-1], interpret=self.backend.platform != "tpu")
        return reference_attention

    def _struct(self, shape, dtype=jnp.int32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(self.mesh, P()))

    def _compile_decoder(self, t: int, w: int):
        d, coll, attention = self.dims, self.collective, self._attention()

        def step(params, kc, vc, input_ids, positions, slots, token_seq, tables):
            return decoder(
                params, kc, vc, input_ids, positions, slots, token_seq, tables,
                inv_freq=self.inv_freq, attention_scaling=self.attention_scaling, head_dim=d.head_dim,
                eps=d.rms_norm_eps, scale=self.scale, attention=attention, all_reduce=coll.all_reduce,
            )  # fmt: skip

        rep = P()
        fn = self._shard(
            step,
            (self.specs, _CACHE_SPEC, _CACHE_SPEC, rep, rep, rep, rep, rep),
            (rep, _CACHE_SPEC, _CACHE_SPEC),
        )
        s_max = self.shapes.seq_buckets.max
        ints = [self._struct((t,)) for _ in range(4)]
        return (
            jax.jit(fn, donate_argnums=(1, 2))
            .lower(self.params, self.k_cache, self.v_cache, *ints, self._struct((s_max, w)))
            .compile()
        )

    def _gather(self):
        return (lambda x: self.collective.all_gather(x, dim=-1)) if self.vocab_sharded else None

    def _compile_head(self, t: int, s: int):
        gather = self._gather()
        fn = self._shard(
            lambda head, hidden, index: logits(head, hidden[index], gather),
            (self.specs["lm_head"], P(), P()),
            P(),
        )
        hidden = self._struct((t, self.dims.hidden_size), self.params["embed"].dtype)
        return jax.jit(fn).lower(self.params["lm_head"], hidden, self._struct((s,))).compile()

    def _compile_prompt_logprobs(self, t: int):
        gather = self._gather()

        def lp(head, hidden, targets):
            # [T] each target's logprob, [T] its rank, [T, TOP_N] the best tokens and their logprobs, and the
            # whole [T, V] log-softmax (left on the device unless a request asks for more than TOP_N)
            every = jax.nn.log_softmax(logits(head, hidden, gather), axis=1)
            own = jnp.take_along_axis(every, targets[:, None], axis=1)
            rank = jnp.sum(every > own, axis=1) + 1
            top_lps, top_ids = jax.lax.top_k(every, min(smp.TOP_N, every.shape[1]))
            return own[:, 0], rank, top_ids, top_lps, every

        fn = self._shard(lp, (self.specs["lm_head"], P(), P()), (P(), P(), P(), P(), P()))
        hidden = self._struct((t, self.dims.hidden_size), self.params["embed"].dtype)
        return jax.jit(fn).lower(self.params["lm_head"], hidden, self._struct((t,))).compile()

    def _compile_samplers(self, s: int):
        v, f32 = self.dims.vocab_size, jnp.float32
        lg = self._struct((s, v), f32)
        greedy = jax.jit(smp.greedy).lower(lg).compile()
        seen, params = self._struct((s, v), jnp.bool_), self._struct((s, len(smp.PARAM_COLUMNS)), f32)
        full = jax.jit(smp.full).lower(lg, lg, seen, lg, lg, lg, params).compile()
        return greedy, full

    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        """Compile every executable a step can need (see the module docstring)."""
        max_context = min(
            getattr(self.hf_config, "max_position_embeddings", 1 << 30), self.num_blocks * self.block_size
        )
        self.shapes = FlatShapes.for_limits(
            max_batch_tokens, min(max_num_seqs, MAX_BATCH_SIZE), max_context, self.block_size,
            min_tokens=4, min_seqs=1, min_blocks=8, factor=BUCKET_FACTOR,
        )  # fmt: skip
        shapes = self.shapes.warmup_shapes()
        for tw in sorted({(sh.num_tokens, sh.num_blocks) for sh in shapes}):
            self._decoders[tw] = self._compile_decoder(*tw)
        for ts in sorted({(sh.num_tokens, sh.num_seqs) for sh in shapes}):
            self._heads[ts] = self._compile_head(*ts)
        for t in self.shapes.token_buckets.sizes:
            self._prompt_lp[t] = self._compile_prompt_logprobs(t)
        for s in self.shapes.seq_buckets.sizes:
            self._samplers[s] = self._compile_samplers(s)
        log.info(
            "compiled %d decoder, %d head, %d prompt-logprob and %d sampler executables",
            len(self._decoders), len(self._heads), len(self._prompt_lp), 2 * len(self._samplers),
        )  # fmt: skip

    # -- one step ---------------------------------------------------------------------------------------
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        if self.shapes is None:
            raise RuntimeError("warmup() compiles the executables: call it before execute()")
        fb = self.shapes.pad(batch, pad_slot=self.num_blocks * self.block_size)
        t, s, w = fb.shape.num_tokens, fb.shape.num_seqs, fb.shape.num_blocks
        run = self._decoders.get((t, w))
        head = self._heads.get((t, s))
        if run is None or head is None:
            raise ShapeError(f"no executable for the step shape {fb.shape} (not warmed up)")
        tables = np.zeros((self.shapes.seq_buckets.max, w), np.int32)
        tables[:s] = fb.block_tables
        hidden, self.k_cache, self.v_cache = run(
            self.params, self.k_cache, self.v_cache, fb.input_ids, fb.positions, fb.slot_mapping,
            fb.token_seq, tables,
        )  # fmt: skip
        output = StepOutput(request_ids=[], token_ids=[], logprobs=[])
        if fb.num_sampled:
            output = self._sample(head(self.params["lm_head"], hidden, fb.sample_index), fb, batch)
        if any(q.want_prompt_logprobs and q.is_prefill for q in batch.sequences):
            self._prompt_logprobs(output, hidden, fb, batch)
        return output

    def _sample(self, step_logits, fb, batch: ScheduledBatch) -> StepOutput:
        rows, s = fb.sampled, fb.shape.num_seqs
        greedy, full = self._samplers[s]
        if smp.needs_full(rows, batch.token_masks):
            inputs = smp.full_inputs(rows, batch.token_masks, s, self.dims.vocab_size)
            ids, lps, top_ids, top_lps, every = full(step_logits, *inputs.arrays())
        else:
            ids, lps, top_ids, top_lps, every = greedy(step_logits)
        n = fb.num_sampled
        out = StepOutput(
            request_ids=[r.request_id for r in rows],
            token_ids=np.asarray(ids)[:n].tolist(),
            logprobs=np.asarray(lps)[:n].tolist(),
        )
        top_n = max(r.sampling.top_n_tokens for r in rows)
        if top_n > smp.TOP_N:  # more than the device's top-k: from the whole log-softmax, on the host
            every = np.asarray(every)[:n]
            top_ids = np.argsort(-every, axis=1, kind="stable")[:, :top_n]
            top_lps = np.take_along_axis(every, top_ids, axis=1)
        if top_n:
            out.top_token_ids = np.asarray(top_ids)[:n, :top_n].tolist()
            out.top_logprobs = np.asarray(top_lps)[:n, :top_n].tolist()
        return out

    def _prompt_logprobs(self, output: StepOutput, hidden, fb, batch: ScheduledBatch) -> None:
        """`output`'s logprobs of prompt tokens start_pos+1 .. min(start_pos+len, num_prompt-1), with their
        ranks and top tokens for the requests that ask (see StepOutput)."""
        t = fb.shape.num_tokens
        targets = np.zeros(t, np.int32)
        wanted = {}
        for r, q in enumerate(batch.sequences):
            if not (q.want_prompt_logprobs and q.is_prefill):
                continue
            first, last = q.start_pos + 1, min(q.start_pos + q.num_tokens, q.num_prompt_tokens - 1)
            at = int(fb.query_start[r]) - q.start_pos  # flat index of position p is at + p
            idx = [at + p - 1 for p in range(first, last + 1)]
            targets[idx] = [q.all_token_ids[p] for p in range(first, last + 1)]
            wanted[q.request_id] = idx
        own, rank, top_ids, top_lps, every = self._prompt_lp[t](self.params["lm_head"], hidden, targets)
        own = np.asarray(own)
        asked = {
            q.request_id: q.sampling.prompt_top_n_tokens for q in batch.sequences if q.request_id in wanted
        }
        k = max((n for n in asked.values() if n is not None), default=None)
        if k is not None:
            rank, top_ids, top_lps = np.asarray(rank), np.asarray(top_ids), np.asarray(top_lps)
            if k > smp.TOP_N:  # more than the device's top-k: from the whole log-softmax, on the host
                every = np.asarray(every)
                top_ids = np.argsort(-every, axis=1, kind="stable")[:, :k]
                top_lps = np.take_along_axis(every, top_ids, axis=1)
        for rid, idx in wanted.items():
            output.prompt_logprobs[rid] = own[idx].tolist()
            if asked[rid] is not None:
                n = asked[rid]
                output.prompt_ranks[rid] = rank[idx].tolist()
                output.prompt_top_token_ids[rid] = top_ids[idx, :n].tolist()
                output.prompt_top_logprobs[rid] = top_lps[idx, :n].tolist()

    def shutdown(self) -> None:
        self.k_cache = self.v_cache = None
        self._decoders.clear()
        self._heads.clear()
