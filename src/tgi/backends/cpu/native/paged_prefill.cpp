// The CPU paged prefill attention (bfloat16 on AVX512-BF16): the op `paged_prefill`.
//
// Each prefill chunk's queries attend, causally (and within the sliding window), to their sequence's keys
// straight through its block table: the chunk's own keys are in the cache already (the model writes them
// before attention), the cached context before them too. One work item is 16 query rows of one kv head,
// one row per vector lane (a row: a token of the chunk and one of the kv head's G query heads, taken in
// token-major order, so that the G heads of a token share a tile), against the keys in tiles of 32:
// - scores: `vdpbf16ps` of the rows' query pairs (transposed once per work item, lanes = rows) with each
//   key's pair broadcast from the cache, float32 sums of exact products;
// - an online softmax per lane (the running maximum and sum of each row as a vector of 16 rows: no
//   horizontal reductions), scores and exponentials in float32;
// - the value product: the probabilities rounded to bfloat16 in pairs of keys, `vdpbf16ps` with each value
//   pair broadcast, float32 sums; the output divided by the row's sum once and rounded to bfloat16.
// The probabilities' rounding to bfloat16 before the value product is what torch's CPU flash attention does
// for bfloat16 too (its reduced-precision product); the sums stay float32.
//
// AMD EPYC Zen 4, 2 threads, one chunk of 250 tokens, 9 heads on 3 kv heads of 64: torch's SDPA 1.4-1.6 ms a
// layer, the decode kernel one query at a time 1.15 ms, this kernel 0.33 ms (src/tgi/backends/cpu/README.md).
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common.h"
#include "kv_quant.h"
#include "kv_quant_ops.h"
#include "ops.h"
#include "paged_attention.h"

namespace {

constexpr int kLanes = 16;   // query rows of a work item, one per lane
constexpr int kKeys = 32;    // keys per tile
constexpr int64_t kMaxHeadSize = 256;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TGI_PREFILL_PATH 1
#define TGI_PREFILL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

// What a work item reads: its chunk's tokens in q and out, its sequence's block table and positions.
struct Chunk {
  int64_t tok0;    // the chunk's first token (row of q)
  int64_t start;   // its first token's position in the sequence (keys cached before it)
  int64_t n;       // its tokens
  const int32_t* table;
};

struct Shapes {
  int64_t H, hkv, G, dh, bs;
  float scale, softcap;
  int64_t window;  // <= 0: none
};

// softcap * tanh(x / softcap), 16 lanes: tanh(|u|) = (1 - e) / (1 + e) with e = exp(-2 |u|) <= 1
TGI_PREFILL_TARGET inline __m512 soft_cap16(__m512 x, float softcap) {
  const __m512 u = _mm512_div_ps(x, _mm512_set1_ps(softcap));
  const __m512 a = _mm512_abs_ps(u);
  const __m512 e = tgi_common::exp16_nonpos(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), e), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  // the sign of u back on t
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(u), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign)),
                       _mm512_set1_ps(softcap));
}

// Where a work item reads a tile's keys and values: a bfloat16 cache as stored (`DenseKV`), or a quantized cache's
// codes widened to bfloat16 exactly into the tile's scratch rows, their scales (in the codes' unit, kv_quant.h)
// multiplying the keys' scores and the values' probabilities (`CodesKV`).
struct DenseKV {
  static constexpr bool kScaled = false;
  struct Tile {};
  const uint16_t* kc;
  const uint16_t* vc;
  TGI_PREFILL_TARGET void rows(Tile&, const int64_t* at, int nk, int64_t row, int64_t ho, int64_t, int64_t,
                               const uint16_t** krow, const uint16_t** vrow, const uint16_t* zero_row, float*,
                               float*) const {
    for (int j = 0; j < kKeys; ++j) {
      krow[j] = kc + at[j] * row + ho;
      vrow[j] = j < nk ? vc + at[j] * row + ho : zero_row;
    }
  }
};

