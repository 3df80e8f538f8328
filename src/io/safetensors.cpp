// safetensors reading and writing. The checks mirror the reference (Rust) reader: header size
// limit, UTF-8 JSON object starting with '{', exact field types, no duplicate keys,
// overflow-checked sizes, and tensors that tile the data buffer with no gap and no overlap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <tuple>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "qmoe/checkpoint.h"
#include "qmoe/error.h"

namespace qmoe {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";
constexpr size_t kLengthPrefixBytes = 8;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

// Closes the descriptor on every exit path.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Closes now and reports the result (a failed close can mean lost writes).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// (O_NONBLOCK: a FIFO or device in the checkpoint's place fails the regular-file check instead of
// blocking the open; it changes nothing for regular files.)
UniqueFd open_read(const std::string& path, struct stat& st) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw Error("cannot open " + path + ": " + errno_text(errno));
  if (::fstat(fd.get(), &st) != 0) throw Error("cannot stat " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + " is not a regular file");
  // (blocking again for the reads: some network and FUSE file systems honour the flag on reads)
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw Error("cannot set up reading " + path + ": " + errno_text(errno));
  return fd;
}

void pread_exact(int fd, void* dst, size_t size_bytes, uint64_t offset, const std::string& path) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < size_bytes) {
    const ssize_t got =
        ::pread(fd, out + done, size_bytes - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot read " + path + ": " + errno_text(errno));
    }
    if (got == 0) throw Error(path + " ended early (was it truncated while being read?)");
    done += static_cast<size_t>(got);
  }
}

using DuplicateMessage =
    std::function<std::string(const std::string& top_key, size_t depth, const std::string& key)>;

// Builds the DOM from nlohmann's SAX events, rejecting duplicate keys in any object (nlohmann's own
// parser silently keeps one; its callback parser could catch them but rescans the parent object at
// every object end, which is quadratic in the tensor count). No recursion, so depth cannot overflow
// the stack.
class UniqueKeyDomBuilder final : public nlohmann::json_sax<json> {
 public:
  UniqueKeyDomBuilder(const std::string& what, const DuplicateMessage& on_duplicate)
      : what_(what), on_duplicate_(on_duplicate) {}

  json take() { return std::move(root_); }

