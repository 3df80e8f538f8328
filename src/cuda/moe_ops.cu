// The CUDA backend's small kernels: routing, slot grouping, input conversion, activation
// quantization, activation functions and the weighted combine. Each mirrors its CPU counterpart
// (src/routing, src/cpu/moe_math.cpp) operation for operation where bit-identity matters.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <cstring>

#include "cuda/activation.cuh"
#include "cuda/convert.cuh"
#include "cuda/dequant.h"
#include "cuda/launch.cuh"
#include "cuda/moe_kernels.h"
#include "cuda/weight_access.cuh"
#include "quant/formats.h"
#include "routing/router_math.h"

namespace qmoe::cuda {
namespace {

using quant::detail::add_rn;
using quant::detail::div_rn;
using quant::detail::mul_rn;

constexpr int kThreads = 256;
constexpr int kMaxTopK = 32;
constexpr int kMaxGroups = 64;

// ---- routing: a team of warps per token ------------------------------------------------------------

constexpr int kRoutingWarps = 4;
constexpr int kMaxExperts = 512;

// Better = larger value, then lower index: a total order, so a warp reduction finds the same
// winner as the CPU's sort.
__device__ bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// Index of the best of v[0..n) by `better` (lanes scan strided, then a shuffle reduction).
__device__ int warp_argmax(const float* v, int n, int lane) {
  float best = -INFINITY;
  int best_i = -1;
  for (int i = lane; i < n; i += 32)
    if (best_i < 0 || better(v[i], i, best, best_i)) {
      best = v[i];
      best_i = i;
    }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (oi >= 0 && (best_i < 0 || better(ov, oi, best, best_i))) {
      best = ov;
      best_i = oi;
    }
  }
  return best_i;
}

// Shared memory of one token's routing team.
struct RoutingScratch {
  float score[kMaxExperts], choice[kMaxExperts], group[kMaxGroups];
  float part[32];  // each warp's partial maximum of the logits (softmax)
  float total;     // the softmax's sum
};

// The threads that route one token: `size` threads (a multiple of 32), `rank` this thread's
// index among them. A one-warp team meets at __syncwarp; larger teams split route_and_group's
// whole block, each with a token, and meet at the block's barrier. The element-wise steps (scores,
// the choices and their keys) spread over the team; the steps that run in expert or pick order (the
// softmax's sum, the group and top-k picks) run on its first warp.
struct RoutingTeam {
  int rank, size;
  __device__ void sync() const {
    if (size == 32)
      __syncwarp();
    else
      __syncthreads();
  }
};

// An order-preserving key of a choice for the warp's unsigned reductions: a larger key is a larger
// value; -0 and +0 tie (equal values, as the CPU's comparison sees them); NaN is below every number
// and 0 is no expert, so neither wins while a number is left.
__device__ uint32_t order_key(float v) {
  if (v != v) return 1u;
  uint32_t bits = __float_as_uint(v);
  if (bits == 0x80000000u) bits = 0;
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// The best remaining expert of keys[0..n) by (larger key, then lower index), for a warp whose lanes
// hold the best key and index of their strided experts (lane, lane + 32, ...): two warp
// reductions pick it, then its lane drops it from the keys and rescans its experts. Every lane
// gets the pick.
struct WarpPicker {
  uint32_t* keys;  // [n] in shared memory
  int n, lane;
  uint32_t best_key = 0;
  int best_i = 0;
  __device__ WarpPicker(uint32_t* keys_, int n_, int lane_) : keys(keys_), n(n_), lane(lane_) { rescan(); }
  __device__ void rescan() {
    best_key = 0;
    best_i = lane;
    for (int i = lane; i < n; i += 32)
      if (keys[i] > best_key) {  // (ascending i: the lower index keeps a tie)
        best_key = keys[i];
        best_i = i;
      }
  }
  __device__ int pick() {
    const uint32_t top = __reduce_max_sync(0xffffffffu, best_key);
    const int winner = static_cast<int>(__reduce_min_sync(0xffffffffu, best_key == top ? best_i : 0x7fffffff));
    if (best_i == winner && best_key == top) {
      keys[winner] = 0;
      rescan();
    }
    __syncwarp();
    return winner;
  }
};

// Token t's top-k ids and weights, by its team.
__device__ void route_token(const RoutingParams& p, int t, RoutingScratch& scratch, const RoutingTeam& team) {
  const int E = p.num_experts;
  const float* row = p.logits + static_cast<int64_t>(t) * E;
  int32_t* ids = p.ids + static_cast<int64_t>(t) * p.top_k;
  float* weights = p.weights + static_cast<int64_t>(t) * p.top_k;
  float* score = scratch.score;
  uint32_t* keys = reinterpret_cast<uint32_t*>(scratch.choice);  // the choices' order keys, for the picks
  const int r = team.rank, lane = r % 32;
  const bool first_warp = r < 32;

  if (p.custom_llama4) {  // top-k over the raw logits, weight = sigmoid(logit)
    for (int e = r; e < E; e += team.size) keys[e] = order_key(row[e]);
    team.sync();
    if (!first_warp) return;
    WarpPicker picker(keys, E, lane);
    for (int j = 0; j < p.top_k; ++j) {
      const int best = picker.pick();
      if (lane == j) {
        ids[j] = best;
        weights[j] = routing::router_sigmoid(row[best]);
      }
    }
    return;
  }

  if (p.scoring == 1) {
    for (int e = r; e < E; e += team.size) score[e] = routing::router_sigmoid(row[e]);
  } else {
    float max_logit = -INFINITY;
    for (int e = r; e < E; e += team.size) max_logit = fmaxf(max_logit, row[e]);
    for (int o = 16; o > 0; o >>= 1) max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, o));
    if (lane == 0) scratch.part[r / 32] = max_logit;
    team.sync();
    for (int w = 0; w < team.size / 32; ++w) max_logit = fmaxf(max_logit, scratch.part[w]);
    for (int e = r; e < E; e += team.size) score[e] = routing::router_exp(add_rn(row[e], -max_logit));
    team.sync();
    if (r == 0) {  // summed in expert order, exactly as the CPU does
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) sum = add_rn(sum, score[e]);
      scratch.total = sum;
    }
    team.sync();
    const float sum = scratch.total;
    for (int e = r; e < E; e += team.size) score[e] = div_rn(score[e], sum);
  }
  const bool grouped = p.num_expert_group > 1 || p.topk_group > 1;
  float* choice = scratch.choice;  // the choices as values (group selection), then as keys
  for (int e = r; e < E; e += team.size) {
    const float c = p.correction_bias ? add_rn(score[e], p.correction_bias[e]) : score[e];
    if (grouped)
      choice[e] = c;
    else
      keys[e] = order_key(c);
  }
  team.sync();
  if (!first_warp) return;

  if (grouped) {
    const int groups = p.num_expert_group, per_group = E / groups;
    float* group = scratch.group;
    for (int g = lane; g < groups; g += 32) {
      // max of the group, or with a bias the sum of its two best choices
      int b0 = -1, b1 = -1;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (b0 < 0 || better(choice[e], e, choice[b0], b0)) {
          b1 = b0;
          b0 = e;
        } else if (b1 < 0 || better(choice[e], e, choice[b1], b1)) {
          b1 = e;
        }
      }
      group[g] = (p.correction_bias && per_group >= 2) ? add_rn(choice[b0], choice[b1]) : choice[b0];
    }
    __syncwarp();
    uint64_t kept = 0;
    for (int j = 0; j < p.topk_group; ++j) {
      const int g = warp_argmax(group, groups, lane);
      kept |= 1ull << g;
      __syncwarp();  // every lane has read `group` before lane 0 overwrites it
      if (lane == 0) group[g] = -INFINITY;
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32)
      keys[e] = (kept >> (e / per_group)) & 1 ? order_key(choice[e]) : order_key(-INFINITY);
    __syncwarp();
  }

  // Lane j keeps the j-th choice (top_k <= 32), so the weights are scaled in registers and stored
  // once (a read back of global memory by one lane cost a round trip per choice).
  WarpPicker picker(keys, E, lane);
  float sum_w = 0.0f, my_w = 0.0f;
  int my_id = -1;
  for (int j = 0; j < p.top_k; ++j) {
    const int best = picker.pick();
    const float w = score[best];
    sum_w = add_rn(sum_w, w);  // (every lane sums the same weights in the same order)
    if (lane == j) {
      my_id = best;
      my_w = w;
    }
  }
  if (lane < p.top_k) {
    if (p.renormalize && sum_w > 0.0f) my_w = div_rn(my_w, sum_w);
    if (p.routed_scaling_factor != 1.0f) my_w = mul_rn(my_w, p.routed_scaling_factor);
    ids[lane] = my_id;
    weights[lane] = my_w;
  }
}

__global__ void __launch_bounds__(kRoutingWarps * 32) routing_kernel(RoutingParams p) {
  chain_start();
  __shared__ RoutingScratch scratch[kRoutingWarps];
  const int warp = threadIdx.x / 32;
  const int t = blockIdx.x * kRoutingWarps + warp;
  if (t < p.num_tokens) route_token(p, t, scratch[warp], {static_cast<int>(threadIdx.x % 32), 32});
}

// ---- grouping slots by local expert -----------------------------------------------------------

__global__ void count_kernel(GroupingParams p) {
  chain_start();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= p.num_slots) return;
  const int local = p.expert_map[p.ids[s]];
  p.slot_expert[s] = local;
  if (local >= 0) atomicAdd(&p.counts[local], 1);
}

constexpr int kMaxLocalExperts = 1024;

// The counts' scan shared by the grouping kernels: once the block's counts are in g.counts, the
// offsets (into g.offsets and p.expert_offsets) and the chunks of the experts with slots (the active
// ones, ascending). Each thread scans a run of up to kScanRun consecutive experts, and the runs'
// sums go through one block scan (a single thread's serial scan cost ~75 cycles an expert, ~10 us of
// a 256-expert decode forward on the H200). The scan leaves in g.counts[i] the first chunk of
// active expert i (the counts are in registers by then; the fused routing kernel has no shared
// memory for another array).
constexpr int kScanRun = 4;
static_assert(kThreads * kScanRun >= kMaxLocalExperts, "the grouping kernels' blocks cover every local expert");
struct GroupScan {
  int32_t counts[kMaxLocalExperts];
  int32_t offsets[kMaxLocalExperts + 1];
  int32_t active[kMaxLocalExperts];
  int32_t warp_sums[3][32];  // slots, active experts, chunks of each warp's runs
  int32_t num_active, num_chunks;
};

