// Parsing of a compressed-tensors `quantization_config` object: QuantizationArgs with the
// library's defaults, aliases and validation, config groups (incl. preset names) and the top level.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/config.h"
#include "qmoe/error.h"

namespace qmoe {

// JSON helpers shared with model_config.cpp (declared there; no private header on purpose).
namespace detail {

using Json = nlohmann::ordered_json;

std::string json_kind(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "float";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    case Json::value_t::binary: return "binary";
    default: return "invalid value";
  }
}

[[noreturn]] void json_fail(const std::string& file, const std::string& key,
                            const std::string& msg) {
  throw Error(file + ": " + (key.empty() ? msg : key + ": " + msg));
}

std::string key_path(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

Json parse_json_text(const std::string& text, const std::string& file) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + ": invalid JSON: " + e.what());
  }
}

int json_int(const Json& v, const std::string& file, const std::string& key) {
  if (!v.is_number_integer()) json_fail(file, key, "expected an integer, got " + json_kind(v));
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT_MAX)) {
      json_fail(file, key, "integer out of range: " + std::to_string(u));
    }
    return static_cast<int>(u);
  }
  const auto i = v.get<int64_t>();
  if (i < INT_MIN || i > INT_MAX) json_fail(file, key, "integer out of range: " + std::to_string(i));
  return static_cast<int>(i);
}

std::string json_string(const Json& v, const std::string& file, const std::string& key) {
  if (!v.is_string()) json_fail(file, key, "expected a string, got " + json_kind(v));
  return v.get<std::string>();
}

bool json_bool(const Json& v, const std::string& file, const std::string& key) {
  if (!v.is_boolean()) json_fail(file, key, "expected a boolean, got " + json_kind(v));
  return v.get<bool>();
}

QuantConfig parse_quant_object(const Json& j, const std::string& file, const std::string& base);

}  // namespace detail

