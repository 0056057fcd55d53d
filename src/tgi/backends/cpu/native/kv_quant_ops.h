// The quantized KV cache's ops (bound in bindings.cpp, wrapped by tgi.backends.cpu.native.kv_quant).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

// kv_quant_write.cpp: token i's keys and values quantized into slot slots[i] (negative: skipped) of the codes
// [NB, BS, Hkv, Dh] (uint8 views) and scales [NB, BS, Hkv] float32; k_fixed / v_fixed > 0: the checkpoint's
// scale for every token (float8), else each token's own per kv head.
void kv_write_quantized(torch::Tensor k_codes, torch::Tensor v_codes, torch::Tensor k_scales,
                        torch::Tensor v_scales, torch::Tensor key, torch::Tensor value, torch::Tensor slots,
                        int64_t kind, double k_fixed, double v_fixed);

// kv_quant_decode.cpp: the paged decode attention over such a cache; q [D, H, Dh] float32 or bfloat16 -> its
// dtype. impl: 0 auto, 1 reference, 2 avx2, 3 avx512, 4 amx.
torch::Tensor paged_decode_quantized(torch::Tensor q, torch::Tensor k_codes, torch::Tensor v_codes,
                                     torch::Tensor k_scales, torch::Tensor v_scales, torch::Tensor block_tables,
                                     torch::Tensor seq_lens, double scale, int64_t sliding_window, double softcap,
                                     int64_t kind, int64_t impl);
// paged_prefill.cpp: the prefill attention (paged_prefill, AVX512-BF16) over such a cache, q bfloat16 [T, H, Dh]
torch::Tensor paged_prefill_quantized(torch::Tensor q, torch::Tensor k_codes, torch::Tensor v_codes,
                                      torch::Tensor k_scales, torch::Tensor v_scales, torch::Tensor block_tables,
                                      torch::Tensor query_start_loc, torch::Tensor seq_lens, double scale,
                                      int64_t sliding_window, double softcap, int64_t kind);
// the implementations this CPU has, of "reference", "avx2", "avx512", "amx"
std::vector<std::string> kv_decode_impls();
