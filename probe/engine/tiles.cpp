// The single pass's fused CPU tile kernel (probe.engine.tiles builds it once per machine, torch.utils.cpp_extension).
//
// For one block of query rows of every head it writes what the torch path of
// probe.engine.attention._stream_single_pass computes with a GEMM, a softmax and a second GEMM:
//
//     α_ij = exp(s_ij − lse_i),  s_ij = scale · q_i·k_j + mask_ij  (keys after the query masked when causal),
//     out_i = Σ_j α_ij v_j,      lse_i = log Σ_j exp(s_ij)          (a fully masked row: α = 0, out = 0, lse = 0)
//
// tile by tile: per head and [q_tile × k_tile] tile of scores, QKᵀ into a scratch tile that stays in cache,
// the online softmax (running row maximum m and sum l, flash-attention style), exp(s − m) stored into the α block
// and multiplied into the output accumulator by the second GEMM while still in cache. Once a tile row has seen
// all its keys, each stored tile is rescaled by exp(m_tile − m) / l. What it saves against the torch path at
// long N is the GEMMs' speed on cache-sized tiles and the softmax's passes over a block larger than the cache
// (docs/benchmarks.md). Soft-capping, attention sinks and reduced precision stay on the torch path.
//
// Row reductions Σ_j α_ij w_jf (probe.engine.sinks.KeyReduction) are summed from each tile row right after its
// exp, while it is in L1 (one dot product per weight column, rescaled with the row's running maximum like the
// output accumulator). When the sinks want nothing else, no α block is passed in and α never leaves the cache:
// no store, no rescale, no read by a sink — what flash attention does, plus those dot products. (As extra value
// columns instead, 64 + 1 columns cost the GEMM about as much as 80.)
//
// The GEMMs call the BLAS `sgemm_` that PyTorch's CPU build exports (MKL); where it is missing the library does
// not load and probe.engine.tiles reports the kernel unavailable.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kLanes = Vec::size();

// Row-major C[m × n] = alpha · A[m × k] · B[k × n] + beta · C, leading dimensions in elements. BLAS is
// column-major: the row-major product is the column-major Cᵀ = Bᵀ · Aᵀ, so A and B swap places.
void gemm(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc) {
  const char none = 'N';
  sgemm_(&none, &none, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

float lanes_max(Vec v) {
  float x[kLanes];
  v.store(x);
  float out = x[0];
  for (int i = 1; i < kLanes; ++i) out = std::max(out, x[i]);
  return out;
}

float lanes_sum(Vec v) {
  float x[kLanes];
  v.store(x);
  float out = 0.f;
  for (int i = 0; i < kLanes; ++i) out += x[i];
  return out;
}

// max over x[0, n): four accumulators, so the loop is not bound by the latency of one chain of maxima
float row_max(const float* x, int n) {
  Vec b0(kNegInf), b1(kNegInf), b2(kNegInf), b3(kNegInf);
  int j = 0;
  for (; j + 4 * kLanes <= n; j += 4 * kLanes) {
    b0 = at::vec::maximum(b0, Vec::loadu(x + j));
    b1 = at::vec::maximum(b1, Vec::loadu(x + j + kLanes));
    b2 = at::vec::maximum(b2, Vec::loadu(x + j + 2 * kLanes));
    b3 = at::vec::maximum(b3, Vec::loadu(x + j + 3 * kLanes));
  }
  for (; j + kLanes <= n; j += kLanes) b0 = at::vec::maximum(b0, Vec::loadu(x + j));
  float out = lanes_max(at::vec::maximum(at::vec::maximum(b0, b1), at::vec::maximum(b2, b3)));
  for (; j < n; ++j) out = std::max(out, x[j]);
  return out;
}

// x = exp(x − m) in place, copied to y when Store; returns Σ exp(x − m)
template <bool Store>
float exp_sum(float* x, float* y, int n, float m) {
  Vec t0(0.f), t1(0.f);
  const Vec shift(m);
  int j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    const Vec e0 = (Vec::loadu(x + j) - shift).exp();
    const Vec e1 = (Vec::loadu(x + j + kLanes) - shift).exp();
    e0.store(x + j);
    e1.store(x + j + kLanes);
    if constexpr (Store) {
      e0.store(y + j);
      e1.store(y + j + kLanes);
    }
    t0 = t0 + e0;
    t1 = t1 + e1;
  }
  for (; j + kLanes <= n; j += kLanes) {
    const Vec e = (Vec::loadu(x + j) - shift).exp();
    e.store(x + j);
    if constexpr (Store) e.store(y + j);
    t0 = t0 + e;
  }
  float out = lanes_sum(t0 + t1);
  for (; j < n; ++j) {
    x[j] = std::exp(x[j] - m);
    if constexpr (Store) y[j] = x[j];
    out += x[j];
  }
  return out;
}

// Σ_j x_j y_j over [0, n): two accumulators
float dot(const float* x, const float* y, int n) {
  Vec t0(0.f), t1(0.f);
  int j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    t0 = at::vec::fmadd(Vec::loadu(x + j), Vec::loadu(y + j), t0);
    t1 = at::vec::fmadd(Vec::loadu(x + j + kLanes), Vec::loadu(y + j + kLanes), t1);
  }
  for (; j + kLanes <= n; j += kLanes) t0 = at::vec::fmadd(Vec::loadu(x + j), Vec::loadu(y + j), t0);
  float out = lanes_sum(t0 + t1);
  for (; j < n; ++j) out += x[j] * y[j];
  return out;
}

