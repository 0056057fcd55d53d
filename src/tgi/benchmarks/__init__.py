"""`tgi.benchmarks` (the `benchmarks/` folder): a serving load generator (`tgi benchmark serving`, or
`python src/tgi/benchmarks/serving.py`) and an engine micro-benchmark (`tgi benchmark engine`, or
`python src/tgi/benchmarks/engine_bench.py`). Not part of the server: `tgi`'s `benchmark` command loads it on use.

Modules: `prompts` (seeded prompt sets), `stats` (percentiles), `client` (one streamed request, OpenAI or
TGI API), `serving` (sweeps), `serving_cli` (its command line), `load_patterns` (closed loop, Poisson),
`progress`, `report` (JSON and tables), `peers` (start llama.cpp / our server / the `transformers`
baseline), `engine_bench` (prefill and decode step timings straight on `LLMEngine`), `plot` (PNG), `cli`
(the `tgi benchmark` command), `bench_model` (`tgi benchmark make-model`: the 1B/8B-class random Llama, by
`make_model`'s writer or by llama.cpp's tools through `llama_cpp_tools`; `hf_random_model` its safetensors
folder; `vlm_model` the SmolVLM-256M-shaped Idefics3 for image requests), `perplexity` and `perplexity_cli` (`tgi benchmark perplexity`). `cuda_bench.py` and `tp_memory.py`
are scripts of their own.
"""
