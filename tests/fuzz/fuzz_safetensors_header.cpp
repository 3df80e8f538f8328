// libFuzzer target: the input is a whole safetensors file image. It is split exactly as
// SafetensorsFile splits a file (8-byte little-endian length, header, data buffer) and the header
// goes through parse_safetensors_header, the reader's own validation. Only qmoe::Error may escape;
// anything else (or a sanitizer report) is a bug. Accepted headers are also checked against the
// format's invariants, so a validation hole shows up as a crash rather than passing silently.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "qmoe/checkpoint.h"
#include "qmoe/dtype.h"
#include "qmoe/error.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kPrefixBytes = 8;
  if (size < kPrefixBytes) return 0;
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kPrefixBytes; ++i) header_bytes |= uint64_t{data[i]} << (8 * i);
  // The reader rejects these before parsing; there is nothing else to exercise.
  if (header_bytes > qmoe::kMaxSafetensorsHeaderBytes || header_bytes > size - kPrefixBytes)
    return 0;
  const std::string_view header(reinterpret_cast<const char*>(data + kPrefixBytes), header_bytes);
  const uint8_t* buffer = data + kPrefixBytes + header_bytes;
  const uint64_t buffer_bytes = size - kPrefixBytes - header_bytes;

  std::vector<qmoe::TensorInfo> tensors;
  try {
    tensors = qmoe::parse_safetensors_header(header, buffer_bytes, "fuzz");
  } catch (const qmoe::Error&) {
    return 0;
  }

  // Sorted by offset, the tensors tile [0, buffer_bytes) and each size matches its shape.
  uint64_t covered = 0;
  unsigned sum = 0;
  for (const auto& t : tensors) {
    require(t.begin == covered);
    require(t.begin <= t.end && t.end <= buffer_bytes);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      require(d >= 0);
      numel *= static_cast<uint64_t>(d);
    }
    require(numel * qmoe::dtype_size_bytes(t.dtype) == t.size_bytes());
    // Touch the bytes the reader would hand out; ASan flags anything outside the input.
    for (uint64_t i = t.begin; i < t.end; ++i) sum += buffer[i];
    if (t.end > t.begin) covered = t.end;
  }
  require(covered == buffer_bytes);
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
