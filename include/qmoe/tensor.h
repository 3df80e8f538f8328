// A plain owning host tensor: row-major, little-endian, bytes kept 64-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qmoe/dtype.h"

namespace qmoe {

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  Tensor(const Tensor& other);  // deep copy
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t size_bytes() const { return size_bytes_; }
  // A default-constructed tensor holds nothing (numel 0); a 0-d tensor holds one element.
  bool empty() const { return numel() == 0; }

  std::byte* raw() { return bytes_.get(); }
  const std::byte* raw() const { return bytes_.get(); }
  template <class T>
  T* data() { return reinterpret_cast<T*>(bytes_.get()); }
  template <class T>
  const T* data() const { return reinterpret_cast<const T*>(bytes_.get()); }

  Tensor clone() const;

  // "[2, 128]" for messages.
  std::string shape_str() const;

 private:
  struct FreeBytes {
    void operator()(std::byte* p) const;
  };
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  size_t size_bytes_ = 0;
  std::unique_ptr<std::byte[], FreeBytes> bytes_;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace qmoe