// Exclusive prefix sums over the block of three per-thread values (v[0..3)), through g.warp_sums.
__device__ void block_exclusive_scan3(int (&v)[3], GroupScan& g) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  int inclusive[3] = {v[0], v[1], v[2]};
  for (int o = 1; o < 32; o <<= 1)
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const int up = __shfl_up_sync(0xffffffffu, inclusive[j], o);
      if (lane >= o) inclusive[j] += up;
    }
  if (lane == 31)
#pragma unroll
    for (int j = 0; j < 3; ++j) g.warp_sums[j][warp] = inclusive[j];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      int sum = lane < warps ? g.warp_sums[j][lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, sum, o);
        if (lane >= o) sum += up;
      }
      g.warp_sums[j][lane] = sum;  // inclusive over warps 0..lane
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 3; ++j) v[j] = inclusive[j] - v[j] + (warp > 0 ? g.warp_sums[j][warp - 1] : 0);
}

__device__ void scan_counts(const GroupingParams& p, GroupScan& g) {
  const int E = p.num_local_experts;
  __syncthreads();
  // This thread's run of experts [first, first + kScanRun) ∩ [0, E): counts, and each expert's
  // chunks (busy experts get none: the hybrid's register kernel takes them).
  const int first = threadIdx.x * kScanRun;
  int count[kScanRun], chunks[kScanRun];
  int sums[3] = {0, 0, 0};  // slots, active experts, chunks
#pragma unroll
  for (int i = 0; i < kScanRun; ++i) {
    count[i] = first + i < E ? g.counts[first + i] : 0;
    const bool has_chunks = count[i] > 0 && (p.busy_rows <= 0 || count[i] < p.busy_rows);
    chunks[i] = has_chunks ? (count[i] + p.chunk_slots - 1) / p.chunk_slots : 0;
    sums[0] += count[i];
    sums[1] += has_chunks ? 1 : 0;
    sums[2] += chunks[i];
  }
  const int totals[3] = {sums[0], sums[1], sums[2]};
  block_exclusive_scan3(sums, g);  // (its barriers: every count is in registers before g.counts is reused)
  int acc = sums[0], active = sums[1], chunk = sums[2];
#pragma unroll
  for (int i = 0; i < kScanRun; ++i) {
    if (first + i >= E) break;
    g.offsets[first + i] = acc;
    if (chunks[i] > 0) {
      g.counts[active] = chunk;
      g.active[active++] = first + i;
      chunk += chunks[i];
    }
    acc += count[i];
  }
  if (threadIdx.x == blockDim.x - 1) {  // its exclusive prefix plus its own run: the totals
    g.offsets[E] = sums[0] + totals[0];
    g.num_active = sums[1] + totals[1];
    g.num_chunks = sums[2] + totals[2];
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= E; e += blockDim.x) p.expert_offsets[e] = g.offsets[e];
  if (p.busy_counts)
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      const int count = g.offsets[e + 1] - g.offsets[e];  // (g.counts holds chunk starts now)
      p.busy_counts[e] = p.busy_rows > 0 && count >= p.busy_rows ? count : 0;
    }
  for (int i = threadIdx.x; i < g.num_active; i += blockDim.x) {
    const int e = g.active[i];
    const int end = i + 1 < g.num_active ? g.counts[i + 1] : g.num_chunks;
    for (int c = g.counts[i], pos = g.offsets[e]; c < end; ++c, pos += p.chunk_slots) {
      p.chunks[2 * c] = e;
      p.chunks[2 * c + 1] = pos;
    }
  }
  if (threadIdx.x == 0) *p.num_chunks = g.num_chunks;
}

__global__ void offsets_kernel(GroupingParams p) {
  chain_start();
  __shared__ GroupScan g;
  for (int e = threadIdx.x; e < p.num_local_experts; e += blockDim.x) {
    g.counts[e] = p.counts[e];
    p.counts[e] = 0;  // reused by the scatter as running positions
  }
  scan_counts(p, g);
}

__global__ void scatter_kernel(GroupingParams p) {
  chain_start();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= p.num_slots) return;
  const int local = p.slot_expert[s];
  if (local < 0) return;
  // The order inside an expert's segment does not matter: every slot is computed on its own.
  const int pos = p.expert_offsets[local] + atomicAdd(&p.counts[local], 1);
  p.sorted_slots[pos] = s;
  if (p.slot_position) p.slot_position[s] = pos;
}

// Decode batches (up to kSmallGroupSlots slots): the whole grouping in one block, counts and ranks
// in shared memory and registers. The general path is four dependent launches (the counts' memset,
// count, offsets, scatter) of ~2 us each at 1 token (H200), more than the work.
constexpr int kSmallGroupThreads = 1024;
constexpr int kSmallGroupSlotsPerThread = 8;
constexpr int kSmallGroupSlots = kSmallGroupThreads * kSmallGroupSlotsPerThread;

// The grouping of up to blockDim.x x kSmallGroupSlotsPerThread slots by one block.
__device__ void group_in_block(const GroupingParams& p) {
  __shared__ GroupScan g;
  for (int e = threadIdx.x; e < p.num_local_experts; e += blockDim.x) g.counts[e] = 0;
  __syncthreads();
  int local[kSmallGroupSlotsPerThread], rank[kSmallGroupSlotsPerThread];  // slot threadIdx.x + i * blockDim.x
#pragma unroll
  for (int i = 0; i < kSmallGroupSlotsPerThread; ++i) {
    const int s = threadIdx.x + i * blockDim.x;
    local[i] = s < p.num_slots ? p.expert_map[p.ids[s]] : -1;
    if (s < p.num_slots) p.slot_expert[s] = local[i];
    // The order inside an expert's segment does not matter: every slot is computed on its own.
    rank[i] = local[i] >= 0 ? atomicAdd(&g.counts[local[i]], 1) : 0;
  }
  scan_counts(p, g);
#pragma unroll
  for (int i = 0; i < kSmallGroupSlotsPerThread; ++i) {
    if (local[i] < 0) continue;
    const int s = threadIdx.x + i * blockDim.x;
    const int pos = g.offsets[local[i]] + rank[i];
    p.sorted_slots[pos] = s;
    if (p.slot_position) p.slot_position[s] = pos;
  }
}

__global__ void __launch_bounds__(kSmallGroupThreads) small_grouping_kernel(GroupingParams p) {
  chain_start();
  group_in_block(p);
}

// Up to kFusedRoutingWarps tokens (launch_routing_and_grouping checks): routing (a team of warps
// per token) and grouping in one launch, one launch less at 1-8 tokens (~2-4 us each on the H200).
constexpr int kFusedRoutingWarps = 8;
__global__ void __launch_bounds__(kSmallGroupThreads) route_and_group_kernel(RoutingParams rp, GroupingParams gp) {
  chain_start();
  __shared__ RoutingScratch scratch[kFusedRoutingWarps];  // 35 KB (+ 12 KB in group_in_block)
  // At 1-2 tokens the block's warps in one team per token (a warp alone took ~3800 dependent
  // instructions for a 384-expert token while the others waited); from 3 tokens one warp per token
  // (teams of 8 and 4 warps there were 1-3% slower in layer time at 8 tokens, H200, thirty-ninth
  // session).
  const int team_warps = rp.num_tokens <= 2 ? blockDim.x / 32 / rp.num_tokens : 1;
  const int size = 32 * team_warps, team = threadIdx.x / size;
  if (team < rp.num_tokens) route_token(rp, team, scratch[team], {static_cast<int>(threadIdx.x % size), size});
  __syncthreads();  // the ids in global memory are visible to the whole block from here
  group_in_block(gp);
}

// ---- input conversion ---------------------------------------------------------------------------

__device__ float load_act(const void* src, int kind, int64_t i) {
  if (kind == 0) return quant::bf16_to_float(static_cast<const uint16_t*>(src)[i]);
  if (kind == 1) return quant::f16_to_float(static_cast<const uint16_t*>(src)[i]);
  return static_cast<const float*>(src)[i];
}

__device__ float round_kind(float v, int kind, bool round) {
  if (!round) return v;
  if (kind == 0) return round_bf16_hw(v);  // = quant::round_to_bf16 (convert.cuh; NaN: canonical)
  if (kind == 1) return round_f16_hw(v);
  return v;
}

// Index of column `col` of a row in the tensor-core kernels' 16-bit input layout (moe_mma.cu): each
// group of 8 columns stored as t0 t4 t1 t5 t2 t6 t3 t7. The row length is a multiple of 8 there.
__device__ int64_t permuted_col(int64_t col) {
  const int t = static_cast<int>(col & 7);
  return (col & ~int64_t{7}) | (t < 4 ? 2 * t : 2 * t - 7);
}

