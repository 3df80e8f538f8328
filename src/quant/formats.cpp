// Host-only parts of quant/formats.h: packers (they validate their input) and the NVFP4 activation
// block quantizer.
#include "quant/formats.h"

#include <cmath>
#include <cstring>
#include <string>

#include "qmoe/error.h"

namespace qmoe::quant {

namespace {

void check_bits(int bits, const char* what) {
  if (bits < 1 || bits > 8) {
    throw Error(std::string(what) + ": num_bits must be in 1..8, got " + std::to_string(bits));
  }
}

// Offset-binary code of a signed value, rejecting values outside the signed range.
uint32_t offset_code(int q, int bits, const char* what) {
  const int lo = -(1 << (bits - 1));
  const int hi = (1 << (bits - 1)) - 1;
  if (q < lo || q > hi) {
    throw Error(std::string(what) + ": value " + std::to_string(q) + " out of range for " +
                std::to_string(bits) + "-bit ints");
  }
  return static_cast<uint32_t>(q - lo);
}

// ORs `bits` bits of `u` into the little-endian bit stream at bit `pos`. `word(k)` returns a
// reference to the k-th word of the stream (rows and zero-point columns have different strides).
template <typename WordAt>
void put_bits(uint32_t u, int64_t pos, int bits, WordAt word) {
  const int64_t w = pos >> 5;
  const int off = static_cast<int>(pos & 31);
  const uint64_t shifted = static_cast<uint64_t>(u) << off;
  word(w) = static_cast<int32_t>(static_cast<uint32_t>(word(w)) | static_cast<uint32_t>(shifted));
  if (off + bits > 32) {
    word(w + 1) = static_cast<int32_t>(static_cast<uint32_t>(word(w + 1)) |
                                       static_cast<uint32_t>(shifted >> 32));
  }
}

}  // namespace

void pack_int_row(const int8_t* q, int64_t n, int bits, int32_t* words) {
  check_bits(bits, "pack_int_row");
  const int nwords = packed_words_per_row(n, bits);
  std::memset(words, 0, static_cast<size_t>(nwords) * sizeof(int32_t));
  for (int64_t i = 0; i < n; ++i) {
    put_bits(offset_code(q[i], bits, "pack_int_row"), i * bits, bits,
             [words](int64_t k) -> int32_t& { return words[k]; });
  }
}

void unpack_zero_points(const int32_t* packed, int64_t rows, int64_t cols, int bits,
                        int8_t* out) {
  check_bits(bits, "unpack_zero_points");
  // Column g is one bit stream running down the packed rows: word k of it is packed[k * cols + g].
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r * bits;
    const int64_t w = pos >> 5;
    const int off = static_cast<int>(pos & 31);
    const bool straddles = off + bits > 32;
    for (int64_t g = 0; g < cols; ++g) {
      const uint32_t lo = static_cast<uint32_t>(packed[w * cols + g]);
      const uint32_t hi = straddles ? static_cast<uint32_t>(packed[(w + 1) * cols + g]) : 0u;
      out[r * cols + g] = static_cast<int8_t>(detail::extract_offset_field(lo, hi, off, bits));
    }
  }
}

void pack_zero_points(const int8_t* zp, int64_t rows, int64_t cols, int bits, int32_t* packed) {
  check_bits(bits, "pack_zero_points");
  const int64_t nwords = packed_words_per_row(rows, bits);
  std::memset(packed, 0, static_cast<size_t>(nwords * cols) * sizeof(int32_t));
  for (int64_t g = 0; g < cols; ++g) {
    auto word = [packed, cols, g](int64_t k) -> int32_t& { return packed[k * cols + g]; };
    for (int64_t r = 0; r < rows; ++r) {
      put_bits(offset_code(zp[r * cols + g], bits, "pack_zero_points"), r * bits, bits, word);
    }
  }
}

uint8_t quantize_nvfp4_block(const float* x, int n, float global_scale, uint8_t* nibbles) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  // sf = fp8(gs * (amax / 6)), the grouping of vLLM's kernel and of the reference encoder.
  const uint8_t sf_bits = float_to_fp8e4m3_sat(global_scale * (amax / 6.0f));
  const float sf = fp8e4m3_to_float(sf_bits);
  if (sf == 0.0f) {
    std::memset(nibbles, 0, static_cast<size_t>(n));
    return sf_bits;
  }
  // One output scale per block (gs / sf), then a multiply per element, as vLLM's kernel does.
  const float out_scale = global_scale / sf;
  for (int i = 0; i < n; ++i) nibbles[i] = float_to_e2m1(x[i] * out_scale);
  return sf_bits;
}

}  // namespace qmoe::quant