void scale(float* x, int n, float factor) {
  const Vec f(factor);
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) (Vec::loadu(x + j) * f).store(x + j);
  for (; j < n; ++j) x[j] *= factor;
}

}  // namespace

// One block of query rows [start, stop) of every head.
//   query   [kv_batch, group, query, dim]   float32 (kv_batch = batch · kv heads; group = query heads per kv head)
//   key_t   [kv_batch, dim, key]            the keys transposed, so QKᵀ tiles are plain row-major GEMMs
//   value   [kv_batch, key, dim_v]
//   mask    empty, or [batch, 1|head, query, ≥ key_stop] additive float32
//   alpha   [kv_batch, group, stop − start, key_stop]  contiguous: the block α is written into; empty: α is
//                                                       not kept (the sinks take only row reductions)
//   output  [kv_batch, group, stop − start, dim_v]      the block's output
//   lse     [kv_batch, group, stop − start]             the block's log-sum-exp
//   max_alpha  empty, or [kv_batch, group, stop − start]   each row's largest α, exp(m − lse) = 1 / l
//   weights_t  empty, or [batch|1, feature, ≥ key_stop]  a row reduction's key weights w_jf, transposed
//   reduced    [kv_batch, group, stop − start, feature]  Σ_j α_ij w_jf (with weights_t)
// Every tensor's last axis is contiguous. Causal: key j is seen by query row r iff j ≤ r (no KV cache).
void tile_block(const at::Tensor& query, const at::Tensor& key_t, const at::Tensor& value, const at::Tensor& mask,
                at::Tensor alpha, at::Tensor output, at::Tensor lse, at::Tensor max_alpha,
                const at::Tensor& weights_t, at::Tensor reduced, double scale_factor, int64_t start, int64_t stop,
                int64_t key_stop, bool causal, int64_t q_tile, int64_t k_tile) {
  TORCH_CHECK(query.scalar_type() == at::kFloat && key_t.scalar_type() == at::kFloat &&
                  value.scalar_type() == at::kFloat &&
                  output.scalar_type() == at::kFloat && lse.scalar_type() == at::kFloat,
              "tile_block takes float32 tensors");
  TORCH_CHECK(query.stride(3) == 1 && key_t.stride(2) == 1 && value.stride(2) == 1 && output.stride(3) == 1,
              "tile_block needs a contiguous last axis");
  const bool store = alpha.numel() > 0;
  const bool want_max = max_alpha.numel() > 0;
  TORCH_CHECK(!store || (alpha.scalar_type() == at::kFloat && alpha.is_contiguous()),
              "tile_block writes a contiguous float32 alpha block");
  TORCH_CHECK(!want_max || (max_alpha.scalar_type() == at::kFloat && max_alpha.stride(2) == 1),
              "tile_block writes max_alpha as float32 with a contiguous row axis");
  const int64_t features = weights_t.numel() > 0 ? weights_t.size(1) : 0;
  TORCH_CHECK(features == 0 || (weights_t.scalar_type() == at::kFloat && weights_t.dim() == 3 &&
                                weights_t.stride(2) == 1 && reduced.scalar_type() == at::kFloat &&
                                reduced.dim() == 4 && reduced.size(3) == features && reduced.stride(3) == 1),
              "tile_block takes float32 weights_t [batch, feature, key] and reduced [.., feature]");
  const bool has_mask = mask.numel() > 0;
  TORCH_CHECK(!has_mask || (mask.scalar_type() == at::kFloat && mask.dim() == 4 && mask.stride(3) == 1),
              "tile_block takes a float32 [batch head query key] mask with a contiguous key axis");
  const int64_t kv_batch = query.size(0), group = query.size(1), dim = query.size(3), dim_v = value.size(2);
  const int64_t rows = stop - start;
  const int64_t q_tiles = (rows + q_tile - 1) / q_tile;
  const int64_t k_tiles = (key_stop + k_tile - 1) / k_tile;
  const float* q_data = query.data_ptr<float>();
  const float* k_data = key_t.data_ptr<float>();
  const float* v_data = value.data_ptr<float>();
  float* a_data = store ? alpha.data_ptr<float>() : nullptr;
  float* x_data = want_max ? max_alpha.data_ptr<float>() : nullptr;
  float* o_data = output.data_ptr<float>();
  float* l_data = lse.data_ptr<float>();
  const float* m_data = has_mask ? mask.data_ptr<float>() : nullptr;
  const int64_t kv_per_batch = has_mask ? kv_batch / mask.size(0) : 1;
  const int64_t mask_heads = has_mask ? mask.size(1) : 1;
  const float* w_data = features ? weights_t.data_ptr<float>() : nullptr;
  float* r_data = features ? reduced.data_ptr<float>() : nullptr;
  const int64_t kv_per_weights = features ? kv_batch / weights_t.size(0) : 1;
  at::parallel_for(0, kv_batch * group * q_tiles, 1, [&](int64_t first, int64_t last) {
    // per thread: the scores tile [q_tile × k_tile], the output accumulator, the running max and sum of each
    // row, and the max each stored tile was exponentiated against
    std::vector<float> tile(q_tile * k_tile), acc(q_tile * dim_v), row_m(q_tile), row_l(q_tile);
    std::vector<float> tile_m(q_tile * k_tiles), racc(q_tile * features);
    for (int64_t item = first; item < last; ++item) {
      const int64_t kv = item / (group * q_tiles), g = (item / q_tiles) % group, r0 = (item % q_tiles) * q_tile;
      const int64_t t = std::min(q_tile, rows - r0);
      const int64_t keys = causal ? std::min(key_stop, start + r0 + t) : key_stop;  // keys any row sees
      const float* q_rows = q_data + kv * query.stride(0) + g * query.stride(1) + (start + r0) * query.stride(2);
      float* a_rows = store ? a_data + ((kv * group + g) * rows + r0) * key_stop : nullptr;
      const float* m_rows = nullptr;
      if (has_mask) {
        const int64_t batch = kv / kv_per_batch, head = (kv % kv_per_batch) * group + g;
        m_rows = m_data + batch * mask.stride(0) + (mask_heads > 1 ? head : 0) * mask.stride(1) +
                 (start + r0) * mask.stride(2);
      }
      std::fill(row_m.begin(), row_m.begin() + t, kNegInf);
      std::fill(row_l.begin(), row_l.begin() + t, 0.f);
      std::fill(acc.begin(), acc.begin() + t * dim_v, 0.f);
      std::fill(racc.begin(), racc.begin() + t * features, 0.f);
      const float* w_rows = features ? w_data + (kv / kv_per_weights) * weights_t.stride(0) : nullptr;
      int64_t n_tiles = 0;
      for (int64_t j0 = 0; j0 < keys; j0 += k_tile, ++n_tiles) {
        const int64_t tk = std::min(k_tile, keys - j0);
        gemm(t, tk, dim, static_cast<float>(scale_factor), q_rows, query.stride(2),
             k_data + kv * key_t.stride(0) + j0, key_t.stride(1), 0.f, tile.data(), k_tile);
        for (int64_t i = 0; i < t; ++i) {
          float* s = tile.data() + i * k_tile;
          float* a = store ? a_rows + i * key_stop + j0 : nullptr;
          if (has_mask) {
            const float* m = m_rows + i * mask.stride(2) + j0;
            for (int64_t j = 0; j < tk; ++j) s[j] += m[j];
          }
          if (causal && j0 + tk > start + r0 + i + 1) {  // keys after this row's query
            for (int64_t j = std::max<int64_t>(start + r0 + i + 1 - j0, 0); j < tk; ++j) s[j] = kNegInf;
          }
          const float m_new = std::max(row_m[i], row_max(s, tk));
          if (m_new == kNegInf) {  // every key so far masked: α = 0 and nothing joins the output
            std::fill(s, s + tk, 0.f);
            if (store) std::fill(a, a + tk, 0.f);
            tile_m[i * k_tiles + n_tiles] = kNegInf;
            continue;
          }
          const float sum = store ? exp_sum<true>(s, a, tk, m_new) : exp_sum<false>(s, a, tk, m_new);
          if (row_m[i] != m_new) {  // a larger maximum: rescale what the row has summed so far
            const float factor = std::exp(row_m[i] - m_new);
            row_l[i] *= factor;
            scale(acc.data() + i * dim_v, dim_v, factor);
            for (int64_t f = 0; f < features; ++f) racc[i * features + f] *= factor;
            row_m[i] = m_new;
          }
          // the reductions from the row's exp(s − m) while it is in L1: one dot product per feature
          for (int64_t f = 0; f < features; ++f)
            racc[i * features + f] += dot(s, w_rows + f * weights_t.stride(1) + j0, tk);
          row_l[i] += sum;
          tile_m[i * k_tiles + n_tiles] = m_new;
        }
        gemm(t, dim_v, tk, 1.f, tile.data(), k_tile, v_data + kv * value.stride(0) + j0 * value.stride(1),
             value.stride(1), 1.f, acc.data(), dim_v);
      }
      for (int64_t i = 0; i < t; ++i) {
        float* out = o_data + kv * output.stride(0) + g * output.stride(1) + (r0 + i) * output.stride(2);
        float* row_lse = l_data + kv * lse.stride(0) + g * lse.stride(1) + (r0 + i) * lse.stride(2);
        float* row_max_alpha = want_max ? x_data + kv * max_alpha.stride(0) + g * max_alpha.stride(1) +
                                              (r0 + i) * max_alpha.stride(2)
                                        : nullptr;
        float* a = store ? a_rows + i * key_stop : nullptr;
        float* row_reduced = features ? r_data + kv * reduced.stride(0) + g * reduced.stride(1) +
                                            (r0 + i) * reduced.stride(2)
                                      : nullptr;
        if (store) std::fill(a + keys, a + key_stop, 0.f);  // keys after the tile's last query (causal)
        if (row_l[i] == 0.f) {  // a fully masked row, as the CPU kernel gives it
          if (store) std::fill(a, a + keys, 0.f);
          std::fill(out, out + dim_v, 0.f);
          *row_lse = 0.f;
          for (int64_t f = 0; f < features; ++f) row_reduced[f] = 0.f;
          if (want_max) *row_max_alpha = 0.f;
          continue;
        }
        const float inv = 1.f / row_l[i];
        for (int64_t tj = 0; store && tj < n_tiles; ++tj) {
          const float m = tile_m[i * k_tiles + tj];
          if (m == kNegInf) continue;  // stored as zeros
          const int64_t j0 = tj * k_tile;
          scale(a + j0, std::min(k_tile, keys - j0), m == row_m[i] ? inv : std::exp(m - row_m[i]) * inv);
        }
        for (int64_t c = 0; c < dim_v; ++c) out[c] = acc[i * dim_v + c] * inv;
        for (int64_t f = 0; f < features; ++f) row_reduced[f] = racc[i * features + f] * inv;
        if (want_max) *row_max_alpha = inv;  // the row's maximum score m has α = exp(m − m) / l
        *row_lse = row_m[i] + std::log(row_l[i]);
      }
    }
  });
}

TORCH_LIBRARY(probe_tiles, library) {
  library.def(
      "tile_block(Tensor query, Tensor key_t, Tensor value, Tensor mask, Tensor(a!) alpha, Tensor(b!) output, "
      "Tensor(c!) lse, Tensor(d!) max_alpha, Tensor weights_t, Tensor(e!) reduced, float scale, int start, int stop, int key_stop, bool causal, int q_tile, int k_tile) -> ()");
  library.impl("tile_block", c10::DispatchKey::CPU, &tile_block);
}