  bool null() override { return add(nullptr) != nullptr; }
  bool boolean(bool v) override { return add(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return add(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return add(v) != nullptr; }
  bool number_float(number_float_t v, const string_t& /*text*/) override {
    return add(v) != nullptr;
  }
  bool string(string_t& v) override { return add(std::move(v)) != nullptr; }
  bool binary(binary_t& v) override { return add(json::binary(std::move(v))) != nullptr; }

  bool start_object(size_t /*elements*/) override {
    open_.push_back(add(json::object()));
    return true;
  }
  bool key(string_t& k) override {
    json& object = *open_.back();
    if (open_.size() == 1) top_key_ = k;
    if (object.contains(k))
      throw Error(on_duplicate_(open_.size() == 1 ? std::string() : top_key_, open_.size(), k));
    slot_ = &object[std::move(k)];
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(size_t /*elements*/) override {
    open_.push_back(add(json::array()));
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) override {
    throw Error(what_ + " is not valid UTF-8 JSON: " + e.what());
  }

 private:
  // Places a value in the innermost open container (or as the root) and returns where it went.
  // Pointers into an open array stay valid: nothing is appended to it while a child is open.
  template <class V>
  json* add(V&& v) {
    if (open_.empty()) {
      root_ = json(std::forward<V>(v));
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.emplace_back(std::forward<V>(v));
      return &parent.back();
    }
    *slot_ = json(std::forward<V>(v));
    return slot_;
  }

  const std::string& what_;
  const DuplicateMessage& on_duplicate_;
  json root_;
  std::vector<json*> open_;
  json* slot_ = nullptr;  // the member named by the last key
  std::string top_key_;   // the current key of the outermost object
};

json parse_json_unique(std::string_view text, const std::string& what,
                       const DuplicateMessage& on_duplicate) {
  // nlohmann stops at a NUL byte as if the input ended there, so "{}\0junk" would pass; a raw NUL
  // is never valid JSON.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw Error(what + " is not valid UTF-8 JSON: NUL byte at offset " + std::to_string(nul));
  UniqueKeyDomBuilder builder(what, on_duplicate);
  json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                  /*strict=*/true, /*ignore_comments=*/false);
  return builder.take();
}

const char* json_type(const json& v) { return v.type_name(); }

// A JSON non-negative integer as u64. -0 counts (serde accepts it); floats never do.
std::optional<uint64_t> as_u64(const json& v, bool* negative) {
  *negative = false;
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
    *negative = true;
  }
  return std::nullopt;
}

struct ParsedHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

ParsedHeader parse_header(std::string_view text, uint64_t data_size_bytes,
                          const std::string& what) {
  // The reference reader requires '{' first; nlohmann alone would also skip a BOM or whitespace.
  if (text.empty() || text.front() != '{')
    throw Error(what + ": safetensors header does not start with '{'");
  const json root = parse_json_unique(
      text, what + ": safetensors header",
      [&](const std::string& top, size_t depth, const std::string& key) {
        if (depth == 1) return "duplicate key " + in_quotes(key) + " in the header of " + what;
        if (top == kMetadataKey)
          return "duplicate key " + in_quotes(key) + " in __metadata__ of " + what;
        return "duplicate key " + in_quotes(key) + " in the entry for tensor " + in_quotes(top) +
               " in " + what;
      });
  if (!root.is_object()) throw Error(what + ": safetensors header is not a JSON object");

  ParsedHeader out;
  out.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    const std::string in_tensor = " for tensor " + in_quotes(name) + " in " + what;
    if (name == kMetadataKey) {
      // The reference reader's Option<HashMap> accepts null as "no metadata".
      if (entry.is_null()) continue;
      if (!entry.is_object())
        throw Error("__metadata__ in " + what + " is a " + json_type(entry) + ", not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          throw Error("__metadata__ value for key " + in_quotes(key) + " in " + what + " is a " +
                      json_type(value) + ", not a string");
        out.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    if (!entry.is_object())
      throw Error("header entry is a " + std::string(json_type(entry)) + ", not an object" +
                  in_tensor);

    TensorInfo info;
    info.name = name;

    const auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end()) throw Error("missing 'dtype'" + in_tensor);
    if (!dtype_it->is_string())
      throw Error("'dtype' is a " + std::string(json_type(*dtype_it)) + ", not a string" +
                  in_tensor);
    const auto& dtype_str = dtype_it->get_ref<const std::string&>();
    const auto dtype = parse_dtype(dtype_str);
    if (!dtype) throw Error("unknown dtype " + in_quotes(dtype_str) + in_tensor);
    info.dtype = *dtype;

    const auto shape_it = entry.find("shape");
    if (shape_it == entry.end()) throw Error("missing 'shape'" + in_tensor);
    if (!shape_it->is_array())
      throw Error("'shape' is a " + std::string(json_type(*shape_it)) + ", not an array" +
                  in_tensor);
    // Overflow-checked in dimension order, like the reference reader (so [2^40, 2^40, 0] fails).
    uint64_t numel = 1;
    for (const auto& d : *shape_it) {
      bool negative = false;
      const auto dim = as_u64(d, &negative);
      if (negative) throw Error("'shape' has a negative dimension " + d.dump() + in_tensor);
      if (!dim)
        throw Error("'shape' holds a " + std::string(json_type(d)) +
                    ", not a non-negative integer" + in_tensor);
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error("'shape' dimension " + std::to_string(*dim) + " is too large" + in_tensor);
      if (*dim != 0 && numel > std::numeric_limits<uint64_t>::max() / *dim)
        throw Error("element count of shape " + shape_it->dump() + " overflows" + in_tensor);
      numel *= *dim;
      info.shape.push_back(static_cast<int64_t>(*dim));
    }
    const uint64_t elem_bytes = dtype_size_bytes(info.dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / elem_bytes)
      throw Error("byte size of shape " + shape_it->dump() + " overflows" + in_tensor);
    const uint64_t expected_bytes = numel * elem_bytes;

    const auto offsets_it = entry.find("data_offsets");
    if (offsets_it == entry.end()) throw Error("missing 'data_offsets'" + in_tensor);
    if (!offsets_it->is_array() || offsets_it->size() != 2)
      throw Error("'data_offsets' must be an array of two non-negative integers" + in_tensor);
    uint64_t offsets[2];
    for (size_t i = 0; i < 2; ++i) {
      bool negative = false;
      const auto v = as_u64((*offsets_it)[i], &negative);
      if (!v)
        throw Error("'data_offsets' must be an array of two non-negative integers, got " +
                    std::string(negative ? "a negative number" : json_type((*offsets_it)[i])) +
                    in_tensor);
      offsets[i] = *v;
    }
    info.begin = offsets[0];
    info.end = offsets[1];
    const std::string range =
        "[" + std::to_string(info.begin) + ", " + std::to_string(info.end) + ")";
    if (info.begin > info.end)
      throw Error("'data_offsets' " + range + " begin after they end" + in_tensor);
    if (info.end > data_size_bytes)
      throw Error("'data_offsets' " + range + " run past the end of the " +
                  std::to_string(data_size_bytes) + "-byte data buffer" + in_tensor);
    if (info.end - info.begin != expected_bytes)
      throw Error("'data_offsets' " + range + " hold " + std::to_string(info.end - info.begin) +
                  " bytes but " + std::string(dtype_name(info.dtype)) + " " + shape_it->dump() +
                  " needs " + std::to_string(expected_bytes) + in_tensor);
    out.tensors.push_back(std::move(info));
  }