template <typename C>
struct CodesKV {
  static constexpr bool kScaled = true;
  struct Tile {
    alignas(64) uint16_t k[kKeys * kMaxHeadSize], v[kKeys * kMaxHeadSize];
  };
  const C* kc;
  const C* vc;
  const float* ks;
  const float* vs;
  TGI_PREFILL_TARGET void rows(Tile& tile, const int64_t* at, int nk, int64_t row, int64_t ho, int64_t dh,
                               int64_t kh, const uint16_t** krow, const uint16_t** vrow, const uint16_t* zero_row,
                               float* km, float* vm) const {
    const int64_t hkv = row / dh;
    for (int j = 0; j < kKeys; ++j) {
      const bool live = j < nk;
      for (int64_t d = 0; d < dh; d += 16) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(tile.k + j * dh + d),
                           (__m256i)_mm512_cvtneps_pbh(tgi_kvq::load16(kc + at[j] * row + ho + d)));
        if (live)
          _mm256_store_si256(reinterpret_cast<__m256i*>(tile.v + j * dh + d),
                             (__m256i)_mm512_cvtneps_pbh(tgi_kvq::load16(vc + at[j] * row + ho + d)));
      }
      krow[j] = tile.k + j * dh;
      vrow[j] = live ? tile.v + j * dh : zero_row;
      km[j] = ks[at[j] * hkv + kh] * tgi_kvq::kUnit<C>;
      vm[j] = live ? vs[at[j] * hkv + kh] * tgi_kvq::kUnit<C> : 0.0f;
    }
  }
};