// Bits of a value that is exactly representable in the 16-bit kind (0 BF16, 1 F16).
__device__ uint16_t bits16(float v, int kind) {
  // quant::float_to_bf16 / float_to_f16, with the hardware conversion (convert.cuh; NaN: canonical)
  return kind == 0 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

__global__ void convert_kernel(const void* hidden, int kind, int64_t n, int64_t hidden_size, const float* router_weights,
                               bool round, float* x, uint16_t* x16) {
  chain_start();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = load_act(hidden, kind, i);
  if (router_weights) v = round_kind(mul_rn(v, router_weights[i / hidden_size]), kind, round);
  x[i] = v;
  if (x16) x16[(i / hidden_size) * hidden_size + permuted_col(i % hidden_size)] = bits16(v, kind);
}

// ---- activation quantization ------------------------------------------------------------------

__device__ float block_amax(float v) {
  __shared__ float partial[32];  // one per warp (blockDim.x <= 1024, a multiple of 32)
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  return m;
}

// A block walks a row in batches of kRowBatch values per thread, every load of a batch before any
// of its stores: a loop of in-place load-store steps makes one memory round trip per step (the
// compiler cannot move a load above a store that may alias it), which at decode, with a few rows
// of up to tens of thousands of columns, was most of these kernels' time.
constexpr int kRowBatch = 8;
// f(c, row[c]) for every column c < cols of the row (f may store into the row).
template <class F>
__device__ void visit_row(const float* row, int64_t cols, F f) {
  for (int64_t c0 = threadIdx.x; c0 < cols; c0 += kRowBatch * blockDim.x) {
    float v[kRowBatch];
#pragma unroll
    for (int b = 0; b < kRowBatch; ++b) {
      const int64_t c = c0 + b * blockDim.x;
      v[b] = c < cols ? row[c] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kRowBatch; ++b)
      if (c0 + b * blockDim.x < cols) f(c0 + b * blockDim.x, v[b]);
  }
}
// This thread's part of max |row[c]| (block_amax combines the threads').
__device__ float thread_row_amax(const float* row, int64_t cols) {
  float m = 0.0f;
  visit_row(row, cols, [&](int64_t, float v) { m = fmaxf(m, fabsf(v)); });
  return m;
}

// Rows of up to kRowRegs values per thread stay in registers between the amax and the quantization
// (one load of the row, not two); fake_quant_kernel runs kQuantThreads threads per row.
constexpr int kRowRegs = 8;
constexpr int kQuantThreads = 1024;

// Row `row_index` of x quantized with one scale (kinds 1, 2, 3, 5: FP8 per token, per tensor
// dynamic (`amax`: the tensor's) or static, INT8 per token): x = code * scale, and the codes (exact
// in f16) and the scale for the tensor-core kernels when asked for.
__device__ void scaled_row(const ActQuantParams& q, float* x, int64_t row_index, int64_t cols, const float* amax) {
  float* row = x + row_index * cols;
  const bool per_token = q.kind == 1 || q.kind == 5;  // block-uniform: block_amax below
  auto scale_of = [&](float row_amax) {
    if (q.kind == 5) return quant::int8_dynamic_scale(row_amax);
    if (q.kind == 1) return quant::fp8_dynamic_scale(row_amax);
    return q.kind == 2 ? quant::fp8_dynamic_scale(*amax) : q.static_scale;
  };
  auto quantize = [&](int64_t c, float v, float scale, float inv) {
    // The code as f16 bits (exact), by the hardware conversions (quantize_fp8_act is fp8_sat(v * inv)).
    const uint16_t code16 = q.kind == 5 ? __half_as_ushort(__float2half_rn(static_cast<float>(quant::quantize_int8_act(v, scale))))
                                        : e4m3_to_f16_hw(fp8x2_sat_hw(mul_rn(v, inv), 0.0f));
    row[c] = mul_rn(__half2float(__ushort_as_half(code16)), scale);
    if (q.codes16) q.codes16[row_index * cols + permuted_col(c)] = code16;
  };
  float scale;
  if (cols <= int64_t{kRowRegs} * blockDim.x) {
    float v[kRowRegs], m = 0.0f;
#pragma unroll
    for (int b = 0; b < kRowRegs; ++b) {
      const int64_t c = threadIdx.x + int64_t{b} * blockDim.x;
      v[b] = c < cols ? row[c] : 0.0f;
      m = fmaxf(m, fabsf(v[b]));
    }
    scale = scale_of(per_token ? block_amax(m) : 0.0f);
    const float inv = div_rn(1.0f, scale);
#pragma unroll
    for (int b = 0; b < kRowRegs; ++b) {
      const int64_t c = threadIdx.x + int64_t{b} * blockDim.x;
      if (c < cols) quantize(c, v[b], scale, inv);
    }
  } else {
    scale = scale_of(per_token ? block_amax(thread_row_amax(row, cols)) : 0.0f);
    const float inv = div_rn(1.0f, scale);
    visit_row(row, cols, [&](int64_t c, float v) { quantize(c, v, scale, inv); });
  }
  if (q.row_scale && threadIdx.x == 0) q.row_scale[row_index] = scale;
}

__device__ int row_of(const int32_t* row_ids, int r) { return row_ids ? row_ids[r] : r; }

// Per-tensor modes, pass 1: amax over all rows (float bits of non-negative values order as ints).
__global__ void amax_kernel(const float* x, int64_t cols, const int32_t* row_ids, int max_rows, const int32_t* num_rows_dev,
                            float* amax) {
  chain_start();
  const int r = blockIdx.x;
  const int rows = num_rows_dev ? *num_rows_dev : max_rows;
  if (r >= rows) return;
  const float* row = x + static_cast<int64_t>(row_of(row_ids, r)) * cols;
  const float m = block_amax(thread_row_amax(row, cols));
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
}

__global__ void __launch_bounds__(kQuantThreads)
    fake_quant_kernel(ActQuantParams q, float* x, int64_t cols, const int32_t* row_ids, int max_rows,
                      const int32_t* num_rows_dev, const float* amax) {
  chain_start();
  const int r = blockIdx.x;
  const int rows = num_rows_dev ? *num_rows_dev : max_rows;
  if (r >= rows) return;
  const int64_t row_index = row_of(row_ids, r);
  float* row = x + row_index * cols;
  switch (q.kind) {
    case 1:  // fp8 per token
    case 2:  // fp8 per tensor, dynamic
    case 3:  // fp8 static
    case 5:  // int8 per token
      scaled_row(q, x, row_index, cols, amax);
      return;
    case 4: {  // fp8 per token group: one warp per group, a lane's values of a group in registers
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      for (int64_t g0 = static_cast<int64_t>(warp) * q.group_size; g0 < cols; g0 += (blockDim.x / 32) * q.group_size) {
        const int64_t n = min(static_cast<int64_t>(q.group_size), cols - g0);
        auto quantize = [&](int64_t i, float v, float scale) {
          // float_to_fp8e4m3_sat(v / scale) and its f16 bits, by the hardware conversions
          const uint16_t code16 = e4m3_to_f16_hw(fp8x2_sat_hw(div_rn(v, scale), 0.0f));
          row[g0 + i] = mul_rn(__half2float(__ushort_as_half(code16)), scale);
          if (q.codes16) q.codes16[row_index * cols + permuted_col(g0 + i)] = code16;
        };
        float scale;
        if (n <= 32 * kRowRegs) {
          float v[kRowRegs], m = 0.0f;
#pragma unroll
          for (int b = 0; b < kRowRegs; ++b) {
            const int64_t i = lane + 32 * b;
            v[b] = i < n ? row[g0 + i] : 0.0f;
            m = fmaxf(m, fabsf(v[b]));
          }
          for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
          scale = div_rn(fmaxf(m, 1e-10f), quant::kFp8E4M3Max);
#pragma unroll
          for (int b = 0; b < kRowRegs; ++b)
            if (lane + 32 * b < n) quantize(lane + 32 * b, v[b], scale);
        } else {
          float m = 0.0f;
          for (int64_t i = lane; i < n; i += 32) m = fmaxf(m, fabsf(row[g0 + i]));
          for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
          scale = div_rn(fmaxf(m, 1e-10f), quant::kFp8E4M3Max);
          for (int64_t i = lane; i < n; i += 32) quantize(i, row[g0 + i], scale);
        }
        // Scales of a row: one per group, (cols + group_size - 1) / group_size of them.
        if (q.row_scale && lane == 0)
          q.row_scale[row_index * ((cols + q.group_size - 1) / q.group_size) + g0 / q.group_size] = scale;
      }
      return;
    }
    case 6: {  // nvfp4: one thread per 16-element block
      for (int64_t b0 = threadIdx.x * 16; b0 < cols; b0 += blockDim.x * 16) {
        float m = 0.0f;
        for (int i = 0; i < 16; ++i) m = fmaxf(m, fabsf(row[b0 + i]));
        const uint8_t sf_bits = quant::float_to_fp8e4m3_sat(mul_rn(q.global_scale, div_rn(m, 6.0f)));
        const float sf = quant::fp8e4m3_to_float(sf_bits);
        const float out_scale = sf == 0.0f ? 0.0f : div_rn(q.global_scale, sf);
        const float block_scale = div_rn(sf, q.global_scale);
        for (int i = 0; i < 16; ++i) {
          const uint8_t code = sf == 0.0f ? 0 : quant::float_to_e2m1(mul_rn(row[b0 + i], out_scale));
          row[b0 + i] = mul_rn(quant::e2m1_to_float(code), block_scale);
        }
      }
      return;
    }
    default:
      return;
  }
}

// The activation of gate g and up value up as the forward rounds it: inputs and result in the
// activation dtype (vLLM's intermediate buffers), unless ForwardOptions::round_intermediate is off.
__device__ float rounded_activation(const ActivationParams& p, float g, float up) {
  const float gr = round_kind(g, p.dtype_kind, p.round);
  const float ur = p.gated ? round_kind(up, p.dtype_kind, p.round) : 0.0f;
  return round_kind(activate(p.activation, p.limit, gr, ur), p.dtype_kind, p.round);
}

// The activation of GEMM1's output for the tensor-core and CUDA-core GEMM2 (the prefill kernels'
// input: activation_rows_kernel): slot r's row of u (gate | up) -> act (fp32) and act16 (the
// 16-bit bits, permuted as launch_convert_input's x16). A thread takes kActColumns columns and a
// row spreads over several blocks, all loads before any store: at decode there are only a few
// rows, and one block per row walking it in a loop of load-store steps (an in-place rounding, then
// the activation) took ~38 µs for Mixtral's 14336 columns at 1 token (H200, ncu), one memory round
// trip per step.
constexpr int kActColumns = 8;
__global__ void activation_kernel(ActivationParams p) {
  chain_start();
  const int r = blockIdx.x;
  if (r >= *p.total_slots) return;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kActColumns;
  if (c0 >= p.inter) return;
  const int64_t s = p.sorted_slots[r];
  const float* u = p.u + (p.u_sorted ? r : s) * (p.gated ? 2 : 1) * p.inter;  // [gate | up], this row
  // Whole 16-byte vectors: the chunk inside the row and every row 16-byte aligned.
  const bool vec = p.inter % 4 == 0 && c0 + kActColumns <= p.inter;
  float g[kActColumns], up[kActColumns] = {};
  if (vec) {
#pragma unroll
    for (int i = 0; i < kActColumns; i += 4) {
      const float4 a = *reinterpret_cast<const float4*>(u + c0 + i);
      g[i] = a.x, g[i + 1] = a.y, g[i + 2] = a.z, g[i + 3] = a.w;
      if (p.gated) {
        const float4 b = *reinterpret_cast<const float4*>(u + p.inter + c0 + i);
        up[i] = b.x, up[i + 1] = b.y, up[i + 2] = b.z, up[i + 3] = b.w;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kActColumns; ++i) {
      const bool in = c0 + i < p.inter;
      g[i] = in ? u[c0 + i] : 0.0f;
      if (p.gated) up[i] = in ? u[p.inter + c0 + i] : 0.0f;
    }
  }
  float a[kActColumns];
#pragma unroll
  for (int i = 0; i < kActColumns; ++i) a[i] = rounded_activation(p, g[i], up[i]);
  float* act = p.act + s * p.inter + c0;
  if (vec) {
#pragma unroll
    for (int i = 0; i < kActColumns; i += 4) *reinterpret_cast<float4*>(act + i) = {a[i], a[i + 1], a[i + 2], a[i + 3]};
  } else {
    for (int i = 0; i < kActColumns && c0 + i < p.inter; ++i) act[i] = a[i];
  }
  if (!p.act16) return;
  uint16_t* act16 = p.act16 + s * p.inter;  // whole groups of 8 (p.inter % 8 == 0 where act16 is used)
  if (vec && p.inter % 8 == 0) {
    // permuted_col's order t0 t4 t1 t5 t2 t6 t3 t7: word j holds columns j and j + 4.
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = bits16(a[j], p.dtype_kind) | static_cast<uint32_t>(bits16(a[j + 4], p.dtype_kind)) << 16;
    *reinterpret_cast<uint4*>(act16 + c0) = {w[0], w[1], w[2], w[3]};
  } else {
    for (int i = 0; i < kActColumns && c0 + i < p.inter; ++i) act16[permuted_col(c0 + i)] = bits16(a[i], p.dtype_kind);
  }
}

// The prefill path's GEMM2 input in one pass: sorted row r of u (the prefill GEMM1 output) ->
// activation (rounded_activation) -> 8-bit codes with the row's scale (RowQuant) -> row r
// of the prefill GEMM's input. Four columns per thread and
// step (inter % 4 == 0); the activation row waits in shared memory between amax and quantization.

// Four values exact in the 16-bit kind (0 BF16, 1 F16), as their bits.
__device__ uint2 bits16x4(float4 a, int kind) {
  return {bits16(a.x, kind) | static_cast<uint32_t>(bits16(a.y, kind)) << 16,
          bits16(a.z, kind) | static_cast<uint32_t>(bits16(a.w, kind)) << 16};
}

// A row's 8-bit activation quantization (as fake_quant_kernel): FP8 per token (kind 1) or static
// (3), or INT8 per token (5). code() gives the byte of the GEMM's fp8 e4m3 or int8 input.
struct RowQuant {
  int kind;
  float scale, inv;
  __device__ RowQuant(const ActQuantParams& q, float amax) : kind(q.kind) {
    scale = kind == 5 ? quant::int8_dynamic_scale(amax) : kind == 1 ? quant::fp8_dynamic_scale(amax) : q.static_scale;
    inv = div_rn(1.0f, scale);
  }
  __device__ uint32_t code(float v) const {
    if (kind == 5) return static_cast<uint8_t>(static_cast<int8_t>(quant::quantize_int8_act(v, scale)));
    return quant::quantize_fp8_act(v, inv);
  }
  __device__ uint32_t codes4(float4 a) const {
    if (kind == 5) return code(a.x) | code(a.y) << 8 | code(a.z) << 16 | code(a.w) << 24;
    // quantize_fp8_act of each, with the hardware conversion
    return fp8x4_sat_hw(mul_rn(a.x, inv), mul_rn(a.y, inv), mul_rn(a.z, inv), mul_rn(a.w, inv));
  }
  // The code of v as a bf16 value (exact: fp8 e4m3 values and integers in [-128, 127] fit bf16).
  __device__ uint32_t bf16_code(float v) const {
    const uint32_t c = code(v);
    return quant::float_to_bf16(kind == 5 ? static_cast<float>(static_cast<int8_t>(c)) : quant::fp8e4m3_to_float(c));
  }
  __device__ uint2 bf16_codes4(float4 a) const {
    return {bf16_code(a.x) | bf16_code(a.y) << 16, bf16_code(a.z) | bf16_code(a.w) << 16};
  }
};

// FP8 per-token-group quantization of one group with absolute maximum `amax`, as fake_quant_kernel's
// kind 4 computes it: scale = max(amax, 1e-10) / 448, code = fp8(v / scale).
struct GroupQuant {
  float scale;
  __device__ explicit GroupQuant(float amax) : scale(div_rn(fmaxf(amax, 1e-10f), quant::kFp8E4M3Max)) {}
  // quant::float_to_fp8e4m3_sat(v / scale) of each, with the hardware conversion
  __device__ uint32_t codes4(float4 a) const {
    return fp8x4_sat_hw(div_rn(a.x, scale), div_rn(a.y, scale), div_rn(a.z, scale), div_rn(a.w, scale));
  }
};
inline constexpr int kFusedGroup = 128;  // the group size the fused row kernels quantize in

__device__ float abs_max4(float4 a) { return fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))); }