  // Sorted by offset, the tensors must cover [0, data_size) exactly once.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo* last = nullptr;  // the non-empty tensor that ends at `covered`
  auto span_str = [](const TensorInfo& t) {
    return in_quotes(t.name) + " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
  };
  for (const auto& t : out.tensors) {
    if (t.begin > covered) {
      throw Error("gap in the data buffer of " + what + ": bytes [" + std::to_string(covered) +
                  ", " + std::to_string(t.begin) + ") " +
                  (last ? "between tensor " + span_str(*last) + " and " : "before ") + "tensor " +
                  span_str(t) + " belong to no tensor");
    }
    if (t.begin < covered)
      throw Error("tensors " + span_str(*last) + " and " + span_str(t) + " overlap in " + what);
    if (t.end > t.begin) {
      covered = t.end;
      last = &t;
    }
  }
  if (covered != data_size_bytes) {
    throw Error("gap in the data buffer of " + what + ": bytes [" + std::to_string(covered) + ", " +
                std::to_string(data_size_bytes) + ") " +
                (last ? "after tensor " + span_str(*last) : std::string("(no tensor has data)")) +
                " belong to no tensor");
  }
  return out;
}


void write_all(int fd, const void* src, size_t size_bytes, const std::string& path) {
  const auto* p = static_cast<const char*>(src);
  while (size_bytes > 0) {
    const ssize_t n = ::write(fd, p, size_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write " + path + ": " + errno_text(errno));
    }
    p += n;
    size_bytes -= static_cast<size_t>(n);
  }
}

// One lock for every file's lazy mapping: taken once per bytes() call, never contended for long.
std::mutex g_map_mutex;

}  // namespace

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  const UniqueFd fd = open_read(path, st);
  if (st.st_size > max_bytes)
    throw Error(path + " is " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                " a JSON file of a checkpoint may have");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  pread_exact(fd.get(), text.data(), text.size(), 0, path);
  return text;
}

// ---- header -------------------------------------------------------------------------------------

std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json,
                                                 uint64_t data_size_bytes,
                                                 const std::string& what) {
  return parse_header(header_json, data_size_bytes, what).tensors;
}