// 16 rows (flattened token * G + head index f0 .. f0 + 15 of chunk c, kv head kh) against their keys.
template <typename Src>
TGI_PREFILL_TARGET void prefill_rows(const uint16_t* q, const Src& src, uint16_t* out, const Chunk& c,
                                     const Shapes& s, int64_t kh, int64_t f0) {
  const int64_t G = s.G, dh = s.dh, row = s.hkv * dh, ho = kh * dh;
  const int64_t rows = std::min<int64_t>(kLanes, c.n * G - f0);
  alignas(64) int32_t pos[kLanes], first[kLanes];
  const uint16_t* qrow[kLanes];
  uint16_t* orow[kLanes];
  for (int r = 0; r < kLanes; ++r) {
    const int64_t f = f0 + std::min<int64_t>(r, rows - 1);  // spare lanes repeat the last row, never stored
    const int64_t i = f / G, head = kh * G + f % G;
    pos[r] = static_cast<int32_t>(c.start + i);
    first[r] = s.window > 0 ? static_cast<int32_t>(std::max<int64_t>(0, c.start + i - s.window + 1)) : 0;
    qrow[r] = q + ((c.tok0 + i) * s.H + head) * dh;
    orow[r] = out + ((c.tok0 + i) * s.H + head) * dh;
  }
  // the rows' queries as pairs of dimensions, lanes = rows: qt[d2 * 16 + r]
  alignas(64) uint32_t qt[kMaxHeadSize / 2 * kLanes];
  for (int64_t d2 = 0; d2 < dh / 2; ++d2)
    for (int r = 0; r < kLanes; ++r) std::memcpy(&qt[d2 * kLanes + r], qrow[r] + 2 * d2, 4);
  alignas(64) float acc[kMaxHeadSize * kLanes];  // acc[d * 16 + r]: row r's output dimension d, unnormalised
  std::fill(acc, acc + dh * kLanes, 0.0f);
  alignas(64) float sc[kKeys * kLanes];          // sc[j * 16 + r]: row r's score of the tile's key j
  alignas(64) uint32_t vi[kKeys / 2 * kMaxHeadSize];  // vi[k2 * dh + d]: values of keys 2 k2, 2 k2 + 1
  __m512i pp[kKeys / 2];                         // probabilities of keys 2 k2, 2 k2 + 1, lanes = rows
  static const uint16_t zero_row[kMaxHeadSize] = {};

  const __m512i posv = _mm512_load_si512(pos), firstv = _mm512_load_si512(first);
  const int32_t kbeg = *std::min_element(first, first + kLanes), kend = *std::max_element(pos, pos + kLanes) + 1;
  const int32_t min_pos = *std::min_element(pos, pos + kLanes), max_first = *std::max_element(first, first + kLanes);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 m = neg_inf, l = _mm512_setzero_ps();
  // interleaves two rows' bfloat16 as pairs: (a[i], b[i]) for i in 0..15, then 16..31
  // (of one vector: elements i and 16 + i, for the probabilities of two keys)
  alignas(64) uint16_t lo_idx[32], hi_idx[32], half_idx[32];
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i), lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i), hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
    half_idx[2 * i] = static_cast<uint16_t>(i), half_idx[2 * i + 1] = static_cast<uint16_t>(16 + i);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __m512i halves = _mm512_load_si512(half_idx);

  typename Src::Tile tile;
  alignas(64) float km[kKeys], vm[kKeys];  // the tile's key and value scales (quantized caches)
  for (int64_t t0 = kbeg; t0 < kend; t0 += kKeys) {
    const int nk = static_cast<int>(std::min<int64_t>(kKeys, kend - t0));
    const uint16_t* krow[kKeys];
    const uint16_t* vrow[kKeys];
    int64_t at[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      const int64_t t = t0 + std::min(j, nk - 1);  // past the tile's keys: the last again (masked out)
      at[j] = static_cast<int64_t>(c.table[t / s.bs]) * s.bs + t % s.bs;
    }
    src.rows(tile, at, nk, row, ho, dh, kh, krow, vrow, zero_row, km, vm);
    if (t0 + kKeys < kend) {  // the next tile's keys, for the caches' blocks lie anywhere
      const int64_t t = t0 + kKeys;
      const int64_t next = static_cast<int64_t>(c.table[t / s.bs]) * s.bs + t % s.bs;
      _mm_prefetch(reinterpret_cast<const char*>(src.kc + next * row + ho), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(src.vc + next * row + ho), _MM_HINT_T0);
    }
    // scores, 8 keys at a time
    const int nk8 = (nk + 7) & ~7;
    for (int j0 = 0; j0 < nk8; j0 += 8) {
      __m512 a[8];
      for (int jj = 0; jj < 8; ++jj) a[jj] = _mm512_setzero_ps();
      for (int64_t d2 = 0; d2 < dh / 2; ++d2) {
        const __m512bh qv = (__m512bh)_mm512_load_si512(qt + d2 * kLanes);
        for (int jj = 0; jj < 8; ++jj) {
          int32_t kp;
          std::memcpy(&kp, krow[j0 + jj] + 2 * d2, 4);
          a[jj] = _mm512_dpbf16_ps(a[jj], qv, (__m512bh)_mm512_set1_epi32(kp));
        }
      }
      for (int jj = 0; jj < 8; ++jj) _mm512_store_ps(sc + (j0 + jj) * kLanes, a[jj]);
    }
    // scale, soft-cap, mask; the tile's maximum per row
    const bool every_key_seen = t0 + nk - 1 <= min_pos && t0 >= max_first;
    __m512 mt = neg_inf;
    for (int j = 0; j < nk; ++j) {
      const float mul = Src::kScaled ? s.scale * km[j] : s.scale;  // the key's scale taken out of the dot
      __m512 x = _mm512_mul_ps(_mm512_load_ps(sc + j * kLanes), _mm512_set1_ps(mul));
      if (s.softcap > 0.0f) x = soft_cap16(x, s.softcap);
      if (!every_key_seen) {
        const __m512i tv = _mm512_set1_epi32(static_cast<int32_t>(t0 + j));
        const __mmask16 seen = _mm512_cmp_epi32_mask(tv, posv, _MM_CMPINT_LE) &
                               _mm512_cmp_epi32_mask(firstv, tv, _MM_CMPINT_LE);
        x = _mm512_mask_blend_ps(seen, neg_inf, x);
      }
      _mm512_store_ps(sc + j * kLanes, x);
      mt = _mm512_max_ps(mt, x);
    }
    const __m512 m_new = _mm512_max_ps(m, mt);
    // rows that have seen no key yet keep a maximum of 0 for the exponentials (theirs are all masked)
    const __m512 m_use = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ), m_new,
                                              _mm512_setzero_ps());
    const bool rescale = _mm512_cmp_ps_mask(m_new, m, _CMP_NEQ_OQ) != 0;
    const __m512 corr = tgi_common::exp16_nonpos(_mm512_sub_ps(m, m_use));  // m = -inf: 0 (acc and l are 0)
    if (rescale) l = _mm512_mul_ps(l, corr);
    m = m_new;
    for (int j = 0; j < kKeys; j += 2) {
      __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
      if (j < nk) {
        const __m512 x = _mm512_load_ps(sc + j * kLanes);
        p0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_OQ),
                                 tgi_common::exp16_nonpos(_mm512_sub_ps(x, m_use)));
      }
      if (j + 1 < nk) {
        const __m512 x = _mm512_load_ps(sc + (j + 1) * kLanes);
        p1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_OQ),
                                 tgi_common::exp16_nonpos(_mm512_sub_ps(x, m_use)));
      }
      l = _mm512_add_ps(l, _mm512_add_ps(p0, p1));
      if (Src::kScaled) {  // the values' scales, before the probabilities round to bfloat16
        p0 = _mm512_mul_ps(p0, _mm512_set1_ps(vm[j]));
        p1 = _mm512_mul_ps(p1, _mm512_set1_ps(vm[j + 1]));
      }
      // bfloat16 of p0 in elements 0..15, of p1 in 16..31, interleaved to (p0[r], p1[r]) per lane r
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
      pp[j / 2] = _mm512_permutexvar_epi16(halves, both);
    }
    // the values as pairs of keys
    const int np = (nk + 1) / 2;
    for (int k2 = 0; k2 < np; ++k2)
      for (int64_t d0 = 0; d0 < dh; d0 += 32) {
        const __m512i a = _mm512_loadu_si512(vrow[2 * k2] + d0), b = _mm512_loadu_si512(vrow[2 * k2 + 1] + d0);
        _mm512_store_si512(vi + k2 * dh + d0, _mm512_permutex2var_epi16(a, lo, b));
        _mm512_store_si512(vi + k2 * dh + d0 + 16, _mm512_permutex2var_epi16(a, hi, b));
      }
    // acc = acc * corr + P V, 16 output dimensions at a time
    for (int64_t d0 = 0; d0 < dh; d0 += 16) {
      __m512 o[16];
      for (int i = 0; i < 16; ++i) {
        o[i] = _mm512_load_ps(acc + (d0 + i) * kLanes);
        if (rescale) o[i] = _mm512_mul_ps(o[i], corr);
      }
      for (int k2 = 0; k2 < np; ++k2) {
        const __m512bh p = (__m512bh)pp[k2];
        const uint32_t* v = vi + k2 * dh + d0;
        for (int i = 0; i < 16; ++i) o[i] = _mm512_dpbf16_ps(o[i], p, (__m512bh)_mm512_set1_epi32(static_cast<int>(v[i])));
      }
      for (int i = 0; i < 16; ++i) _mm512_store_ps(acc + (d0 + i) * kLanes, o[i]);
    }
  }
  alignas(64) float inv_l[kLanes];
  _mm512_store_ps(inv_l, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dh; ++d) {
      tgi_attention::store_f(orow[r], d, acc[d * kLanes + r] * inv_l[r]);
    }
}
#endif

}  // namespace