// The activation row kept for the quantization pass: fp32 values, or their 16-bit bits where the
// forward rounds them to the model's 16-bit dtype anyway (exact, and half the shared memory).
template <bool kHalfRow>
struct ActRow {
  float4* row;  // [inter / 4] float4, or [inter / 4] uint2 (kHalfRow)
  int kind;     // the 16-bit kind (0 BF16, 1 F16) of a half row
  __device__ void store(int64_t i, float4 a) const {
    if constexpr (kHalfRow) reinterpret_cast<uint2*>(row)[i] = bits16x4(a, kind);
    else row[i] = a;
  }
  __device__ float4 load(int64_t i) const {
    if constexpr (!kHalfRow) return row[i];
    const uint2 b = reinterpret_cast<const uint2*>(row)[i];
    auto value = [&](uint32_t bits16) {
      return kind == 0 ? __uint_as_float(bits16 << 16) : __half2float(__ushort_as_half(static_cast<uint16_t>(bits16)));
    };
    return {value(b.x & 0xFFFFu), value(b.x >> 16), value(b.y & 0xFFFFu), value(b.y >> 16)};
  }
};

// Four blocks per SM (64 registers; half rows keep Mixtral's 14336-wide row at 28 KB): the kernel
// is latency-bound (H200, Mixtral FP8 at 8192 tokens, before the hardware conversions: 42% of the
// SM's issue rate, 17% of DRAM bandwidth, 2 blocks per SM at 92 registers).
template <bool kHalfRow>
__global__ void __launch_bounds__(kThreads, 4)
    activation_rows_kernel(ActivationParams p, ActQuantParams q, void* a_rows, float* a_scale_rows) {
  chain_start();
  extern __shared__ float4 act_smem[];  // the activation row (8-bit rows only)
  const ActRow<kHalfRow> act_row{act_smem, p.dtype_kind};
  const bool rows16 = q.kind == 0;     // unquantized: the rounded activation's 16-bit bits
  const int r = blockIdx.x;
  if (r >= *p.total_slots) return;
  const int64_t n4 = p.inter / 4;
  const float4* g4 = reinterpret_cast<const float4*>(p.u + r * (p.gated ? 2 : 1) * p.inter);  // [n4], sorted order
  const float4* up4 = g4 + n4;
  // Batches of kActBatch chunks per thread: their loads all go out before the math (the
  // compiler does not hoist them across the activation's branches by itself).
  constexpr int kActBatch = 4;
  float m = 0.0f;
  for (int64_t i0 = threadIdx.x; i0 < n4; i0 += kActBatch * blockDim.x) {
    float4 g[kActBatch], up[kActBatch];
#pragma unroll
    for (int b = 0; b < kActBatch; ++b) {
      const int64_t i = i0 + b * blockDim.x;
      if (i < n4) {
        g[b] = g4[i];
        up[b] = p.gated ? up4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int b = 0; b < kActBatch; ++b) {
      const int64_t i = i0 + b * blockDim.x;
      if (i >= n4) break;
      const float4 a = {rounded_activation(p, g[b].x, up[b].x), rounded_activation(p, g[b].y, up[b].y),
                        rounded_activation(p, g[b].z, up[b].z), rounded_activation(p, g[b].w, up[b].w)};
      if (rows16) {
        reinterpret_cast<uint2*>(static_cast<uint16_t*>(a_rows) + r * p.inter)[i] = bits16x4(a, p.dtype_kind);
        continue;
      }
      act_row.store(i, a);
      m = fmaxf(m, abs_max4(a));
    }
  }
  if (rows16) return;  // uniform over the block
  if (q.kind == 4) {    // FP8 per group of 128 columns: one warp per group (32 chunks of 4)
    __syncthreads();    // act_row
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t groups = p.inter / kFusedGroup;
    uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(a_rows) + r * p.inter);  // [n4]
    for (int64_t g = warp; g < groups; g += blockDim.x / 32) {
      const float4 a = act_row.load(g * 32 + lane);
      float gm = abs_max4(a);
      for (int o = 16; o > 0; o >>= 1) gm = fmaxf(gm, __shfl_xor_sync(0xffffffffu, gm, o));
      const GroupQuant gq(gm);
      out[g * 32 + lane] = gq.codes4(a);
      if (lane == 0) a_scale_rows[r * groups + g] = gq.scale;
    }
    return;
  }
  const RowQuant rq(q, block_amax(m));  // block_amax's barrier also publishes act_row
  if (q.bf16_rows) {
    uint2* out = reinterpret_cast<uint2*>(static_cast<uint16_t*>(a_rows) + r * p.inter);  // [n4]
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) out[i] = rq.bf16_codes4(act_row.load(i));
  } else {
    uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(a_rows) + r * p.inter);  // [n4]
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) out[i] = rq.codes4(act_row.load(i));
  }
  if (threadIdx.x == 0) a_scale_rows[r] = rq.scale;
}

// The prefill path's GEMM1 input in one pass: token t's hidden row -> x as convert_kernel computes
// it -> 8-bit codes with the row's scale (RowQuant) -> the sorted row
// of each of its local slots. Eight columns per thread and step (hidden % 8 == 0); the row is read
// twice (amax, then codes), the second time from L2.
__device__ void load_input8(const InputRowsParams& p, int64_t t, int64_t c8, float v[8]) {
  const int64_t i = t * p.hidden + 8 * c8;
  if (p.dtype_kind == 2) {
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(p.hidden_states) + i);
    const float4 a = src[0], b = src[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    const uint4 chunk = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.hidden_states) + i);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&chunk);
    for (int j = 0; j < 8; ++j) v[j] = p.dtype_kind == 0 ? quant::bf16_to_float(h[j]) : quant::f16_to_float(h[j]);
  }
  if (p.router_weights)
    for (int j = 0; j < 8; ++j) v[j] = round_kind(mul_rn(v[j], p.router_weights[t]), p.dtype_kind, p.round);
}