namespace {

using detail::Json;
using detail::json_bool;
using detail::json_fail;
using detail::json_int;
using detail::json_kind;
using detail::json_string;
using detail::key_path;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Which slot of a scheme the args fill: CT validates activations more strictly than weights.
enum class ArgsRole { kWeights, kInput, kOutput };

std::optional<Strategy> strategy_from_name(const std::string& s) {
  const std::string n = lower(s);
  if (n == "tensor") return Strategy::kTensor;
  if (n == "channel") return Strategy::kChannel;
  if (n == "group") return Strategy::kGroup;
  if (n == "block") return Strategy::kBlock;
  if (n == "token") return Strategy::kToken;
  if (n == "tensor_group") return Strategy::kTensorGroup;
  if (n == "attn_head") return Strategy::kAttnHead;
  return std::nullopt;
}

// Parses "RxC" (the ≤0.10 spelling of block_structure); nullopt when malformed.
std::optional<std::array<int, 2>> parse_block_string(const std::string& s) {
  const auto x = s.find_first_of("xX");
  if (x == std::string::npos) return std::nullopt;
  std::array<int, 2> out{};
  const std::string parts[2] = {s.substr(0, x), s.substr(x + 1)};
  for (int i = 0; i < 2; ++i) {
    const std::string& p = parts[i];
    if (p.empty() || p.size() > 9) return std::nullopt;  // 9 digits always fit in int
    for (char c : p) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    out[i] = std::stoi(p);
  }
  return out;
}

std::string dtype_name_of(const std::string& s) {
  const std::string prefix = "torch.";
  return s.compare(0, prefix.size(), prefix) == 0 ? s.substr(prefix.size()) : s;
}

// CT infers the zero-point storage type of asymmetric args when the file does not say.
std::optional<std::string> inferred_zp_dtype(const QuantArgs& a) {
  if (a.symmetric) return std::nullopt;
  if (a.type == QuantType::kFloat) return std::string("float8_e4m3fn");
  if (a.num_bits <= 8) return std::string("int8");
  if (a.num_bits <= 16) return std::string("int16");
  return std::string("int32");
}

QuantArgs parse_args(const Json& j, const std::string& file, const std::string& path,
                     ArgsRole role) {
  if (!j.is_object()) json_fail(file, path, "expected an object, got " + json_kind(j));
  QuantArgs a;
  auto key = [&](const char* k) { return key_path(path, k); };

  if (auto it = j.find("num_bits"); it != j.end()) {
    a.num_bits = json_int(*it, file, key("num_bits"));
    if (a.num_bits < 1 || a.num_bits > 32) {
      json_fail(file, key("num_bits"), "expected 1..32, got " + std::to_string(a.num_bits));
    }
  }
  if (auto it = j.find("type"); it != j.end()) {
    const std::string t = lower(json_string(*it, file, key("type")));
    if (t == "int") {
      a.type = QuantType::kInt;
    } else if (t == "float") {
      a.type = QuantType::kFloat;
    } else {
      json_fail(file, key("type"), "expected \"int\" or \"float\", got " + in_quotes(it->get<std::string>()));
    }
  }
  if (auto it = j.find("symmetric"); it != j.end()) {
    a.symmetric = json_bool(*it, file, key("symmetric"));
  }
  if (auto it = j.find("group_size"); it != j.end() && !it->is_null()) {
    a.group_size = json_int(*it, file, key("group_size"));
    if (*a.group_size < -1) {
      json_fail(file, key("group_size"),
                "must be null, -1 (per channel) or positive, got " + std::to_string(*a.group_size));
    }
  }
  std::optional<Strategy> strategy;
  if (auto it = j.find("strategy"); it != j.end() && !it->is_null()) {
    const std::string s = json_string(*it, file, key("strategy"));
    strategy = strategy_from_name(s);
    if (!strategy) json_fail(file, key("strategy"), "unknown strategy " + in_quotes(s));
  }
  if (auto it = j.find("block_structure"); it != j.end() && !it->is_null()) {
    const std::string k = key("block_structure");
    if (it->is_string()) {
      a.block_structure = parse_block_string(it->get<std::string>());
      if (!a.block_structure) {
        json_fail(file, k, "expected \"RxC\" or [rows, cols], got " + in_quotes(it->get<std::string>()));
      }
    } else if (it->is_array()) {
      if (it->size() != 2) {
        json_fail(file, k, "expected [rows, cols], got " + std::to_string(it->size()) + " entries");
      }
      a.block_structure = std::array<int, 2>{json_int((*it)[0], file, k + "[0]"),
                                             json_int((*it)[1], file, k + "[1]")};
    } else {
      json_fail(file, k, "expected a list [rows, cols] or a string \"RxC\", got " + json_kind(*it));
    }
    if ((*a.block_structure)[0] <= 0 || (*a.block_structure)[1] <= 0) {
      json_fail(file, k, "block sizes must be positive, got " +
                             std::to_string((*a.block_structure)[0]) + "x" +
                             std::to_string((*a.block_structure)[1]));
    }
  }
  if (auto it = j.find("dynamic"); it != j.end()) {
    if (it->is_boolean()) {
      a.dynamic = it->get<bool>() ? DynamicMode::kDynamic : DynamicMode::kStatic;
    } else if (it->is_string() && lower(it->get<std::string>()) == "local") {
      a.dynamic = DynamicMode::kLocal;
    } else {
      json_fail(file, key("dynamic"), "expected true, false or \"local\", got " +
                                          (it->is_string() ? in_quotes(it->get<std::string>())
                                                           : json_kind(*it)));
    }
  }
  if (auto it = j.find("actorder"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      a.actorder = it->get<bool>() ? ActOrder::kGroup : ActOrder::kNone;
    } else if (it->is_string()) {
      const std::string s = lower(it->get<std::string>());
      if (s == "group" || s == "dynamic") {
        a.actorder = ActOrder::kGroup;
      } else if (s == "weight" || s == "static") {
        a.actorder = ActOrder::kWeight;
      } else {
        json_fail(file, key("actorder"),
                  "expected \"group\", \"weight\", \"dynamic\", \"static\", a boolean or null, got " +
                      in_quotes(it->get<std::string>()));
      }
    } else {
      json_fail(file, key("actorder"), "expected a string, a boolean or null, got " + json_kind(*it));
    }
  }
  if (auto it = j.find("scale_dtype"); it != j.end() && !it->is_null()) {
    a.scale_dtype = dtype_name_of(json_string(*it, file, key("scale_dtype")));
  }
  if (auto it = j.find("zp_dtype"); it != j.end() && !it->is_null()) {
    a.zp_dtype = dtype_name_of(json_string(*it, file, key("zp_dtype")));
  }

  // Strategy inference from group_size (CT: null -> tensor, > 0 -> group, -1 -> channel).
  if (strategy) {
    a.strategy = *strategy;
  } else if (!a.group_size) {
    a.strategy = Strategy::kTensor;
  } else if (*a.group_size > 0) {
    a.strategy = Strategy::kGroup;
  } else if (*a.group_size == -1) {
    a.strategy = Strategy::kChannel;
  } else {
    json_fail(file, key("group_size"),
              "group_size 0 without a strategy is invalid (use -1 for per channel)");
  }
  const std::string strat = to_string(a.strategy);

  const bool grouped = a.strategy == Strategy::kGroup || a.strategy == Strategy::kTensorGroup;
  if (grouped && (!a.group_size || *a.group_size <= 0)) {
    json_fail(file, key("group_size"),
              "strategy " + strat + " requires a positive group_size, got " +
                  (a.group_size ? std::to_string(*a.group_size) : std::string("null")));
  }
  if (!grouped && a.group_size && *a.group_size > 0) {
    json_fail(file, key("group_size"),
              "group_size " + std::to_string(*a.group_size) +
                  " requires strategy group or tensor_group, got " + strat);
  }
  if (a.strategy == Strategy::kBlock && !a.block_structure) {
    json_fail(file, key("block_structure"), "strategy block requires block_structure");
  }
  if (a.strategy != Strategy::kBlock && a.block_structure) {
    json_fail(file, key("block_structure"), "block_structure requires strategy block, got " + strat);
  }
  if (a.strategy == Strategy::kToken && !a.is_dynamic()) {
    json_fail(file, key("dynamic"), "strategy token requires dynamic: true (no static per-token scales)");
  }
  if (a.dynamic == DynamicMode::kLocal && a.strategy != Strategy::kTensorGroup) {
    json_fail(file, key("dynamic"), "dynamic \"local\" requires strategy tensor_group, got " + strat);
  }
  if (a.is_dynamic() && a.strategy != Strategy::kToken && a.strategy != Strategy::kTensor &&
      a.strategy != Strategy::kTensorGroup && a.strategy != Strategy::kGroup) {
    json_fail(file, key("dynamic"),
              "dynamic quantization requires strategy token, tensor, tensor_group or group, got " +
                  strat);
  }
  if (a.actorder == ActOrder::kGroup && !grouped) {
    json_fail(file, key("actorder"),
              "actorder group requires strategy group or tensor_group, got " + strat);
  }
  if (role != ArgsRole::kWeights) {
    if (a.actorder != ActOrder::kNone) {
      json_fail(file, key("actorder"), "actorder is only valid for weights");
    }
    if (role == ArgsRole::kInput &&
        (a.strategy == Strategy::kChannel || a.strategy == Strategy::kBlock)) {
      json_fail(file, key("strategy"),
                "input activations need strategy token, tensor, group, tensor_group or attn_head, "
                "got " + strat);
    }
  }
  if (!a.zp_dtype) a.zp_dtype = inferred_zp_dtype(a);
  return a;
}

// ---- presets (compressed-tensors §3.3) ----

QuantArgs make_args(int bits, QuantType type, Strategy strategy, std::optional<int> group_size,
                    DynamicMode dynamic = DynamicMode::kStatic, bool symmetric = true) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = type;
  a.strategy = strategy;
  a.group_size = group_size;
  a.dynamic = dynamic;
  a.symmetric = symmetric;
  a.zp_dtype = inferred_zp_dtype(a);
  return a;
}

