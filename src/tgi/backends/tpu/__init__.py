"""The TPU backend on JAX (runs on JAX's CPU devices only when `TGI_JAX_PLATFORM=cpu` asks)."""