__global__ void input_rows_kernel(InputRowsParams p) {
  chain_start();
  __shared__ int64_t dest[kMaxTopK];  // sorted rows of the token's local slots
  __shared__ int num_dest;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int j = 0; j < p.top_k; ++j) {
      const int64_t s = t * p.top_k + j;
      if (p.slot_expert[s] >= 0) dest[n++] = p.slot_position[s];
    }
    num_dest = n;
  }
  const int64_t n8 = p.hidden / 8;
  if (p.q.kind == 0) {  // unquantized: the 16-bit values themselves
    __syncthreads();    // dest and num_dest
    for (int64_t c8 = threadIdx.x; c8 < n8; c8 += blockDim.x) {
      float v[8];
      load_input8(p, t, c8, v);
      const uint2 lo = bits16x4(make_float4(v[0], v[1], v[2], v[3]), p.dtype_kind);
      const uint2 hi = bits16x4(make_float4(v[4], v[5], v[6], v[7]), p.dtype_kind);
      for (int d = 0; d < num_dest; ++d)
        reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.a_rows) + dest[d] * p.hidden)[c8] = {lo.x, lo.y, hi.x, hi.y};
    }
    return;
  }
  if (p.q.kind == 4) {  // FP8 per group of 128 columns: 16 threads per group, one pass
    __syncthreads();     // dest and num_dest
    const int lane = threadIdx.x % 32;
    const int64_t groups = p.hidden / kFusedGroup;
    // Whole warps per step (hidden % 128 == 0: each half-warp is one group, wholly in or out).
    for (int64_t base = threadIdx.x - lane; base < n8; base += blockDim.x) {
      const int64_t c8 = base + lane;
      float v[8] = {};
      if (c8 < n8) load_input8(p, t, c8, v);
      float gm = fmaxf(abs_max4(make_float4(v[0], v[1], v[2], v[3])), abs_max4(make_float4(v[4], v[5], v[6], v[7])));
      for (int o = kFusedGroup / 16; o > 0; o >>= 1) gm = fmaxf(gm, __shfl_xor_sync(0xffffffffu, gm, o));
      if (c8 >= n8) continue;
      const GroupQuant gq(gm);
      const uint2 codes = {gq.codes4(make_float4(v[0], v[1], v[2], v[3])), gq.codes4(make_float4(v[4], v[5], v[6], v[7]))};
      for (int d = 0; d < num_dest; ++d) {
        reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.a_rows) + dest[d] * p.hidden)[c8] = codes;
        if (c8 % (kFusedGroup / 8) == 0) p.a_scale_rows[dest[d] * groups + c8 / (kFusedGroup / 8)] = gq.scale;
      }
    }
    return;
  }
  float m = 0.0f;
  for (int64_t c8 = threadIdx.x; c8 < n8; c8 += blockDim.x) {
    float v[8];
    load_input8(p, t, c8, v);
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
  }
  const RowQuant rq(p.q, block_amax(m));  // block_amax's barriers also publish dest and num_dest
  for (int64_t c8 = threadIdx.x; c8 < n8; c8 += blockDim.x) {
    float v[8];
    load_input8(p, t, c8, v);
    if (p.q.bf16_rows) {
      const uint2 lo = rq.bf16_codes4(make_float4(v[0], v[1], v[2], v[3]));
      const uint2 hi = rq.bf16_codes4(make_float4(v[4], v[5], v[6], v[7]));
      for (int d = 0; d < num_dest; ++d)
        reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.a_rows) + dest[d] * p.hidden)[c8] = {lo.x, lo.y, hi.x, hi.y};
      continue;
    }
    const uint2 codes = {rq.codes4(make_float4(v[0], v[1], v[2], v[3])), rq.codes4(make_float4(v[4], v[5], v[6], v[7]))};
    for (int d = 0; d < num_dest; ++d)
      reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.a_rows) + dest[d] * p.hidden)[c8] = codes;
  }
  if (threadIdx.x < num_dest) p.a_scale_rows[dest[threadIdx.x]] = rq.scale;
}

// ---- combine ------------------------------------------------------------------------------------

// Block (t, c): token t, columns [c * kCombineBlock * 4, +kCombineBlock * 4); each thread sums 4
// consecutive columns over the token's slots, reading each slot's expert, weight and row once and
// y in 16-byte pieces where rows and pointers allow. The same products and sums, in the same
// order, as one column at a time. Slots go in batches of kCombineBatch: the batch's experts, then
// its rows and weights, then its values are loaded before any sum, three dependent round trips a
// batch instead of three a slot (a 1-token forward's combine is latency, not bandwidth).
constexpr int kCombineBlock = 128, kCombineColumns = 4, kCombineBatch = 8;
__global__ void combine_kernel(CombineParams p) {
  chain_start();
  const int64_t t = blockIdx.x;
  const int64_t h0 = (int64_t{blockIdx.y} * kCombineBlock + threadIdx.x) * kCombineColumns;
  if (h0 >= p.hidden) return;
  const int cols = p.hidden - h0 < kCombineColumns ? static_cast<int>(p.hidden - h0) : kCombineColumns;
  auto aligned = [](const void* q, int bytes) { return reinterpret_cast<uintptr_t>(q) % bytes == 0; };
  const bool vector = p.hidden % kCombineColumns == 0 && aligned(p.out, 16) &&
                      (p.terms != nullptr ? aligned(p.terms, 8) : aligned(p.y, 16)) &&
                      (p.busy_terms == nullptr || aligned(p.busy_terms, 8));  // (cols == 4)
  float acc[kCombineColumns] = {};
  for (int j0 = 0; j0 < p.top_k; j0 += kCombineBatch) {
    const int64_t s0 = t * p.top_k + j0;  // the batch's first slot
    int e[kCombineBatch];  // local expert of slot s0 + i, -1 for none (or past the token's slots)
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) e[i] = j0 + i < p.top_k ? p.slot_expert[s0 + i] : -1;
    const uint16_t* term_rows[kCombineBatch];  // bf16(w * y) rows of the slot's path, or null: y
    int64_t row[kCombineBatch];
    float w[kCombineBatch];
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      const int64_t s = s0 + i;
      const bool busy = e[i] >= 0 && p.busy_counts != nullptr && p.busy_counts[e[i]] > 0;  // (the hybrid's register kernel)
      term_rows[i] = busy ? p.busy_terms : p.terms;
      row[i] = e[i] >= 0 && (busy || (p.slot_position && !p.busy_counts)) ? p.slot_position[s] : s;
      w[i] = e[i] >= 0 && term_rows[i] == nullptr && !p.weight_on_input ? p.weights[s] : 1.0f;
    }
    float v[kCombineBatch][kCombineColumns];
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      if (e[i] < 0) continue;
      if (term_rows[i] != nullptr) {  // already bf16(w * y)
        const uint16_t* terms = term_rows[i] + row[i] * p.hidden + h0;  // [cols]
        if (vector) {
          const uint2 q = *reinterpret_cast<const uint2*>(terms);
          v[i][0] = quant::bf16_to_float(static_cast<uint16_t>(q.x));
          v[i][1] = quant::bf16_to_float(static_cast<uint16_t>(q.x >> 16));
          v[i][2] = quant::bf16_to_float(static_cast<uint16_t>(q.y));
          v[i][3] = quant::bf16_to_float(static_cast<uint16_t>(q.y >> 16));
        } else {
#pragma unroll
          for (int c = 0; c < kCombineColumns; ++c) v[i][c] = c < cols ? quant::bf16_to_float(terms[c]) : 0.0f;
        }
        continue;
      }
      const float* y = p.y + row[i] * p.hidden + h0;  // [cols]
      if (vector) {
        const float4 q = *reinterpret_cast<const float4*>(y);
        v[i][0] = q.x, v[i][1] = q.y, v[i][2] = q.z, v[i][3] = q.w;
      } else {
#pragma unroll
        for (int c = 0; c < kCombineColumns; ++c) v[i][c] = c < cols ? y[c] : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      if (e[i] < 0) continue;
#pragma unroll
      for (int c = 0; c < kCombineColumns; ++c)
        acc[c] = add_rn(acc[c], term_rows[i] != nullptr ? v[i][c] : round_kind(mul_rn(w[i], v[i][c]), p.dtype_kind, p.round));
    }
  }
  float* out = p.out + t * p.hidden + h0;  // [cols]
#pragma unroll
  for (int c = 0; c < kCombineColumns; ++c) acc[c] = round_kind(acc[c], p.dtype_kind, p.round);
  if (vector) {
    *reinterpret_cast<float4*>(out) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  } else {
    for (int c = 0; c < cols; ++c) out[c] = acc[c];
  }
}

// ---- prefill: rows sorted by expert -------------------------------------------------------------

// One block per sorted row; each thread moves 8 columns (one 16-byte chunk of the permuted input).
__global__ void gather_rows_kernel(GatherParams p) {
  chain_start();
  const int r = blockIdx.x;
  if (r >= *p.total_rows) return;
  const int64_t slot = p.sorted_slots[r];
  if (p.busy_counts != nullptr && p.busy_counts[p.slot_expert[slot]] == 0) return;
  const int64_t row = p.by_token ? slot / p.top_k : slot;
  if (p.in_scale)
    for (int64_t j = threadIdx.x; j < p.scales_per_row; j += blockDim.x)
      p.a_scale_rows[r * p.scales_per_row + j] = p.in_scale[row * p.scales_per_row + j];
  const uint4* src = reinterpret_cast<const uint4*>(p.in16 + row * p.k);  // [k / 8] chunks
  for (int64_t c = threadIdx.x; c < p.k / 8; c += blockDim.x) {
    const uint4 chunk = src[c];
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&chunk);  // t0 t4 t1 t5 t2 t6 t3 t7
    uint16_t natural[8];
    for (int t = 0; t < 8; ++t) natural[t] = h[t < 4 ? 2 * t : 2 * t - 7];
    if (p.out_kind == 0) {
      reinterpret_cast<uint4*>(p.a_rows)[r * (p.k / 8) + c] = *reinterpret_cast<const uint4*>(natural);
    } else if (p.out_kind == 3) {  // codes are exact in bf16 (fp8 e4m3 values, integers in [-128, 127])
      for (int t = 0; t < 8; ++t) natural[t] = quant::float_to_bf16(quant::f16_to_float(natural[t]));
      reinterpret_cast<uint4*>(p.a_rows)[r * (p.k / 8) + c] = *reinterpret_cast<const uint4*>(natural);
    } else {
      uint8_t bytes[8];  // f16 codes are exact fp8 e4m3 values or integers in [-128, 127]
      for (int t = 0; t < 8; ++t) {
        const float code = quant::f16_to_float(natural[t]);
        bytes[t] = p.out_kind == 1 ? quant::float_to_fp8e4m3(code) : static_cast<uint8_t>(static_cast<int8_t>(code));
      }
      reinterpret_cast<uint2*>(p.a_rows)[r * (p.k / 8) + c] = *reinterpret_cast<const uint2*>(bytes);
    }
  }
}