QuantArgs int_group128(int bits, bool symmetric = true) {
  return make_args(bits, QuantType::kInt, Strategy::kGroup, 128, DynamicMode::kStatic, symmetric);
}

QuantArgs token_dynamic(int bits, QuantType type) {
  return make_args(bits, type, Strategy::kToken, std::nullopt, DynamicMode::kDynamic);
}

QuantArgs with_scale_dtype(QuantArgs a, const char* dtype) {
  a.scale_dtype = dtype;
  return a;
}

// Parses "W{x}A{y}" of the 0.18 WxAy family: W2..8A16, W2..7A8, W2..4A4.
bool wxay_preset(const std::string& name, QuantScheme& s) {
  if (name.size() < 4 || name[0] != 'W' || name[1] < '2' || name[1] > '8' || name[2] != 'A') {
    return false;
  }
  const int x = name[1] - '0';
  const std::string y = name.substr(3);
  if (y == "16") {
    s.weights = int_group128(x);
    return true;
  }
  if ((y == "8" && x <= 7) || (y == "4" && x <= 4)) {
    s.weights = int_group128(x);
    s.input_activations = token_dynamic(std::stoi(y), QuantType::kInt);
    return true;
  }
  return false;
}

// Fills the args of a preset scheme (the name is upper-cased as CT does); false if unknown.
bool preset_scheme(const std::string& name, QuantScheme& s) {
  using enum Strategy;
  const auto kF = QuantType::kFloat;
  const auto kI = QuantType::kInt;
  if (name == "UNQUANTIZED") return true;
  if (name == "W4A16") {
    s.weights = int_group128(4);
  } else if (name == "W4A16_ASYM") {
    s.weights = int_group128(4, false);
  } else if (name == "W8A16") {
    s.weights = int_group128(8);  // group 128 since CT 0.16 (per channel before)
  } else if (name == "W8A8" || name == "INT8") {
    s.weights = make_args(8, kI, kChannel, -1);
    s.input_activations = token_dynamic(8, kI);
  } else if (name == "W4A8") {
    s.weights = int_group128(4);
    s.input_activations = token_dynamic(8, kI);
  } else if (name == "W4AFP8") {
    s.weights = int_group128(4);
    s.input_activations = token_dynamic(8, kF);
  } else if (name == "FP8") {
    s.weights = make_args(8, kF, kTensor, std::nullopt);
    s.input_activations = make_args(8, kF, kTensor, std::nullopt);
  } else if (name == "FP8_DYNAMIC") {
    s.weights = make_args(8, kF, kChannel, -1);
    s.input_activations = token_dynamic(8, kF);
  } else if (name == "FP8_BLOCK") {
    QuantArgs w = make_args(8, kF, kBlock, std::nullopt);
    w.block_structure = std::array<int, 2>{128, 128};
    s.weights = w;
    s.input_activations = make_args(8, kF, kGroup, 128, DynamicMode::kDynamic);
  } else if (name == "NVFP4A16" || name == "NVFP4") {
    s.weights = with_scale_dtype(make_args(4, kF, kTensorGroup, 16), "float8_e4m3fn");
    if (name == "NVFP4") {
      s.input_activations = with_scale_dtype(
          make_args(4, kF, kTensorGroup, 16, DynamicMode::kLocal), "float8_e4m3fn");
    }
  } else if (name == "MXFP4A16" || name == "MXFP4") {
    s.weights = with_scale_dtype(make_args(4, kF, kGroup, 32), "uint8");
    if (name == "MXFP4") {
      s.input_activations =
          with_scale_dtype(make_args(4, kF, kGroup, 32, DynamicMode::kDynamic), "uint8");
    }
  } else if (name == "MXFP8A16" || name == "MXFP8") {
    s.weights = with_scale_dtype(make_args(8, kF, kGroup, 32), "uint8");
    if (name == "MXFP8") {
      s.input_activations =
          with_scale_dtype(make_args(8, kF, kGroup, 32, DynamicMode::kDynamic), "uint8");
    }
  } else {
    return wxay_preset(name, s);
  }
  return true;
}