bool paged_prefill_available() {
#ifdef TGI_PREFILL_PATH
  return tgi_common::has_avx512_bf16();
#else
  return false;
#endif
}

namespace {

// The op's checks and the chunks of the step; `Src` reads the keys and values (bfloat16 or codes).
template <typename MakeSrc>
torch::Tensor prefill(torch::Tensor q, const torch::Tensor& key_cache, torch::Tensor block_tables,
                      torch::Tensor query_start_loc, torch::Tensor seq_lens, double scale, int64_t sliding_window,
                      double softcap, MakeSrc make_src) {
  TORCH_CHECK(paged_prefill_available(), "paged_prefill needs a CPU with AVX512-BF16");
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kBFloat16, "q must be bfloat16 [T, H, Dh]");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && query_start_loc.scalar_type() == at::kInt &&
                  seq_lens.scalar_type() == at::kInt,
              "block_tables, query_start_loc and seq_lens must be int32");
  const int64_t T = q.size(0), H = q.size(1), dh = q.size(2);
  const int64_t bs = key_cache.size(1), hkv = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == dh, "head_dim mismatch");
  TORCH_CHECK(dh % 32 == 0 && dh <= kMaxHeadSize, "paged_prefill takes head sizes that are a multiple of 32, up to ",
              kMaxHeadSize);
  TORCH_CHECK(H % hkv == 0, "query heads must be a multiple of kv heads");
  const int64_t P = seq_lens.numel();
  TORCH_CHECK(query_start_loc.numel() == P + 1, "query_start_loc must be [P + 1]");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) >= P, "block_tables must be [P, max_blocks]");
  q = q.contiguous();
  block_tables = block_tables.contiguous();
  query_start_loc = query_start_loc.contiguous();
  seq_lens = seq_lens.contiguous();
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int64_t max_blocks = block_tables.size(1);
  std::vector<Chunk> chunks(P);
  for (int64_t p = 0; p < P; ++p) {
    const int64_t n = qsl[p + 1] - qsl[p];
    TORCH_CHECK(n >= 0 && qsl[p + 1] <= T && lens[p] >= n, "query_start_loc or seq_lens out of range");
    TORCH_CHECK(lens[p] <= max_blocks * bs, "a chunk's keys exceed its block table");
    // the chunk's first token sits after the lens[p] - n tokens cached before it
    chunks[p] = Chunk{qsl[p], lens[p] - n, n, block_tables.data_ptr<int32_t>() + p * max_blocks};
  }
  auto out = torch::empty_like(q);