__global__ void grouped_setup_kernel(GroupedSetupParams p, DequantBatch batch) {
  chain_start();
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.groups) return;
  const int64_t m0 = p.expert_offsets[e];
  int32_t m = p.expert_offsets[e + 1] - static_cast<int32_t>(m0);
  if (batch.b_rows) {  // a batch of dequantized experts
    if (e < batch.begin || e >= batch.end) m = 0;
    else p.buf.b[e] = static_cast<const char*>(batch.b_rows) + (e - batch.begin) * batch.b_group_bytes;
  }
  p.buf.problem_mnk[3 * e] = p.transposed ? static_cast<int32_t>(p.n) : m;
  p.buf.problem_mnk[3 * e + 1] = p.transposed ? m : static_cast<int32_t>(p.n);
  p.buf.problem_mnk[3 * e + 2] = static_cast<int32_t>(p.k);
  p.buf.a[e] = static_cast<const char*>(p.a_rows) + m0 * p.k * p.elem_bytes;
  if (p.terms_rows != nullptr) p.buf.d[e] = p.terms_rows + m0 * p.n;
  else p.buf.d[e] = p.d_rows + m0 * p.n;
  if (p.buf.a_scale) p.buf.a_scale[e] = p.a_scale_rows + m0 * p.scales_per_row;
  if (p.buf.row_weight && p.row_weights) p.buf.row_weight[e] = p.row_weights + m0;
}

__global__ void sorted_row_weights_kernel(const float* slot_weights, const int32_t* sorted_slots,
                                          const int32_t* total_rows, float* row_weights) {
  chain_start();
  const int rows = *total_rows;
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
    row_weights[r] = slot_weights[sorted_slots[r]];
}

// An e2m1 nibble's value, as quant::e2m1_to_float (m / 2, or (1 + m / 2) * 2^(e - 1)) built from
// its bits instead of ldexpf.
__device__ __forceinline__ float e2m1_value(uint32_t nibble) {
  const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  const uint32_t magnitude = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
  return __uint_as_float(magnitude | ((nibble & 8u) << 28));
}

// x (|x| < 2^22) as a float, exactly, without a conversion: 1.5 * 2^23 + x keeps the exponent of
// 1.5 * 2^23 for negative x too, so its mantissa holds x.
__device__ __forceinline__ float small_int_value(int x) { return __int_as_float(0x4B400000 + x) - 12582912.0f; }

// RNE_bf16(lo), RNE_bf16(hi) in one word (lo in the low half), in one conversion instruction: the
// bits of quant::float_to_bf16 for every input but NaNs, whose payload may differ.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Weights [col, col + 8) of one row as bf16 (kF16: f16) bits (pairs in 32-bit words), each the value
// the CPU's dequantization gives, element by element through `dequant` (weight_access.cuh): the
// layouts that the chunk-wise path below does not take (act order, groups not a multiple of 8).
template <bool kF16>
__device__ uint4 dequantize8(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col) {
  uint32_t h[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float v = dequant(L, w, row, col + j);
    h[j] = kF16 ? quant::float_to_f16(v) : quant::float_to_bf16(v);
  }
  return make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
}

// Bit-level dequantization for the common layouts: pairs of weights as bf16x2, each the CPU's bf16.
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t bits) {
  __nv_bfloat162 v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// The e2m1 codes of 4 nibbles (bits 0-15 of `nibbles`, the even column's lowest) as bf16 pairs
// (p01: columns 0, 1; p23: 2, 3), exactly: each magnitude's two bytes looked up with byte permutes
// (0, 0.5, 1, 1.5, 2, 3, 4, 6 = 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0),
// then the sign bits moved to bit 15 / 31.
__device__ __forceinline__ void e2m1x4_bf16(uint32_t nibbles, uint32_t& p01, uint32_t& p23) {
  const uint32_t magnitudes = nibbles & 0x7777u;
  const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, magnitudes);
  const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, magnitudes);
  p01 = __byte_perm(lo, hi, 0x5140u) | ((nibbles << 12) & 0x8000u) | ((nibbles << 24) & 0x80000000u);
  p23 = __byte_perm(lo, hi, 0x7362u) | ((nibbles << 4) & 0x8000u) | ((nibbles << 16) & 0x80000000u);
}

// 8 columns' codes and their scale, loaded before any arithmetic so that a thread has all its loads
// in flight at once.
struct Codes8 {
  uint2 bits{};              // the codes: e2m1 / int4 in bits.x; 8-bit codes in x and y
  float scale = 0;           // scale_at (integer and FP8 codes)
  uint32_t scale_code = 0;   // the FP4 formats' scale byte (e8m0 / fp8 e4m3)
  int zero = 0;
};

// Columns per scale along a row: the group or block width; 0 for tensor and channel scales.
__device__ __forceinline__ int group_columns(const WeightLayout& L) {
  if (L.strategy == kTensor || L.strategy == kChannel) return 0;
  return static_cast<int>(L.strategy == kBlock ? L.block_cols : L.group_size);
}

// Whether 8-column chunks of this layout take the chunk-wise conversions: the common formats, no act
// order, every chunk inside one group (f16 output: integer and FP8 codes with f16 scales).
template <bool kF16>
__device__ __forceinline__ bool common_chunks(const WeightLayout& L, const ExpertTensors& w) {
  const bool to_out = L.round_to_scale_dtype && L.scale_kind == (kF16 ? 1 : 0);
  const bool format = (L.format == kIntPacked && (L.bits == 4 || L.bits == 8) && to_out) ||
                      (L.format == kIntUnpacked && to_out) || (L.format == kFp8 && to_out) ||
                      (!kF16 && (L.format == kMxfp4 || L.format == kNvfp4));
  return format && !w.g_idx && group_columns(L) % 8 == 0;
}

// The codes and scale of the chunk at (row, col) (layouts of common_chunks only); `group_shift`:
// log2 of group_columns where it is a power of two, else -1.
__device__ __forceinline__ Codes8 load_codes8(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col,
                                              int group_shift) {
  Codes8 c;
  const int g = group_columns(L) == 0 ? 0
                : group_shift >= 0    ? static_cast<int>(col) >> group_shift
                                      : static_cast<int>(col) / group_columns(L);
  if (L.format == kMxfp4 || L.format == kNvfp4) {
    c.bits.x = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w.data) + row * (L.cols / 2) + col / 2);
    c.scale_code = static_cast<const uint8_t*>(w.scale)[row * L.scale_cols + g];
    return c;
  }
  if (L.format == kIntPacked && L.bits == 4) {
    c.bits.x = static_cast<const uint32_t*>(w.data)[row * L.words_per_row + col / 8];
  } else if (L.format == kIntPacked) {
    c.bits = *reinterpret_cast<const uint2*>(static_cast<const uint32_t*>(w.data) + row * L.words_per_row + col / 4);
  } else {  // 8-bit codes, one byte each
    c.bits = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.data) + row * L.cols + col);
  }
  c.scale = scale_at(L, w, row, g);
  if (L.format != kFp8) c.zero = zero_point_at(L, w, row, g);
  return c;
}