std::vector<std::string> parse_targets(const Json& v, const std::string& file,
                                       const std::string& path) {
  if (!v.is_array()) json_fail(file, path, "expected a list of strings, got " + json_kind(v));
  std::vector<std::string> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(json_string(v[i], file, path + "[" + std::to_string(i) + "]"));
  }
  return out;
}

// vLLM drops a group whose targets are one attention class (attention quant is tied to KV cache).
bool is_attention_only(const std::vector<std::string>& targets) {
  return targets.size() == 1 && ends_with(targets[0], "Attention");
}

// nullopt: the group was dropped as attention-only (its name goes to dropped_attention_groups).
std::optional<QuantScheme> parse_group(const std::string& name, const Json& v,
                                       const std::string& file, const std::string& path) {
  QuantScheme s;
  s.name = name;
  if (v.is_array()) {
    s.targets = parse_targets(v, file, path);
    if (is_attention_only(s.targets)) return std::nullopt;
    if (!preset_scheme(upper(name), s)) {
      json_fail(file, path,
                "a list of targets needs a preset scheme name as its key; unknown preset " +
                    in_quotes(name));
    }
    return s;
  }
  if (!v.is_object()) {
    json_fail(file, path, "expected a scheme object or a list of targets, got " + json_kind(v));
  }
  const auto t = v.find("targets");
  if (t == v.end()) json_fail(file, key_path(path, "targets"), "missing required key");
  s.targets = parse_targets(*t, file, key_path(path, "targets"));
  if (is_attention_only(s.targets)) return std::nullopt;

  if (auto it = v.find("weights"); it != v.end() && !it->is_null()) {
    s.weights = parse_args(*it, file, key_path(path, "weights"), ArgsRole::kWeights);
  }
  // vLLM reads input args only when the entry is truthy, so an empty object counts as absent.
  if (auto it = v.find("input_activations");
      it != v.end() && !it->is_null() && !(it->is_object() && it->empty())) {
    s.input_activations =
        parse_args(*it, file, key_path(path, "input_activations"), ArgsRole::kInput);
  }
  if (auto it = v.find("output_activations"); it != v.end() && !it->is_null()) {
    s.output_activations =
        parse_args(*it, file, key_path(path, "output_activations"), ArgsRole::kOutput);
  }
  if (auto it = v.find("format"); it != v.end() && !it->is_null()) {
    s.format = json_string(*it, file, key_path(path, "format"));
    if (*s.format == "mixed-precision") {
      json_fail(file, key_path(path, "format"),
                "\"mixed-precision\" is only valid as the top-level format");
    }
  }
  return s;
}

