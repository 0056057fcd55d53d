// The Python module: what torch.utils.cpp_extension.load_inline(functions=[...]) generated before the kernels
// moved to these files (each op's docstring is its name).
#include <torch/extension.h>

#include "ops.h"
#include "kv_quant_ops.h"
#include "lora_sgmv.h"
#include "fp8_linear.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", torch::wrap_pybind_function(paged_decode), "paged_decode");
  m.def("paged_prefill", torch::wrap_pybind_function(paged_prefill), "paged_prefill");
  m.def("paged_prefill_available", &paged_prefill_available, "paged_prefill_available");
  m.def("block_pack", torch::wrap_pybind_function(block_pack), "block_pack");
  m.def("block_linear", torch::wrap_pybind_function(block_linear), "block_linear");
  m.def("block_dequantize", torch::wrap_pybind_function(block_dequantize), "block_dequantize");
  m.def("dequantize_impls", torch::wrap_pybind_function(dequantize_impls), "dequantize_impls");
  m.def("block_impls", torch::wrap_pybind_function(block_impls), "block_impls");
  m.def("rms_norm", torch::wrap_pybind_function(rms_norm), "rms_norm");
  m.def("rotary_inplace", torch::wrap_pybind_function(rotary_inplace), "rotary_inplace");
  m.def("silu_mul", torch::wrap_pybind_function(silu_mul), "silu_mul");
  m.def("kv_write", torch::wrap_pybind_function(kv_write), "kv_write");
  m.def("greedy_pick", torch::wrap_pybind_function(greedy_pick), "greedy_pick");
  m.def("release_openmp_threads", &release_openmp_threads, "release_openmp_threads");
  m.def("roofline_peaks", &roofline_peaks, "roofline_peaks");
  m.def("roofline_peak", &roofline_peak, "roofline_peak");
  m.def("roofline_read", &roofline_read, "roofline_read");
  m.def("lora_sgmv", torch::wrap_pybind_function(lora_sgmv), "lora_sgmv");
  m.def("lora_impls", torch::wrap_pybind_function(lora_impls), "lora_impls");
  m.def("fp8_pack", torch::wrap_pybind_function(fp8_pack), "fp8_pack");
  m.def("fp8_linear", torch::wrap_pybind_function(fp8_linear), "fp8_linear");
  m.def("fp8_widen", torch::wrap_pybind_function(fp8_widen), "fp8_widen");
  m.def("fp8_impls", torch::wrap_pybind_function(fp8_impls), "fp8_impls");
  m.def("kv_write_quantized", torch::wrap_pybind_function(kv_write_quantized), "kv_write_quantized");
  m.def("paged_decode_quantized", torch::wrap_pybind_function(paged_decode_quantized), "paged_decode_quantized");
  m.def("paged_prefill_quantized", torch::wrap_pybind_function(paged_prefill_quantized), "paged_prefill_quantized");
  m.def("kv_decode_impls", torch::wrap_pybind_function(kv_decode_impls), "kv_decode_impls");
}