// ---- SafetensorsFile ---------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  struct stat st {};
  const UniqueFd fd = open_read(path_, st);
  file_size_bytes_ = static_cast<uint64_t>(st.st_size);
  if (file_size_bytes_ < kLengthPrefixBytes)
    throw Error(path_ + ": file is " + std::to_string(file_size_bytes_) +
                " bytes, too short for the 8-byte safetensors header length");
  unsigned char prefix[kLengthPrefixBytes];
  pread_exact(fd.get(), prefix, sizeof prefix, 0, path_);
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) header_bytes |= uint64_t{prefix[i]} << (8 * i);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    throw Error(path_ + ": safetensors header length " + std::to_string(header_bytes) +
                " exceeds the limit of " + std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (header_bytes > file_size_bytes_ - kLengthPrefixBytes)
    throw Error(path_ + ": safetensors header length " + std::to_string(header_bytes) +
                " runs past the end of the " + std::to_string(file_size_bytes_) + "-byte file");
  std::string header(header_bytes, '\0');
  pread_exact(fd.get(), header.data(), header.size(), kLengthPrefixBytes, path_);
  data_begin_ = kLengthPrefixBytes + header_bytes;

  ParsedHeader parsed = parse_header(header, file_size_bytes_ - data_begin_, path_);
  tensors_ = std::move(parsed.tensors);
  metadata_ = std::move(parsed.metadata);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, file_size_bytes_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  if (info.begin > info.end || info.end > file_size_bytes_ - data_begin_)
    throw Error("tensor " + in_quotes(info.name) + " lies outside the data buffer of " + path_);
  if (info.size_bytes() == 0) return {};
  std::lock_guard lock(g_map_mutex);
  if (map_ == nullptr) {
    // Reopen rather than keep a descriptor per shard; a changed size would mean SIGBUS later.
    struct stat st {};
    const UniqueFd fd = open_read(path_, st);
    if (static_cast<uint64_t>(st.st_size) != file_size_bytes_)
      throw Error(path_ + " changed size since its header was read (" +
                  std::to_string(file_size_bytes_) + " -> " + std::to_string(st.st_size) +
                  " bytes)");
    void* p = ::mmap(nullptr, file_size_bytes_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) throw Error("cannot map " + path_ + ": " + errno_text(errno));
    map_ = p;
  }
  return {static_cast<const std::byte*>(map_) + data_begin_ + info.begin, info.size_bytes()};
}

// ---- Checkpoint --------------------------------------------------------------------------------

Checkpoint::Checkpoint(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  const fs::path root(dir_);
  if (!fs::is_directory(root, ec))
    throw Error("checkpoint folder " + dir_ + " does not exist or is not a folder");

  std::vector<std::string> shard_names;
  // From the index: tensor -> shard file name, checked against the shards after opening them.
  std::vector<std::pair<std::string, std::string>> listed;
  const fs::path index_path = root / kIndexFile;
  const std::string index_str = index_path.string();
  // (any entry of these names, a broken or looping link too: opening it names the problem)
  auto present = [&](const fs::path& p) { return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec; };
  if (present(index_path)) {
    const json index =
        parse_json_unique(read_text_file(index_path.string(), kMaxJsonFileBytes), index_str,
                          [&](const std::string& top, size_t depth, const std::string& key) {
                            return "duplicate key " + in_quotes(key) +
                                   (depth > 1 ? " in " + top : std::string()) + " in " + index_str;
                          });
    if (!index.is_object()) throw Error(index_str + " is not a JSON object");
    const auto wm = index.find("weight_map");
    if (wm == index.end()) throw Error(index_str + " has no 'weight_map'");
    if (!wm->is_object())
      throw Error("'weight_map' in " + index_str + " is a " + json_type(*wm) + ", not an object");
    if (wm->empty()) throw Error("'weight_map' in " + index_str + " lists no tensors");
    std::set<std::string> unique_shards;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        throw Error("weight_map entry " + in_quotes(name) + " in " + index_str + " is a " +
                    json_type(shard) + ", not a shard file name");
      const auto& file = shard.get_ref<const std::string&>();
      const fs::path rel(file);
      const bool escapes =
          std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; });
      if (file.empty() || rel.is_absolute() || escapes)
        throw Error("weight_map entry " + in_quotes(name) + " in " + index_str + " names shard " +
                    in_quotes(file) + ", which is not a file inside the checkpoint folder");
      if (unique_shards.insert(file).second && !fs::is_regular_file(root / rel, ec))
        throw Error("shard " + in_quotes(file) + " listed in " + index_str + " (for tensor " +
                    in_quotes(name) + ") does not exist");
      listed.emplace_back(name, file);
    }
    shard_names.assign(unique_shards.begin(), unique_shards.end());
  } else if (present(root / kSingleFile)) {
    shard_names.emplace_back(kSingleFile);
  } else {
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".safetensors" && it->is_regular_file(ec))
        shard_names.push_back(it->path().filename().string());
    }
    if (ec) throw Error("cannot list checkpoint folder " + dir_ + ": " + ec.message());
    if (shard_names.empty())
      throw Error("checkpoint folder " + dir_ + " has no " + std::string(kSingleFile) + ", no " +
                  std::string(kIndexFile) + " and no other *.safetensors file");
    std::sort(shard_names.begin(), shard_names.end());
  }

  files_.reserve(shard_names.size());
  for (const auto& shard : shard_names) {
    files_.push_back(std::make_unique<SafetensorsFile>((root / shard).string()));
    const size_t idx = files_.size() - 1;
    for (const auto& info : files_.back()->tensors()) {
      const auto [it, inserted] = by_name_.emplace(info.name, std::make_pair(idx, &info));
      if (!inserted)
        throw Error("tensor " + in_quotes(info.name) + " appears in two shards of checkpoint " +
                    dir_ + ": " + files_[it->second.first]->path() + " and " +
                    files_.back()->path());
    }
  }
  for (const auto& [name, shard] : listed) {
    const std::string shard_path = (root / shard).string();
    const auto it = by_name_.find(name);
    if (it == by_name_.end() || files_[it->second.first]->path() != shard_path)
      throw Error("tensor " + in_quotes(name) + " is listed in " + index_str + " for shard " +
                  in_quotes(shard) + " but " + shard_path + " does not hold it" +
                  (it == by_name_.end() ? std::string()
                                        : " (it is in " + files_[it->second.first]->path() + ")"));
  }
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;

