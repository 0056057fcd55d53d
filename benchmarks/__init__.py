"""Benchmarks: a serving load generator (`tgi benchmark serving`) and an engine micro-benchmark
(`tgi benchmark engine`). The scripts under `benchmarks/` are thin wrappers around these modules.

Modules: `prompts` (seeded prompt sets), `stats` (percentiles), `client` (one streamed request, OpenAI or
TGI API), `serving` (sweeps, reports, CLI), `peers` (start llama.cpp / our server / the `transformers`
baseline), `engine` (prefill and decode step timings straight on `LLMEngine`), `plot` (PNG).
"""
