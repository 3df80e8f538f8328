// How fast a weight matrix streams from HBM under the decode kernels' access pattern, with no
// decode at all, against the same bytes laid out so that each warp's step is contiguous.
//
// The question (bench/NOTES.md, issue 3): with the decode cut out entirely, moe_mma.cu still
// stopped at ~0.67 of the copy bandwidth on Mixtral W4A16 at 1 token, while its FP8 and bf16
// instances (128- and 256-byte row pieces per step) reach ~0.9. Its INT4 warps read 16 rows x 64
// bytes per step, each row's piece 64 bytes from the last step's, the rows a whole row apart. If
// small scattered pieces are what caps the stream, a repacked layout (a warp's step contiguous, as
// the 4-bit prefill kernel's fragment order is) would lift the cap for every 4-bit decode kernel.
//
// Patterns, per warp and step (a warp owns 16 rows of `row_bytes`; a "unit" is one step):
//   rows P:  each of the 16 rows gives its next P-byte piece (the canonical [rows, k] layout read
//            k-step by k-step: the decode kernels' way);
//   tiled P: one contiguous 16 x P-byte piece (the same bytes, repacked so a row block's steps are
//            consecutive).
// Every lane keeps `depth` 16-byte loads in flight (ld.global.nc.L1::no_allocate, as moe_mma.cu) in
// a ring of units, XOR-folds them into a register and writes it once. The units are split evenly
// over the warps of a persistent grid of `blocks` per SM (at most what fits), so no wave tail hides
// the pattern's own rate. Each launch reads a fresh region of a 2 GiB pool (no L2 reuse). The small
// shapes also run stacked (copies of the matrix read in one launch, >= 256 MiB) so that launch
// gaps do not set their rate. Reference: a device-to-device copy (read + written bytes over time,
// as qmoe bench's copy bandwidth).
//
// Usage: qmoe_stream_bench [--quick]   (prints one table; no arguments needed)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/weight_access.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerWarp = 16;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

using qmoe::cuda::load_weights;  // the decode kernels' streaming load

// w: [rows, row_bytes] (rows a multiple of 16, row_bytes of P); kUnits steps in the ring, so a lane
// has kUnits * P / 32 loads in flight. zero: 0. sink: one word per thread.
template <int P, int kUnits, bool kTiled>
__global__ void __launch_bounds__(kThreads) stream_kernel(const uint4* w, int64_t rows, int64_t row_bytes,
                                                          uint32_t zero, uint32_t* sink) {
  constexpr int kPerUnit = P / 32;  // 16-byte loads per lane and step (16 rows x P bytes / 32 lanes)
  static_assert(P % 32 == 0 && kPerUnit >= 1);
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kThreads / 32;
  const int64_t row_u4 = row_bytes / 16, steps = row_bytes / P;
  const int64_t units = rows / kRowsPerWarp * steps;
  const int64_t u0 = units * warp / warps, u1 = units * (warp + 1) / warps;
  // This lane's offsets (uint4s) within a unit, from the unit's base.
  int64_t offset[kPerUnit];
#pragma unroll
  for (int i = 0; i < kPerUnit; ++i) {
    const int j = i * 32 + lane;  // the unit's j-th 16-byte piece
    offset[i] = kTiled ? j : static_cast<int64_t>(j / (P / 16)) * row_u4 + j % (P / 16);
  }
  // The current unit's row block and step (one division per warp), and its base in uint4s.
  int64_t rb = u0 / steps, s = u0 % steps;
  const int64_t block_u4 = kRowsPerWarp * row_u4, step_u4 = kTiled ? P : P / 16;
  auto next_base = [&] {
    const int64_t b = rb * block_u4 + s * step_u4;
    if (++s == steps) s = 0, ++rb;
    return b;
  };
  // A ring of kUnits units per lane: each round folds a slot and refills it with the unit kUnits
  // ahead, so kUnits * kPerUnit loads stay in flight (folding right after each load, as a plain
  // batch compiles to, keeps only a few). Slots past the warp's last unit hold zeros.
  const int64_t n = u1 - u0;
  uint4 v[kUnits][kPerUnit];
#pragma unroll
  for (int b = 0; b < kUnits; ++b) {
    const uint4* p = b < n ? w + next_base() : nullptr;
#pragma unroll
    for (int i = 0; i < kPerUnit; ++i) v[b][i] = p != nullptr ? load_weights(p + offset[i]) : make_uint4(0, 0, 0, 0);
  }
  uint32_t acc = 0;
  for (int64_t r = kUnits; r < n + kUnits; r += kUnits) {
#pragma unroll
    for (int b = 0; b < kUnits; ++b) {
#pragma unroll
      for (int i = 0; i < kPerUnit; ++i) acc ^= v[b][i].x ^ v[b][i].y ^ v[b][i].z ^ v[b][i].w;
      // The reload's address depends on the fold (`zero` is 0, which the compiler cannot know), so
      // the slot is refilled as soon as it is folded: otherwise the compiler issues a round's folds
      // first and its loads after them, and the ring drains to empty once a round.
      const uint4* p = r + b < n ? w + next_base() + (acc & zero) : nullptr;
#pragma unroll
      for (int i = 0; i < kPerUnit; ++i) v[b][i] = p != nullptr ? load_weights(p + offset[i]) : make_uint4(0, 0, 0, 0);
    }
  }
  sink[blockIdx.x * kThreads + threadIdx.x] = acc;
}

struct Shape {
  const char* name;
  int64_t rows, row_bytes;
};