// The 8 bf16s of loaded codes (pairs in 32-bit words, even column low), the CPU's bits but NaN
// payloads. Products that are exact in bf16, or that overflow to the same infinity in fp32 and
// bf16, take bf16x2 arithmetic (the _rn forms: never contracted into an FMA); those that could be
// subnormal or NaN-producing take the float path, whose RNE is the CPU's.
// With kF16 (integer and FP8 codes only), the float path with one RNE to f16, as the CPU's rounding
// to an f16 scale dtype: (q - z) * s and fp8 * s are exact in fp32 (at most 20 significant bits).
template <bool kF16>
__device__ __forceinline__ uint4 convert_codes8(const WeightLayout& L, const ExpertTensors& w, const Codes8& c) {
  uint32_t p[4];
  if (!kF16 && (L.format == kMxfp4 || L.format == kNvfp4)) {
    const uint32_t sb = c.scale_code;
    // bf16 scale exactly: MXFP4 2^(sb - 127) (products are normal from sb 2; from sb 253 they may
    // reach 2^128, +-inf in fp32 as in bf16; 255 is +inf), NVFP4 scaled in fp32: fp8(s) (e2m1 * fp8
    // fits bf16's 8 bits; 0x7F is NaN).
    uint32_t s_bits = 0;
    if (L.format == kMxfp4 && sb >= 2 && sb != 255) {
      s_bits = sb << 7;
    } else if (L.format == kNvfp4 && !L.round_to_scale_dtype && (sb & 0x7Fu) != 0x7Fu) {
      s_bits = __bfloat16_as_ushort(__float2bfloat16_rn(quant::fp8e4m3_to_float(static_cast<uint8_t>(sb))));  // exact
    } else {
      // RNE_bf16(e2m1 * scale) in fp32, the scale as formats.h computes it (NVFP4 rounded to bf16:
      // fp8(s) / global first).
      const float scale = L.format == kMxfp4          ? quant::e8m0_to_float(static_cast<uint8_t>(sb))
                          : L.round_to_scale_dtype    ? __fdiv_rn(quant::fp8e4m3_to_float(static_cast<uint8_t>(sb)), w.global_scale)
                                                      : quant::fp8e4m3_to_float(static_cast<uint8_t>(sb));
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(e2m1_value(c.bits.x >> (4 * j)), scale);
      return make_uint4(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]), bf16x2_bits(v[4], v[5]), bf16x2_bits(v[6], v[7]));
    }
    const __nv_bfloat162 s2 = as_bf16x2(s_bits | (s_bits << 16));
    e2m1x4_bf16(c.bits.x & 0xFFFFu, p[0], p[1]);
    e2m1x4_bf16(c.bits.x >> 16, p[2], p[3]);
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = bits_of(__hmul2_rn(as_bf16x2(p[j]), s2));
    return make_uint4(p[0], p[1], p[2], p[3]);
  }
  const bool int4 = L.format == kIntPacked && L.bits == 4;
  if (!kF16 && int4 && fabsf(c.scale) >= 0x1p-100f && fabsf(c.scale) <= 0x1p100f && c.zero >= -64 && c.zero <= 64) {
    // Device codes are t = u ^ 8 (q = u - 8). 128 + u is exact in bf16 (0x4300 | u); minus 136 + z
    // gives q - z exactly, then one rounding: RNE_bf16((q - z) * s), as quant::dequant_int. Only for
    // normal, finite products.
    const __nv_bfloat162 s2 = __float2bfloat162_rn(c.scale), off2 = __float2bfloat162_rn(136.0f + c.zero);  // exact
    const uint32_t u = c.bits.x ^ 0x88888888u;
    p[0] = (u & 0xFu) | ((u << 12) & 0xF0000u);
    p[1] = ((u >> 8) & 0xFu) | ((u << 4) & 0xF0000u);
    p[2] = ((u >> 16) & 0xFu) | ((u >> 4) & 0xF0000u);
    p[3] = ((u >> 24) & 0xFu) | ((u >> 12) & 0xF0000u);
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = bits_of(__hmul2_rn(__hsub2_rn(as_bf16x2(p[j] | 0x43004300u), off2), s2));
    return make_uint4(p[0], p[1], p[2], p[3]);
  }
  float v[8];
  if (L.format == kFp8) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      v[j] = __fmul_rn(quant::fp8e4m3_to_float(((j < 4 ? c.bits.x : c.bits.y) >> (8 * (j % 4))) & 0xFF), c.scale);
  } else {
    // (q - z) * s, as quant::dequant_int before its rounding. Device int4 codes are t = u ^ 8, so q =
    // (t ^ 8) - 8; a byte of 8-bit codes read as int8 is q (packed device codes are u ^ 128).
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int q = int4 ? static_cast<int>(((c.bits.x >> (4 * j)) & 0xFu) ^ 8u) - 8
                         : static_cast<int8_t>(static_cast<uint8_t>(((j < 4 ? c.bits.x : c.bits.y) >> (8 * (j % 4))) & 0xFF));
      v[j] = __fmul_rn(small_int_value(q - c.zero), c.scale);
    }
  }
  if constexpr (kF16) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      p[j] = quant::float_to_f16(v[2 * j]) | static_cast<uint32_t>(quant::float_to_f16(v[2 * j + 1])) << 16;
    return make_uint4(p[0], p[1], p[2], p[3]);
  }
  return make_uint4(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]), bf16x2_bits(v[4], v[5]), bf16x2_bits(v[6], v[7]));
}

constexpr int kDequantThreads = 256;
constexpr int kDequantChunksPerThread = 4;  // 8-column chunks, kDequantThreads apart: coalesced stores

// An expert's [rows, chunks] 8-column chunks flattened, so every block is full whatever the row
// length (Kimi-K2 TP8's down projection has 32 chunks per row); row = i / chunks as
// (i * multiplier) >> shift (exact for i < 2^31: multiplier = ceil(2^shift / chunks), shift = 31 +
// ceil(log2 chunks)).
struct ChunkDivider {
  uint32_t chunks = 1;
  uint64_t multiplier = 1;
  int shift = 0;
};

// grid x: the flattened chunks / (kDequantThreads * kDequantChunksPerThread), y: experts of the
// batch. Each thread loads the codes of its kDequantChunksPerThread chunks first, then converts and
// stores them.
template <bool kF16>
__global__ void __launch_bounds__(kDequantThreads) dequantize_kernel(DequantParams p, ChunkDivider div) {
  const WeightLayout& L = p.layout;
  const int e = p.first + static_cast<int>(blockIdx.y);
  if (p.expert_offsets[e] == p.expert_offsets[e + 1]) return;  // no slots: not read by the GEMM
  const ExpertTensors w = p.experts[e];
  const uint32_t total = static_cast<uint32_t>(L.rows) * div.chunks;
  const uint32_t first = blockIdx.x * (kDequantThreads * kDequantChunksPerThread) + threadIdx.x;
  const int group_size = group_columns(L);
  const int group_shift = group_size > 0 && (group_size & (group_size - 1)) == 0 ? __ffs(group_size) - 1 : -1;
  uint4* out = reinterpret_cast<uint4*>(p.out) + static_cast<int64_t>(blockIdx.y) * total;
  uint32_t rows[kDequantChunksPerThread], cols[kDequantChunksPerThread];
#pragma unroll
  for (int k = 0; k < kDequantChunksPerThread; ++k) {
    const uint32_t i = first + k * kDequantThreads;
    rows[k] = static_cast<uint32_t>((i * div.multiplier) >> div.shift);
    cols[k] = (i - rows[k] * div.chunks) * 8;
  }
  if (!common_chunks<kF16>(L, w)) {  // the rest: element by element
#pragma unroll
    for (int k = 0; k < kDequantChunksPerThread; ++k) {
      const uint32_t i = first + k * kDequantThreads;
      if (i < total) out[i] = dequantize8<kF16>(L, w, rows[k], cols[k]);
    }
    return;
  }
  Codes8 codes[kDequantChunksPerThread];
#pragma unroll
  for (int k = 0; k < kDequantChunksPerThread; ++k)
    if (first + k * kDequantThreads < total) codes[k] = load_codes8(L, w, rows[k], cols[k], group_shift);
#pragma unroll
  for (int k = 0; k < kDequantChunksPerThread; ++k) {
    const uint32_t i = first + k * kDequantThreads;
    if (i < total) out[i] = convert_codes8<kF16>(L, w, codes[k]);
  }
}

// Blocks take sorted output rows in turn (each row's expert looked up once), threads 4 columns each.
__global__ void finish_expert_rows_kernel(ExpertRowsParams p) {
  const int rows = *p.total_rows;
  const int quads = static_cast<int>(p.n / 4);
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const ExpertTensors& w = p.experts[p.slot_expert[p.sorted_slots[row]]];
    const float global = w.global_scale;
    const float* bias = w.bias;
    float4* d = reinterpret_cast<float4*>(p.d_rows + static_cast<int64_t>(row) * p.n);
    for (int q = threadIdx.x; q < quads; q += blockDim.x) {
      float4 v4 = d[q];
      float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (p.divide_by_global) v[j] = __fdiv_rn(v[j], global);
        if (bias) v[j] += bias[4 * q + j];
      }
      d[q] = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

__global__ void expand_column_scales_kernel(WeightLayout L, const ExpertTensors* experts, int num_experts, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_experts * L.rows) return;
  out[i] = scale_at(L, experts[i / L.rows], i % L.rows, 0);
}

// One thread per (expert, block row, block column) of the [experts, block_rows_n, block_cols_n] output.
__global__ void block_scales_kernel(WeightLayout L, const ExpertTensors* experts, int num_experts, int64_t row_blocks,
                                    int64_t col_blocks, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_experts * row_blocks * col_blocks) return;
  const int64_t e = i / (row_blocks * col_blocks), rb = i / col_blocks % row_blocks, cb = i % col_blocks;
  out[i] = scale_at(L, experts[e], rb * L.block_rows, cb);
}

__global__ void codes_to_signed_kernel(int32_t* words, int64_t num_words, uint32_t sign_bits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    words[i] ^= static_cast<int32_t>(sign_bits);
}

// One thread per output scale of the [experts, groups, rows] bf16 (f16) array.
__global__ void group_scales_kernel(WeightLayout L, const ExpertTensors* experts, int num_experts, int64_t groups,
                                    bool f16, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_experts * groups * L.rows) return;
  const int64_t e = i / (groups * L.rows), g = i / L.rows % groups, row = i % L.rows;
  const float s = scale_at(L, experts[e], row, g);
  out[i] = f16 ? quant::float_to_f16(s) : quant::float_to_bf16(s);
}

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_routing(const RoutingParams& p, cudaStream_t stream) {
  if (p.top_k > kMaxTopK || p.num_expert_group > kMaxGroups || p.num_experts > kMaxExperts) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  return launch_chained(routing_kernel, (p.num_tokens + kRoutingWarps - 1) / kRoutingWarps, kRoutingWarps * 32, 0,
                        stream, p);
}

cudaError_t launch_routing_and_grouping(const RoutingParams& rp, const GroupingParams& gp, cudaStream_t stream) {
  const bool fused = rp.num_tokens > 0 && rp.num_tokens <= kFusedRoutingWarps && gp.num_slots <= kSmallGroupSlots &&
                     gp.num_local_experts <= kMaxLocalExperts;
  if (!fused) {
    const cudaError_t err = launch_routing(rp, stream);
    return err != cudaSuccess ? err : launch_grouping(gp, stream);
  }
  if (rp.top_k > kMaxTopK || rp.num_expert_group > kMaxGroups || rp.num_experts > kMaxExperts) return cudaErrorInvalidValue;
  return launch_chained(route_and_group_kernel, 1, kSmallGroupThreads, 0, stream, rp, gp);
}

cudaError_t launch_grouping(const GroupingParams& p, cudaStream_t stream) {
  if (p.num_local_experts > kMaxLocalExperts) return cudaErrorInvalidValue;
  if (p.num_slots <= kSmallGroupSlots) {
    return launch_chained(small_grouping_kernel, 1, kSmallGroupThreads, 0, stream, p);
  }
  // (more than kSmallGroupSlots slots, so the count and scatter grids are not empty)
  cudaError_t err = cudaMemsetAsync(p.counts, 0, sizeof(int32_t) * p.num_local_experts, stream);
  if (err == cudaSuccess) err = launch_chained(count_kernel, blocks_for(p.num_slots), kThreads, 0, stream, p);
  if (err == cudaSuccess) err = launch_chained(offsets_kernel, 1, kThreads, 0, stream, p);
  if (err == cudaSuccess) err = launch_chained(scatter_kernel, blocks_for(p.num_slots), kThreads, 0, stream, p);
  return err;
}

