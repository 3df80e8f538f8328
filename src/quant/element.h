// Reading one element of a float tensor of any storage dtype.
#pragma once

#include <string>

#include "qmoe/error.h"
#include "qmoe/tensor.h"
#include "quant/formats.h"

namespace qmoe::quant {

// Element `i` of a BF16/F16/F32/F64/F8_E4M3 tensor, exactly, as double. Other dtypes are an error.
inline double float_element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBF16:
      return bf16_to_float(t.data<uint16_t>()[i]);
    case DType::kF16:
      return f16_to_float(t.data<uint16_t>()[i]);
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kF8E4M3:
      return fp8e4m3_to_float(t.data<uint8_t>()[i]);
    default:
      throw Error("expected a float tensor, got dtype " + std::string(dtype_name(t.dtype())));
  }
}

}  // namespace qmoe::quant