struct Config {
  int piece_bytes, depth;  // depth: 16-byte loads in flight per lane
  bool tiled;
  void (*kernel)(const uint4*, int64_t, int64_t, uint32_t, uint32_t*);
};

template <int P, int kDepth, bool kTiled>
Config config() {
  static_assert(kDepth * 32 % P == 0);
  return {P, kDepth, kTiled, stream_kernel<P, kDepth * 32 / P, kTiled>};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "device properties");

  constexpr size_t kPoolBytes = size_t{2} << 30;
  uint8_t* pool = nullptr;
  check(cudaMalloc(&pool, kPoolBytes), "cudaMalloc pool");
  check(cudaMemset(pool, 0x5A, kPoolBytes), "cudaMemset pool");
  uint32_t* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(uint32_t) * kThreads * sms * 16), "cudaMalloc sink");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  const int launches = quick ? 10 : 30;

  // Copy bandwidth: 1 GiB device to device, read + written bytes.
  float copy_ms = 0.0f;
  {
    const size_t half = kPoolBytes / 2;
    for (int i = 0; i < 3; ++i) check(cudaMemcpy(pool + half, pool, half, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(start), "record");
    for (int i = 0; i < 5; ++i) check(cudaMemcpyAsync(pool + half, pool, half, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    check(cudaEventElapsedTime(&copy_ms, start, stop), "elapsed");
    copy_ms /= 5;
  }
  const double copy_gbs = 2.0 * static_cast<double>(kPoolBytes / 2) / (copy_ms * 1e-3) / 1e9;
  std::printf("# %s, %d SMs; copy bandwidth %.0f GB/s (1 GiB device to device, read + written)\n", prop.name, sms,
              copy_gbs);
  std::printf("# %d launches per row, each on a fresh region of a 2 GiB pool; us per launch (back to back)\n",
              launches);
  std::printf("# copies: the shape stacked that many times per launch (so launch gaps do not dominate small\n"
              "# shapes); blocks: per SM as launched, of the most that fit (rows past that are skipped)\n");
  std::printf("%-22s %6s %-6s %6s %6s %9s %9s %9s %8s\n", "shape", "copies", "layout", "piece", "depth", "blocks",
              "us", "GB/s", "of copy");

  // Mixtral-8x7B, DeepSeek-V3 and Qwen3-30B-A3B W4A16 at 1 token (the touched experts' int4
  // codes), and a large matrix.
  const std::vector<Shape> shapes = {
      {"mixtral_w13_1token", 2 * 28672, 4096 / 2},  {"mixtral_w2_1token", 2 * 4096, 14336 / 2},
      {"deepseek_w13_1token", 8 * 4096, 7168 / 2}, {"qwen3_w13_1token", 8 * 1536, 2048 / 2},
      {"large_1gib", 262144, 4096},
  };
  const std::vector<Config> configs = {
      config<64, 4, false>(),   config<64, 8, false>(),   config<64, 16, false>(), config<32, 8, false>(),
      config<128, 8, false>(),  config<256, 8, false>(),  config<512, 16, false>(), config<64, 4, true>(),
      config<64, 8, true>(),    config<64, 16, true>(),   config<256, 16, true>(),
  };
  const std::vector<int> blocks_per_sm = quick ? std::vector<int>{3} : std::vector<int>{2, 3, 4, 8};
  constexpr size_t kStackedBytes = size_t{256} << 20;
  for (const Shape& s : shapes) {
    const size_t bytes = static_cast<size_t>(s.rows * s.row_bytes);
    for (size_t copies : {size_t{1}, (kStackedBytes + bytes - 1) / bytes}) {
      if (copies == 1 && bytes >= kStackedBytes && &s != &shapes.back()) continue;
      if (copies > 1 && bytes >= kStackedBytes) continue;
      // (Stacked copies are one taller matrix of the same rows: consecutive in the pool.)
      const size_t launch_bytes = bytes * copies;
      const size_t region = (launch_bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
      const size_t regions = kPoolBytes / region;
      if (regions < 2) continue;
      for (const Config& c : configs) {
        if (s.row_bytes % c.piece_bytes != 0) continue;
        int fit = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, c.kernel, kThreads, 0), "occupancy");
        for (int bps : blocks_per_sm) {
          if (bps > fit) continue;
          const int grid = sms * bps;
          size_t next = 0;
          auto launch = [&] {
            const auto* w = reinterpret_cast<const uint4*>(pool + (next++ % regions) * region);
            c.kernel<<<grid, kThreads>>>(w, s.rows * static_cast<int64_t>(copies), s.row_bytes, 0u, sink);
          };
          for (int i = 0; i < 3; ++i) launch();
          check(cudaGetLastError(), "launch");
          check(cudaEventRecord(start), "record");
          for (int i = 0; i < launches; ++i) launch();
          check(cudaEventRecord(stop), "record");
          check(cudaEventSynchronize(stop), "sync");
          float ms = 0.0f;
          check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
          const double us = 1e3 * ms / launches, gbs = static_cast<double>(launch_bytes) / (us * 1e-6) / 1e9;
          const std::string blocks = std::to_string(bps) + "/" + std::to_string(fit);
          std::printf("%-22s %6zu %-6s %6d %6d %9s %9.1f %9.0f %8.2f\n", s.name, copies, c.tiled ? "tiled" : "rows",
                      c.piece_bytes, c.depth, blocks.c_str(), us, gbs, gbs / copy_gbs);
        }
      }
    }
  }
  cudaFree(sink);
  cudaFree(pool);
  return 0;
}