cudaError_t launch_fake_quantize(const ActQuantParams& q, float* x, int64_t cols, const int32_t* row_ids, int max_rows,
                                 const int32_t* num_rows_dev, float* amax, cudaStream_t stream) {
  if (q.kind == 0 || max_rows == 0) return cudaSuccess;
  if (q.kind == 2) {
    cudaError_t err = cudaMemsetAsync(amax, 0, sizeof(float), stream);
    if (err == cudaSuccess)
      err = launch_chained(amax_kernel, max_rows, kThreads, 0, stream, x, cols, row_ids, max_rows, num_rows_dev, amax);
    if (err != cudaSuccess) return err;
  }
  return launch_chained(fake_quant_kernel, max_rows, kQuantThreads, 0, stream, q, x, cols, row_ids, max_rows,
                        num_rows_dev, amax);
}

cudaError_t launch_convert_input(const void* hidden, int dtype_kind, int64_t tokens, int64_t hidden_size,
                                 const float* router_weights, bool round, float* x, uint16_t* x16,
                                 cudaStream_t stream) {
  const int64_t n = tokens * hidden_size;
  if (n == 0) return cudaSuccess;
  return launch_chained(convert_kernel, blocks_for(n), kThreads, 0, stream, hidden, dtype_kind, n, hidden_size,
                        router_weights, round, x, x16);
}

cudaError_t launch_activation(const ActivationParams& p, cudaStream_t stream) {
  if (p.max_slots == 0) return cudaSuccess;
  const int64_t per_block = int64_t{kThreads} * kActColumns;
  const dim3 grid(static_cast<unsigned>(p.max_slots), static_cast<unsigned>((p.inter + per_block - 1) / per_block));
  return launch_chained(activation_kernel, grid, kThreads, 0, stream, p);
}

cudaError_t launch_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.tokens * p.hidden == 0) return cudaSuccess;
  constexpr int64_t per_block = int64_t{kCombineBlock} * kCombineColumns;
  const int64_t column_blocks = (p.hidden + per_block - 1) / per_block;
  if (p.tokens >= (int64_t{1} << 31) || column_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(column_blocks));
  return launch_chained(combine_kernel, grid, kCombineBlock, 0, stream, p);
}

cudaError_t launch_gather_rows(const GatherParams& p, cudaStream_t stream) {
  if (p.max_rows == 0) return cudaSuccess;
  if (p.k % 8 != 0) return cudaErrorInvalidValue;
  return launch_chained(gather_rows_kernel, p.max_rows, 128, 0, stream, p);
}

namespace {
thread_local bool t_chained = true;  // ChainedLaunchScope's switch for the calling thread
}  // namespace

bool chained_launches() {
  static const bool enabled = [] {
    const char* env = std::getenv("QMOE_PDL");  // on unless QMOE_PDL=0 (for A/B runs and debugging)
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled && t_chained;
}

ChainedLaunchScope::ChainedLaunchScope(bool chained) : previous_(t_chained) { t_chained = previous_ && chained; }
ChainedLaunchScope::~ChainedLaunchScope() { t_chained = previous_; }

cudaError_t launch_grouped_setup(const GroupedSetupParams& p, cudaStream_t stream) {
  return launch_grouped_setup_batch(p, DequantBatch{}, stream);
}

cudaError_t launch_grouped_setup_batch(const GroupedSetupParams& p, const DequantBatch& batch, cudaStream_t stream) {
  if (p.groups == 0) return cudaSuccess;
  return launch_chained(grouped_setup_kernel, (p.groups + 127) / 128, 128, 0, stream, p, batch);
}

cudaError_t launch_sorted_row_weights(const float* slot_weights, const int32_t* sorted_slots, const int32_t* total_rows,
                                      int max_rows, float* row_weights, cudaStream_t stream) {
  if (max_rows <= 0) return cudaSuccess;
  const int blocks = std::min((max_rows + 255) / 256, 1024);
  return launch_chained(sorted_row_weights_kernel, blocks, 256, 0, stream, slot_weights, sorted_slots, total_rows,
                        row_weights);
}

cudaError_t launch_finish_expert_rows(const ExpertRowsParams& p, cudaStream_t stream) {
  if (p.n % 4 != 0 || p.n / 4 >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  if (p.max_rows == 0 || p.n == 0) return cudaSuccess;
  finish_expert_rows_kernel<<<std::min(p.max_rows, 8192), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_dequantize(const DequantParams& p, cudaStream_t stream) {
  if (p.layout.cols % 8 != 0 || p.count > 65535) return cudaErrorInvalidValue;
  // Only layouts whose values the output type holds exactly (else a second rounding).
  const bool exact = p.f16 ? dequantizes_to_f16_exactly(p.layout)
                           : dequantizes_to_bf16_exactly(p.layout) || dequant_divides_by_global_scale(p.layout);
  if (!exact) return cudaErrorInvalidValue;
  if (p.count == 0 || p.layout.rows == 0 || p.layout.cols == 0) return cudaSuccess;
  const int64_t chunks = p.layout.cols / 8, total = p.layout.rows * chunks;
  if (total >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  ChunkDivider div;
  div.chunks = static_cast<uint32_t>(chunks);
  int log2_chunks = 0;
  while ((int64_t{1} << log2_chunks) < chunks) ++log2_chunks;
  div.shift = 31 + log2_chunks;
  div.multiplier = ((uint64_t{1} << div.shift) + chunks - 1) / chunks;  // shift <= 59
  const int64_t per_block = int64_t{kDequantThreads} * kDequantChunksPerThread;
  const dim3 grid(static_cast<unsigned>((total + per_block - 1) / per_block), static_cast<unsigned>(p.count));
  if (p.f16)
    dequantize_kernel<true><<<grid, kDequantThreads, 0, stream>>>(p, div);
  else
    dequantize_kernel<false><<<grid, kDequantThreads, 0, stream>>>(p, div);
  return cudaGetLastError();
}

cudaError_t launch_codes_to_signed(int32_t* words, int64_t num_words, int bits, cudaStream_t stream) {
  if (bits != 4 && bits != 8) return cudaErrorInvalidValue;
  if (num_words <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>(blocks_for(num_words), 4096));
  codes_to_signed_kernel<<<blocks, kThreads, 0, stream>>>(words, num_words, bits == 4 ? 0x88888888u : 0x80808080u);
  return cudaGetLastError();
}

cudaError_t launch_group_scales(const WeightLayout& L, const ExpertTensors* experts, int num_experts, bool f16,
                                uint16_t* out, cudaStream_t stream) {
  if (L.strategy != kGroup && L.strategy != kChannel) return cudaErrorInvalidValue;
  const int64_t groups = L.strategy == kChannel ? 1 : L.scale_cols;
  const int64_t n = num_experts * groups * L.rows;
  if (n == 0) return cudaSuccess;
  group_scales_kernel<<<blocks_for(n), kThreads, 0, stream>>>(L, experts, num_experts, groups, f16, out);
  return cudaGetLastError();
}

cudaError_t launch_expand_column_scales(const WeightLayout& L, const ExpertTensors* experts, int num_experts, float* out,
                                        cudaStream_t stream) {
  if (L.strategy != kTensor && L.strategy != kChannel) return cudaErrorInvalidValue;
  if (num_experts * L.rows == 0) return cudaSuccess;
  expand_column_scales_kernel<<<blocks_for(num_experts * L.rows), kThreads, 0, stream>>>(L, experts, num_experts, out);
  return cudaGetLastError();
}

cudaError_t launch_block_scales_f32(const WeightLayout& L, const ExpertTensors* experts, int num_experts, float* out,
                                    cudaStream_t stream) {
  if (L.strategy != kBlock || L.block_rows <= 0 || L.block_cols <= 0) return cudaErrorInvalidValue;
  const int64_t row_blocks = (L.rows + L.block_rows - 1) / L.block_rows;
  const int64_t col_blocks = (L.cols + L.block_cols - 1) / L.block_cols;
  const int64_t n = num_experts * row_blocks * col_blocks;
  if (n == 0) return cudaSuccess;
  block_scales_kernel<<<blocks_for(n), kThreads, 0, stream>>>(L, experts, num_experts, row_blocks, col_blocks, out);
  return cudaGetLastError();
}

cudaError_t launch_activation_rows(const ActivationParams& p, const ActQuantParams& q, void* a_rows,
                                   float* a_scale_rows, cudaStream_t stream) {
  const bool rows16 = q.kind == 0 && p.round && p.dtype_kind != 2;
  const bool groups = q.kind == 4 && q.group_size == kFusedGroup && p.inter % kFusedGroup == 0;
  if ((!rows16 && !groups && q.kind != 1 && q.kind != 3 && q.kind != 5) || p.inter % 4 != 0) return cudaErrorInvalidValue;
  if (q.bf16_rows && q.kind != 1 && q.kind != 3 && q.kind != 5) return cudaErrorInvalidValue;
  if (p.max_slots == 0) return cudaSuccess;
  // Rounded 16-bit activations are kept as their 16-bit bits (exact).
  const bool half_row = p.round && p.dtype_kind != 2;
  const size_t smem = rows16 ? 0 : (half_row ? sizeof(uint16_t) : sizeof(float)) * p.inter;
  if (smem > kMaxActivationRowBytes) return cudaErrorInvalidValue;
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) {
      // Always the same (largest) opt-in: the attribute is per kernel, not per launch, so a smaller
      // value set later must not shrink what a captured graph of a wider layer launches with.
      const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   kMaxActivationRowBytes);
      if (err != cudaSuccess) return err;
    }
    return launch_chained(kernel, p.max_slots, kThreads, smem, stream, p, q, a_rows, a_scale_rows);
  };
  return half_row ? launch(activation_rows_kernel<true>) : launch(activation_rows_kernel<false>);
}

cudaError_t launch_input_rows(const InputRowsParams& p, cudaStream_t stream) {
  const bool rows16 = p.q.kind == 0 && p.dtype_kind != 2;
  const bool groups = p.q.kind == 4 && p.q.group_size == kFusedGroup && p.hidden % kFusedGroup == 0;
  if ((!rows16 && !groups && p.q.kind != 1 && p.q.kind != 3 && p.q.kind != 5) || p.hidden % 8 != 0 ||
      p.top_k > kMaxTopK)
    return cudaErrorInvalidValue;
  if (p.q.bf16_rows && p.q.kind != 1 && p.q.kind != 3 && p.q.kind != 5) return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  return launch_chained(input_rows_kernel, p.tokens, kThreads, 0, stream, p);
}

}  // namespace qmoe::cuda
