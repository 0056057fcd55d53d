// The ops the extension exports: bindings.cpp binds them to Python, tgi.backends.cpu.native wraps them.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

// paged_attention.cpp
torch::Tensor paged_decode(torch::Tensor q, torch::Tensor key_cache, torch::Tensor value_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens, double scale,
                           int64_t sliding_window, double softcap, int64_t impl);

// paged_prefill.cpp
torch::Tensor paged_prefill(torch::Tensor q, torch::Tensor key_cache, torch::Tensor value_cache,
                            torch::Tensor block_tables, torch::Tensor query_start_loc, torch::Tensor seq_lens,
                            double scale, int64_t sliding_window, double softcap);
bool paged_prefill_available();

// block_linear.cpp
torch::Tensor block_pack(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k);
torch::Tensor block_linear(torch::Tensor x, torch::Tensor packed, int64_t qtype, int64_t n, int64_t k,
                           c10::optional<torch::Tensor> bias, int64_t impl);
std::vector<std::string> block_impls();

// block_dequantize.cpp
torch::Tensor block_dequantize(torch::Tensor raw, int64_t qtype, int64_t n, int64_t k, bool bf16, int64_t impl);
std::vector<std::string> dequantize_impls();

// fused_ops.cpp
std::tuple<torch::Tensor, torch::Tensor> rms_norm(torch::Tensor x, c10::optional<torch::Tensor> residual,
                                                  torch::Tensor weight, double eps);
void rotary_inplace(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t head_dim);
torch::Tensor silu_mul(torch::Tensor gate_up);
void kv_write(torch::Tensor key_cache, torch::Tensor value_cache, torch::Tensor key, torch::Tensor value,
              torch::Tensor slots);

// greedy_pick.cpp
std::tuple<torch::Tensor, torch::Tensor> greedy_pick(torch::Tensor logits);

// openmp_threads.cpp: frees the OpenMP workers the calling thread's parallel regions made (why: native
// release_openmp_threads in __init__.py); false inside a parallel region
bool release_openmp_threads();

// roofline.cpp: the machine's limits as `tgi benchmark roofline` measures them (tgi.benchmarks.roofline):
// the product loops this CPU can run, by name; one loop on `threads` threads -> (seconds, multiply-adds);
// a streaming read of a 64-byte-aligned uint8 buffer, `passes` times on `threads` threads -> (seconds, bytes)
std::vector<std::string> roofline_peaks();
std::tuple<double, double> roofline_peak(const std::string& name, int64_t iterations, int64_t threads);
std::tuple<double, double> roofline_read(torch::Tensor buffer, int64_t passes, int64_t threads);