bool Checkpoint::has(const std::string& name) const { return by_name_.count(name) != 0; }

const TensorInfo& Checkpoint::info(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw Error("tensor " + in_quotes(name) + " not found in checkpoint " + dir_);
  return *it->second.second;
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw Error("tensor " + in_quotes(name) + " not found in checkpoint " + dir_);
  return files_[it->second.first]->path();
}

Tensor Checkpoint::read(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw Error("tensor " + in_quotes(name) + " not found in checkpoint " + dir_);
  const TensorInfo& info = *it->second.second;
  const auto src = files_[it->second.first]->bytes(info);
  Tensor t(info.dtype, info.shape);
  if (t.size_bytes() != src.size())
    throw Error("tensor " + in_quotes(name) + " in " + files_[it->second.first]->path() +
                ": size mismatch");
  if (!src.empty()) std::memcpy(t.raw(), src.data(), src.size());
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, loc] : by_name_) out.push_back(name);
  return out;
}

uint64_t Checkpoint::total_size_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, loc] : by_name_) total += loc.second->size_bytes();
  return total;
}

// ---- whole-file helpers ------------------------------------------------------------------------

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header[std::string(kMetadataKey)];
    meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  uint64_t offset = 0;
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (t == nullptr)
      throw Error("write_safetensors " + path + ": tensor " + in_quotes(name) + " is null");
    if (name == kMetadataKey || !seen.insert(name).second)
      throw Error("write_safetensors " + path + ": duplicate or reserved tensor name " +
                  in_quotes(name));
    auto& e = header[name];
    e["dtype"] = dtype_name(t->dtype());
    e["shape"] = t->shape();
    e["data_offsets"] = {offset, offset + t->size_bytes()};
    offset += t->size_bytes();
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error("write_safetensors " + path +
                ": tensor names and metadata must be UTF-8: " + e.what());
  }
  // Pad so the data buffer starts 8-byte aligned, as the reference writer does.
  text.append((kLengthPrefixBytes - text.size() % kLengthPrefixBytes) % kLengthPrefixBytes, ' ');

  unsigned char prefix[kLengthPrefixBytes];
  for (size_t i = 0; i < kLengthPrefixBytes; ++i)
    prefix[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));

  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw Error("cannot create " + path + ": " + errno_text(errno));
  write_all(fd.get(), prefix, sizeof prefix, path);
  write_all(fd.get(), text.data(), text.size(), path);
  for (const auto& [name, t] : tensors)
    if (t->size_bytes() != 0) write_all(fd.get(), t->raw(), t->size_bytes(), path);
  if (fd.close() != 0) throw Error("cannot write " + path + ": " + errno_text(errno));
}

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  const SafetensorsFile file(path);
  std::map<std::string, Tensor> out;
  for (const auto& info : file.tensors()) {
    Tensor t(info.dtype, info.shape);
    const auto src = file.bytes(info);
    if (!src.empty()) std::memcpy(t.raw(), src.data(), src.size());
    out.emplace(info.name, std::move(t));
  }
  return out;
}

}  // namespace qmoe
