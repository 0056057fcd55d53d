"""The table's flags about the model and the engine: what is loaded, how it is batched, sharded and cached."""

from __future__ import annotations

from tgi.core.config import DEFAULT_MAX_ENCODER_TOKENS_PER_STEP, DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS
from tgi.core.interfaces.quantization import QUANTIZE_METHODS
from tgi.core.interfaces.types import KV_CACHE_DTYPES
from tgi.server.flags import derived, value_checks
from tgi.server.flags.parsers import batch_sizes, comma_list, kv_events_config, on_off
from tgi.server.flags.spec import LAUNCHER, Engine, Flag

AS_TGI = "as TGI"
MODEL = "model"
BATCHING = "batching and memory"
ROPE = (
    "the checkpoint's rope replaced: `linear` divides the rotary frequencies by the factor (a factor alone "
    "means linear); `dynamic` equals plain RoPE within the model's context, past which `--max-total-tokens` "
    "may not go"
)

MODEL_FLAGS = (
    Flag(
        ("--model-id",),
        "hub id (`owner/repo-GGUF:Q4_K_M` for one GGUF file), local folder or .gguf file; default: the "
        "default model. Given more than once, the server serves each by that name (the request's `model`; "
        "the first is the default), loading on demand ([several models](../features/models-by-name.md))",
        MODEL,
        Engine("model_id", derived.first_model_id),
        env=("MODEL_ID",),
        kind="repeat",
        tgi=AS_TGI,
        example="some/model",
    ),
    Flag(
        ("--revision",),
        "model revision on the hub",
        MODEL,
        Engine("revision"),
        env=("REVISION",),
        tgi=AS_TGI,
        example="main",
    ),
    Flag(
        ("--backend",),
        "backend plugin name, or auto",
        MODEL,
        Engine("backend"),
        env=("TGI_BACKEND",),
        default="auto",
        example="cpu",
    ),
    Flag(
        ("--dtype",),
        "float16, bfloat16 or float32; default: the backend's",
        MODEL,
        Engine("dtype"),
        env=("DTYPE",),
        tgi=AS_TGI,
        example="bfloat16",
    ),
    Flag(
        ("--quantize",),
        "weight quantization: a quantized checkpoint's own (gptq, awq, compressed-tensors, fp8) is detected "
        "from its config.json; on a dense checkpoint eetq (int8) and fp8 quantize while loading. A value the "
        "model or backend cannot serve fails at start with the reason",
        MODEL,
        Engine("quantize"),
        env=("QUANTIZE",),
        metavar="{" + ",".join(QUANTIZE_METHODS) + "}",
        tgi="TGI's values. A quantized checkpoint is detected from its `config.json` `quantization_config` "
        "(GPTQ 4/8-bit with groups, act-order, symmetric or not, v1 and v2 zero points; Marlin-packed GPTQ, "
        "converted to GPTQ at load; AWQ GEMM; FP8 and compressed-tensors FP8 with per-tensor or per-channel "
        "scales) and read as stored; on a dense checkpoint `eetq` (int8 per row), `fp8` (float8_e4m3fn per "
        "row) and `bitsandbytes`, `bitsandbytes-nf4`, `bitsandbytes-fp4` (the `bnb` extra) quantize while "
        "loading; quantized layers keep no dense copy. Refused at start with the reason: `exl2` (not built), "
        "bitsandbytes-serialised checkpoints, block-wise FP8, pack-quantized compressed-tensors, a format the "
        "backend has no kernel for (naming the ones it has), sharded quantized weights (`--num-shard` > 1), "
        "`--quantize` on a GGUF file. `/info` reports `quantize` and `quantization` (see "
        "[the cpu backend](../backends/cpu.md))",
        example="eetq",
    ),
    Flag(
        ("--runner",),
        "what the model is served as: generate (text), pooling (embeddings: POST /v1/embeddings and /embed; a "
        "classifier's scores: /rerank, /predict), or auto: pooling where the folder is a sentence-transformers "
        "model (its modules.json) or a *ForSequenceClassification one, else generate",
        MODEL,
        Engine("runner"),
        env=("RUNNER",),
        choices=("auto", "generate", "pooling"),
        default="auto",
        tgi="vLLM's `--runner`: `pooling` serves a model's pooled hidden states as embeddings, with the "
        "folder's sentence-transformers `Pooling` and `Normalize` modules where it has them, else last-token "
        "pooling (CLS for an encoder), normalized; a `*ForSequenceClassification` folder is a classifier (its "
        "scores at `/rerank`, `/predict`, `/score`, `/classify`) under `auto` or `pooling`; a backend whose "
        "runner cannot pool is refused at start ([Embeddings](../features/embeddings.md))",
        example="pooling",
    ),
    Flag(
        ("--trust-remote-code",),
        "let a checkpoint's own code (auto_map: its config, tokenizer and, on the transformers fallback, model "
        "classes) run; without it such a checkpoint is refused. Native architectures always run tgi's model code",
        MODEL,
        Engine("trust_remote_code"),
        env=("TRUST_REMOTE_CODE",),
        kind="switch",
        default=False,
        tgi="a checkpoint's own code (`auto_map`: its config, tokenizer and, on the transformers fallback, "
        "model classes) may run; without it such a checkpoint is refused at start naming the flag. Native "
        "architectures run tgi's model code with it too (models, below)",
        example="true",
    ),
    Flag(
        ("--deterministic",),
        "batch-invariant kernels: a request's tokens (greedy, or sampled with a seed) are the same whatever else "
        "runs beside it, however its prompt is chunked or cached; a backend that cannot is refused at start",
        MODEL,
        Engine("deterministic"),
        env=("DETERMINISTIC",),
        kind="switch",
        default=False,
        example="true",
    ),
    Flag(
        ("--lora-adapters",),
        "LoRA adapters (PEFT folders) served beside the model, chosen per request by `adapter_id` or OpenAI's "
        "`model`: id=path,id2=path2 (a bare path is its own id)",
        MODEL,
        Engine("lora_adapters", derive=derived.lora_adapters),
        env=("LORA_ADAPTERS",),
        tgi="served: `id=path,...` local PEFT folders (below)",
        example="adapter=.",
    ),
    Flag(
        ("--max-loras",),
        "LoRA adapters served at once, --lora-adapters' and run-time loads together (vLLM's flag counts "
        f"adapters in one batch); default {DEFAULT_MAX_LORAS}",
        MODEL,
        Engine("max_loras"),
        env=("MAX_LORAS",),
        parse=int,
        default=DEFAULT_MAX_LORAS,
        example="3",
    ),
    Flag(
        ("--max-lora-rank",),
        f"largest rank `r` of a served LoRA adapter; default {DEFAULT_MAX_LORA_RANK}",
        MODEL,
        Engine("max_lora_rank"),
        env=("MAX_LORA_RANK",),
        parse=int,
        default=DEFAULT_MAX_LORA_RANK,
        example="16",
    ),
    Flag(
        ("--logits-processors",),
        "logits processors requests may select by name (vLLM's custom logits processors): entry-point names of "
        "the group `tgi.logits_processors` (repeat, or comma-separated), each loaded at start; one that cannot "
        "be stops the start with its reason. Default: none",
        MODEL,
        Engine("logits_processors"),
        env=("LOGITS_PROCESSORS",),
        kind="list",
        parse=comma_list,
        example="no_digits",
    ),
    Flag(
        ("--speculate",),
        "draft tokens verified per decode step, guessed by n-gram prompt lookup (or by --speculative-model); "
        "0: off",
        MODEL,
        Engine("speculate"),
        env=("SPECULATE",),
        parse=int,
        default=0,
        tgi="draft tokens verified per decode step, guessed by n-gram prompt lookup (or by "
        "`--speculative-model`, ours)",
        example="2",
    ),
    Flag(
        ("--speculative-model",),
        "a smaller model with the same tokenizer that guesses the --speculate tokens",
        MODEL,
        Engine("speculative_model"),
        env=("SPECULATIVE_MODEL",),
        example="some/draft",
        example_needs=("--speculate", "2"),
    ),
    Flag(
        ("--attention",),
        "attention implementation of the backend (e.g. triton, flash-attn on cuda; cpu-native, cpu-sdpa on "
        "cpu); default: the backend's own",
        MODEL,
        Engine("attention"),
        env=("ATTENTION",),
        example="cpu-sdpa",
    ),
    Flag(
        ("--rope-scaling",),
        "rescale rotary positions: linear (positions / --rope-factor) or dynamic (NTK; the same as plain RoPE "
        "within the model's context, which --max-total-tokens may not exceed)",
        MODEL,
        Engine("rope_scaling", derive=derived.rope_scaling),
        env=("ROPE_SCALING",),
        choices=("linear", "dynamic"),
        tgi=ROPE,
        example="dynamic",
    ),
    Flag(
        ("--rope-factor",),
        "the rope scaling factor; alone it means linear scaling",
        MODEL,
        Engine("rope_scaling", derive=derived.rope_scaling),
        env=("ROPE_FACTOR",),
        parse=float,
        check=value_checks.positive,
        tgi=ROPE,
        example="2.0",
    ),
    Flag(
        ("--tokenizer-config-path",),
        "a tokenizer_config.json whose chat_template replaces the model's",
        MODEL,
        LAUNCHER,
        env=("TOKENIZER_CONFIG_PATH",),
        check=value_checks.tokenizer_config_file,
        tgi="its `chat_template` replaces the model's",
        example="tokenizer_config.json",
    ),
    Flag(
        ("--huggingface-hub-cache",),
        "where hub models are downloaded and looked for",
        MODEL,
        LAUNCHER,
        env=("HUGGINGFACE_HUB_CACHE", "HF_HUB_CACHE"),
        tgi="where hub models are downloaded (also `HF_HUB_CACHE`)",
        example="/tmp/hub",
    ),
    Flag(
        ("--max-input-tokens", "--max-input-length"),
        "longest prompt in tokens; default: max-total-tokens - 1",
        BATCHING,
        Engine("max_input_tokens"),
        env=("MAX_INPUT_TOKENS", "MAX_INPUT_LENGTH"),
        parse=int,
        tgi=AS_TGI,
        example="100",
    ),
    Flag(
        ("--max-total-tokens",),
        "prompt + generated tokens per request; default: the model's context",
        BATCHING,
        Engine("max_total_tokens"),
        env=("MAX_TOTAL_TOKENS",),
        parse=int,
        tgi=AS_TGI,
        example="200",
    ),
    Flag(
        ("--max-batch-prefill-tokens",),
        "token budget of one step",
        BATCHING,
        Engine("max_batch_prefill_tokens"),
        env=("MAX_BATCH_PREFILL_TOKENS",),
        parse=int,
        tgi=AS_TGI,
        example="300",
    ),
    Flag(
        ("--max-batch-total-tokens",),
        "KV-cache size in tokens; default: from free memory",
        BATCHING,
        Engine("max_batch_total_tokens"),
        env=("MAX_BATCH_TOTAL_TOKENS",),
        parse=int,
        tgi=AS_TGI,
        example="4000",
    ),
    Flag(
        ("--kv-cache-dtype",),
        "what the KV cache stores: auto (the model's dtype), or one byte a value with a float32 scale per token "
        "and kv head: int8, fp8_e4m3fn, fp8_e5m2 (~1.9x the tokens of bfloat16 in the same memory); a backend "
        "that does not store it is refused at start",
        BATCHING,
        Engine("kv_cache_dtype"),
        env=("KV_CACHE_DTYPE",),
        choices=KV_CACHE_DTYPES,
        default="auto",
        tgi="TGI's values and `int8`: one byte a value and a float32 scale per token and kv head, computed as "
        "each token is written (llama.cpp's q8_0 with a block of one head), or a float8 checkpoint's "
        "`k_scale` / `v_scale`; read as stored by the attention. The cpu and Triton (cuda, rocm, xpu) backends "
        "store all three; gaudi, neuron and tpu refuse them at start naming the flag. `/info` and the start-up "
        "line say what the cache stores and its tokens ([KV cache quantization](../features/kv-cache-quantization.md))",
        example="int8",
    ),
    Flag(
        ("--max-batch-size",),
        "sequences running at once",
        BATCHING,
        Engine("max_num_seqs"),
        env=("MAX_BATCH_SIZE",),
        parse=int,
        tgi=AS_TGI,
        example="8",
    ),
    Flag(
        ("--max-encoder-tokens-per-step",),
        "image tokens whose images one step may start encoding (vLLM's encoder budget); a prefill chunk "
        "stops before an image past it, and a request with a larger image is refused; "
        f"default {DEFAULT_MAX_ENCODER_TOKENS_PER_STEP}",
        BATCHING,
        Engine("max_encoder_tokens_per_step"),
        env=("MAX_ENCODER_TOKENS_PER_STEP",),
        parse=int,
        default=DEFAULT_MAX_ENCODER_TOKENS_PER_STEP,
        at_least=1,
        example="1152",
    ),
    Flag(
        ("--async-scheduling",),
        "on a backend whose runner starts steps without waiting for the device (CUDA, ROCm, XPU), schedule "
        "and start the next step before the last one is settled on the host (vLLM's async scheduling); steps "
        "that need the last token on the host (grammars, penalties, watermark, speculation) wait as before; "
        "default: true",
        BATCHING,
        Engine("async_scheduling"),
        env=("ASYNC_SCHEDULING",),
        parse=on_off,
        default="true",
        metavar="{true,false}",
        example="false",
    ),
    Flag(
        ("--prefix-caching",),
        "reuse the KV blocks of prompts already seen; default: true",
        BATCHING,
        Engine("prefix_caching"),
        env=("PREFIX_CACHING",),
        parse=on_off,
        default="true",
        metavar="{true,false}",
        example="false",
    ),
    Flag(
        ("--kv-events-config",),
        "KV cache events for routers, vLLM's --kv-events-config JSON (its keys: enable_kv_cache_events, "
        "publisher, endpoint, replay_endpoint, buffer_steps, hwm, max_queue_size, topic; any other is refused): "
        "the prefix cache's stored, evicted and cleared blocks, one batch per step on a ZMQ PUB socket in "
        "vLLM's format, with our block hashes (docs/deployment/router.md); needs prefix caching, not with "
        "--enable-model-swap; default: none",
        BATCHING,
        Engine("kv_events"),
        env=("KV_EVENTS_CONFIG",),
        parse=kv_events_config,
        metavar="JSON",
        example='{"enable_kv_cache_events": true, "publisher": "null"}',
    ),
    Flag(
        ("--cuda-graphs",),
        "decode batch sizes to capture as graphs (e.g. 1,2,4,8), 0: off; backends that cannot capture graphs "
        "refuse sizes; default: the backend's",
        BATCHING,
        Engine("cuda_graphs"),
        env=("CUDA_GRAPHS",),
        parse=batch_sizes,
        tgi="decode batch sizes captured as graphs by backends that capture them (CUDA/ROCm, Triton runner); "
        "`0` off; other backends refuse sizes at start-up",
        example="1,2,4",
    ),
    Flag(
        ("--cuda-memory-fraction",),
        "share of the device's total memory this server may use (weights, activations and KV cache)",
        BATCHING,
        Engine("memory_fraction"),
        env=("CUDA_MEMORY_FRACTION",),
        parse=float,
        default=1.0,
        check=value_checks.fraction,
        tgi="share of the device's total memory the server may use; what is in use counts against it before "
        "the KV cache is sized",
        example="0.8",
    ),
)
