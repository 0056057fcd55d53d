"""`tgi benchmark engine --quantize V1,V2,...`: the same grid on several weight formats of the default model,
one engine after another in one run (`engine_bench.run` calls `variants` and `engine_config`).

Variants (the default model; its safetensors export and GPTQ checkpoint are made once under `--export-dir`):
- "gguf": the GGUF file as shipped (Q4_1 / Q8_0 blocks on the CPU's block kernel for small inputs, dense
  bfloat16 above);
- "bfloat16": the export as dense bfloat16 safetensors (no quantization);
- "eetq", "fp8", "bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4": that export quantized at load;
- "gptq": a 4-bit, group-64 GPTQ checkpoint (576, the model's width, is no multiple of 128) of the export (round-to-nearest, `export_gptq`), read as
  stored (AWQ runs on the same CPU kernel).
With `--model-id`, every variant other than "gguf" and "gptq" is that checkpoint with `--quantize V`
("none": as it is).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_VARIANTS = ("gguf", "bfloat16", "eetq", "fp8", "gptq", "bitsandbytes-nf4")
KNOWN = (
    "gguf",
    "bfloat16",
    "none",
    "eetq",
    "fp8",
    "gptq",
    "bitsandbytes",
    "bitsandbytes-nf4",
    "bitsandbytes-fp4",
)


def parse_variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in KNOWN]
    if unknown or not names:
        raise ValueError(f"--quantize: unknown variant(s) {unknown} (known: {', '.join(KNOWN)})")
    return names


def variant_model(variant: str, model_id: str | None, export_dir: str) -> tuple[str | None, str | None]:
    """(model id, --quantize value) of a variant."""
    from tgi.core.testing.export import export_default_model, export_gptq

    if model_id is not None:
        return model_id, None if variant in ("none", "bfloat16") else variant
    if variant == "gguf":
        return None, None
    dense = export_default_model(Path(export_dir) / "default-bf16")
    if variant == "gptq":
        return str(export_gptq(dense, Path(export_dir) / "default-gptq-int4-g64", group_size=64)), None
    return str(dense), None if variant in ("none", "bfloat16") else variant
