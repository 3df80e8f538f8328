// Element types of checkpoint tensors, spelled as safetensors spells them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qmoe {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kI32,
  kI64,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,  // float8_e4m3fn: no inf, NaN = 0x7F/0xFF, max 448
  kF8E5M2,
};

// Size of one element in bytes.
size_t dtype_size_bytes(DType dtype);

// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);

// Inverse of dtype_name; nullopt for strings safetensors does not define or qmoe does not read.
std::optional<DType> parse_dtype(std::string_view name);

bool is_float_dtype(DType dtype);
bool is_int_dtype(DType dtype);

}  // namespace qmoe