std::optional<std::string> optional_string(const Json& j, const char* key, const std::string& file,
                                           const std::string& base) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return json_string(*it, file, key_path(base, key));
}

}  // namespace

namespace detail {

QuantConfig parse_quant_object(const Json& j, const std::string& file, const std::string& base) {
  if (!j.is_object()) json_fail(file, base, "expected an object, got " + json_kind(j));
  QuantConfig c;
  const auto qm = j.find("quant_method");
  if (qm == j.end()) json_fail(file, key_path(base, "quant_method"), "missing required key");
  c.quant_method = json_string(*qm, file, key_path(base, "quant_method"));
  if (c.quant_method != "compressed-tensors") {
    throw NotSupported(file + ": " + key_path(base, "quant_method") + ": " +
                       in_quotes(c.quant_method) +
                       " is not supported (qmoe reads \"compressed-tensors\" checkpoints only)");
  }
  c.version = optional_string(j, "version", file, base).value_or("");
  c.format = optional_string(j, "format", file, base).value_or("");
  c.quantization_status = optional_string(j, "quantization_status", file, base).value_or("");
  if (auto it = j.find("ignore"); it != j.end() && !it->is_null()) {
    c.ignore = parse_targets(*it, file, key_path(base, "ignore"));
  }
  const auto groups = j.find("config_groups");
  const std::string groups_path = key_path(base, "config_groups");
  if (groups == j.end()) json_fail(file, groups_path, "missing required key");
  if (!groups->is_object()) {
    json_fail(file, groups_path, "expected an object, got " + json_kind(*groups));
  }
  for (const auto& [name, value] : groups->items()) {
    auto scheme = parse_group(name, value, file, key_path(groups_path, name));
    if (scheme) {
      c.groups.push_back(std::move(*scheme));
    } else {
      c.dropped_attention_groups.push_back(name);
    }
  }
  return c;
}

}  // namespace detail

QuantConfig parse_quant_config(const std::string& json_text, const std::string& what) {
  return detail::parse_quant_object(detail::parse_json_text(json_text, what), what, "");
}

std::string to_string(QuantType t) { return t == QuantType::kInt ? "int" : "float"; }

std::string to_string(Strategy s) {
  switch (s) {
    case Strategy::kTensor: return "tensor";
    case Strategy::kChannel: return "channel";
    case Strategy::kGroup: return "group";
    case Strategy::kBlock: return "block";
    case Strategy::kToken: return "token";
    case Strategy::kTensorGroup: return "tensor_group";
    case Strategy::kAttnHead: return "attn_head";
  }
  return "?";
}

std::string to_string(DynamicMode d) {
  switch (d) {
    case DynamicMode::kStatic: return "false";
    case DynamicMode::kDynamic: return "true";
    case DynamicMode::kLocal: return "local";
  }
  return "?";
}

std::string to_string(ActOrder a) {
  switch (a) {
    case ActOrder::kNone: return "none";
    case ActOrder::kGroup: return "group";
    case ActOrder::kWeight: return "weight";
  }
  return "?";
}

std::string to_string(const QuantArgs& a) {
  std::string s = "num_bits=" + std::to_string(a.num_bits) + " type=" + to_string(a.type) +
                  " symmetric=" + (a.symmetric ? "true" : "false") + " group_size=" +
                  (a.group_size ? std::to_string(*a.group_size) : "None") +
                  " strategy=" + to_string(a.strategy) + " block_structure=";
  s += a.block_structure ? "[" + std::to_string((*a.block_structure)[0]) + ", " +
                               std::to_string((*a.block_structure)[1]) + "]"
                         : std::string("None");
  s += " dynamic=" + to_string(a.dynamic);
  s += " actorder=" + (a.actorder == ActOrder::kNone ? std::string("None") : to_string(a.actorder));
  s += " scale_dtype=" + a.scale_dtype.value_or("None");
  s += " zp_dtype=" + a.zp_dtype.value_or("None");
  return s;
}

bool is_activation_quant_format(const std::string& format) {
  return format == "naive-quantized" || format == "int-quantized" ||
         format == "float-quantized" || format == "nvfp4-pack-quantized" ||
         format == "mxfp4-pack-quantized";
}

}  // namespace qmoe
