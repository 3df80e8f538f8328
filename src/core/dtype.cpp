#include "qmoe/dtype.h"

#include <array>
#include <utility>

namespace qmoe {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size_bytes;
};

constexpr std::array<DTypeEntry, 15> kDTypes = {{
    {DType::kBool, "BOOL", 1},   {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},       {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},     {DType::kI64, "I64", 8},
    {DType::kU16, "U16", 2},     {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},     {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},   {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},     {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
}};

const DTypeEntry& entry(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e;
  return kDTypes[0];
}

}  // namespace

size_t dtype_size_bytes(DType dtype) { return entry(dtype).size_bytes; }
std::string_view dtype_name(DType dtype) { return entry(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& e : kDTypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

bool is_float_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

bool is_int_dtype(DType dtype) { return !is_float_dtype(dtype) && dtype != DType::kBool; }

}  // namespace qmoe