#ifdef TGI_PREFILL_PATH
  const Shapes shapes{H, hkv, H / hkv, dh, bs, static_cast<float>(scale), static_cast<float>(softcap),
                      sliding_window};
  // work items (chunk, kv head, first row), the costliest (last rows: the most keys) first, for the dynamic
  // schedule below to even out
  struct Item {
    int64_t p, kh, f0;
  };
  std::vector<Item> items;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t f0 = ((chunks[p].n * shapes.G + kLanes - 1) / kLanes - 1) * kLanes; f0 >= 0; f0 -= kLanes)
      for (int64_t kh = 0; kh < hkv; ++kh) items.push_back({p, kh, f0});
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    return chunks[a.p].start + a.f0 / shapes.G > chunks[b.p].start + b.f0 / shapes.G;
  });
  const auto* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t count = static_cast<int64_t>(items.size());
  const auto src = make_src();
#pragma omp parallel for schedule(dynamic, 1) num_threads(at::get_num_threads())
  for (int64_t w = 0; w < count; ++w)
    prefill_rows(qp, src, op, chunks[items[w].p], shapes, items[w].kh, items[w].f0);
#endif
  return out;
}

}  // namespace

torch::Tensor paged_prefill(torch::Tensor q, torch::Tensor key_cache, torch::Tensor value_cache,
                            torch::Tensor block_tables, torch::Tensor query_start_loc, torch::Tensor seq_lens,
                            double scale, int64_t sliding_window, double softcap) {
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(),
              "key/value caches must be [num_blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(key_cache.scalar_type() == at::kBFloat16 && value_cache.scalar_type() == at::kBFloat16,
              "paged_prefill takes bfloat16 queries and caches");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(), "caches must be contiguous");
  return prefill(q, key_cache, block_tables, query_start_loc, seq_lens, scale, sliding_window, softcap, [&] {
    return DenseKV{reinterpret_cast<const uint16_t*>(key_cache.data_ptr<at::BFloat16>()),
                   reinterpret_cast<const uint16_t*>(value_cache.data_ptr<at::BFloat16>())};
  });
}

torch::Tensor paged_prefill_quantized(torch::Tensor q, torch::Tensor k_codes, torch::Tensor v_codes,
                                      torch::Tensor k_scales, torch::Tensor v_scales, torch::Tensor block_tables,
                                      torch::Tensor query_start_loc, torch::Tensor seq_lens, double scale,
                                      int64_t sliding_window, double softcap, int64_t kind) {
  TORCH_CHECK(k_codes.dim() == 4 && v_codes.sizes() == k_codes.sizes() && k_codes.element_size() == 1 &&
                  v_codes.element_size() == 1 && k_codes.is_contiguous() && v_codes.is_contiguous(),
              "codes must be contiguous one-byte [num_blocks, block_size, Hkv, Dh]");
  TORCH_CHECK(k_scales.scalar_type() == at::kFloat && v_scales.scalar_type() == at::kFloat &&
                  k_scales.is_contiguous() && v_scales.is_contiguous() &&
                  k_scales.numel() * k_codes.size(3) == k_codes.numel() && v_scales.numel() == k_scales.numel(),
              "scales must be contiguous float32 [num_blocks, block_size, Hkv]");
  TORCH_CHECK(kind >= 0 && kind <= 2, "unknown code kind ", kind);
  const auto* kc = static_cast<const uint8_t*>(k_codes.data_ptr());
  const auto* vc = static_cast<const uint8_t*>(v_codes.data_ptr());
  const float* ks = k_scales.data_ptr<float>();
  const float* vs = v_scales.data_ptr<float>();
  auto run = [&](auto codes) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(codes)>>;
    return prefill(q, k_codes, block_tables, query_start_loc, seq_lens, scale, sliding_window, softcap, [&] {
      return CodesKV<C>{reinterpret_cast<const C*>(kc), reinterpret_cast<const C*>(vc), ks, vs};
    });
  };
  if (kind == tgi_kvq::kInt8) return run(static_cast<const tgi_kvq::I8*>(nullptr));
  if (kind == tgi_kvq::kE4M3) return run(static_cast<const tgi_kvq::E4M3*>(nullptr));
  return run(static_cast<const tgi_kvq::E5M2*>(nullptr));
}
