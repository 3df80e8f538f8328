#include "qmoe/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "qmoe/error.h"

namespace qmoe {

void Tensor::FreeBytes::operator()(std::byte* p) const { std::free(p); }

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw Error("tensor shape " + qmoe::shape_str(shape_) + " has a negative dimension");
    if (d != 0 && n > INT64_MAX / d) throw Error("tensor shape " + qmoe::shape_str(shape_) + " overflows");
    n *= d;
  }
  size_bytes_ = static_cast<size_t>(n) * dtype_size_bytes(dtype_);
  // 64-byte alignment so typed and vector access is always safe.
  const size_t alloc = (size_bytes_ + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, alloc == 0 ? 64 : alloc));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, alloc == 0 ? 64 : alloc);
  bytes_.reset(p);
}

int64_t Tensor::numel() const {
  if (!bytes_) return 0;
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor::Tensor(const Tensor& other) : dtype_(other.dtype_) {
  if (other.bytes_) *this = other.clone();
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = other.clone();
  return *this;
}

Tensor Tensor::clone() const {
  if (!bytes_) return Tensor();
  Tensor t(dtype_, shape_);
  if (size_bytes_ != 0) std::memcpy(t.raw(), raw(), size_bytes_);
  return t;
}

std::string Tensor::shape_str() const { return qmoe::shape_str(shape_); }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace qmoe
