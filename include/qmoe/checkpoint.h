// Reading safetensors checkpoints: single files and sharded folders.
//
// Opening reads only the 8-byte length and the JSON header of each file (so `qmoe inspect` touches
// no weight bytes); tensor bytes are mapped on first access. Every header check of the reference
// (Rust) reader is applied; failures throw qmoe::Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qmoe/dtype.h"
#include "qmoe/tensor.h"

namespace qmoe {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer (after the header), end exclusive
  uint64_t end = 0;
  uint64_t size_bytes() const { return end - begin; }
};

// The largest header the reference reader accepts.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates a safetensors header (the JSON text only) for a file whose data buffer
// holds `data_size_bytes` bytes. `what` names the file in messages. Pure: used by the reader and
// by the fuzzer.
std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json,
                                                 uint64_t data_size_bytes, const std::string& what);

class SafetensorsFile {
 public:
  // Reads and validates the header; maps nothing yet.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes (maps the file on first use). Not aligned: copy before typed access.
  std::span<const std::byte> bytes(const TensorInfo& info) const;

 private:
  std::string path_;
  uint64_t file_size_bytes_ = 0;
  uint64_t data_begin_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  mutable void* map_ = nullptr;
};

// A checkpoint folder: `config.json` plus `model.safetensors`, or shards listed by
// `model.safetensors.index.json`, or (fallback) every `*.safetensors` in the folder.
class Checkpoint {
 public:
  explicit Checkpoint(std::string dir);
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;

  const std::string& dir() const { return dir_; }
  std::string config_path() const { return dir_ + "/config.json"; }

  bool has(const std::string& name) const;
  // Throws qmoe::Error "tensor 'X' not found in checkpoint DIR" when absent.
  const TensorInfo& info(const std::string& name) const;
  // File that holds the tensor (for messages).
  const std::string& file_of(const std::string& name) const;
  // Copies the tensor into an aligned host Tensor.
  Tensor read(const std::string& name) const;
  std::vector<std::string> names() const;
  uint64_t total_size_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> by_name_;
};

// Writes a safetensors file (used by `qmoe run --output` and tests).
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole safetensors file into tensors (small files: inputs, outputs, test data).
std::map<std::string, Tensor> read_safetensors(const std::string& path);

// The largest config.json or model.safetensors.index.json read (a real index is a few MB).
inline constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;
// Reads a whole text file that must be a regular file of at most max_bytes (a FIFO, a device or a
// huge file throws qmoe::Error naming the path instead of blocking or exhausting memory).
std::string read_text_file(const std::string& path, int64_t max_bytes);

}  // namespace qmoe
