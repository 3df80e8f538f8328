// vLLM's compressed-tensors MoE dispatch (reference version, see vllm-moe-system.md §1 and §3):
// target map, ignore list, expert-0 scheme lookup, predicates in dispatcher order and the method
// constructors' checks. Messages are vLLM's where vLLM has one.
#include "qmoe/dispatch.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <regex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qmoe/error.h"

namespace qmoe {
namespace {

const char* const kPackQuantized = "pack-quantized";
const char* const kFusedMoeClass = "FusedMoE";  // the module class vLLM matches class targets to

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

#if defined(__GLIBCXX__)
// libstdc++'s default executor backtracks, which is exponential on patterns such as ".**x" or
// "(a*)*b" (found by fuzzing); its polynomial mode runs an NFA simulation instead and refuses
// back-references, which target patterns do not use.
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kRegexFlags = std::regex::ECMAScript;
#endif

// The library compiles patterns recursively (per group level and per atom), so bounded input keeps
// a hostile config from overflowing the stack; real target patterns are short module paths.
constexpr size_t kMaxPatternChars = 4096;
constexpr int kMaxGroupDepth = 256;

std::string shown_pattern(const std::string& pattern) {
  constexpr size_t kShown = 80;
  return pattern.size() <= kShown ? pattern : pattern.substr(0, kShown) + "...";
}

int group_depth(const std::string& pattern) {
  int depth = 0;
  int max_depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      ++i;  // the escaped character is literal
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ')') {
      --depth;
    }
  }
  return max_depth;
}

// Compiled patterns are cached: the same few targets are tested for every layer.
const std::regex& compiled(const std::string& pattern) {
  thread_local std::unordered_map<std::string, std::regex> cache;
  if (auto it = cache.find(pattern); it != cache.end()) return it->second;
  if (pattern.size() > kMaxPatternChars) {
    throw Error("regular expression \"re:" + shown_pattern(pattern) + "\" is too long (" +
                std::to_string(pattern.size()) + " characters, at most " +
                std::to_string(kMaxPatternChars) + ")");
  }
  if (group_depth(pattern) > kMaxGroupDepth) {
    throw Error("regular expression \"re:" + shown_pattern(pattern) + "\" nests groups deeper than " +
                std::to_string(kMaxGroupDepth));
  }
  if (cache.size() > 256) cache.clear();
  try {
    return cache.emplace(pattern, std::regex(pattern, kRegexFlags)).first->second;
  } catch (const std::regex_error& e) {
    throw Error("invalid regular expression \"re:" + pattern + "\": " + e.what());
  }
}

// Python re.match: anchored at the start only.
bool regex_match_from_start(const std::string& pattern, const std::string& value) {
  std::smatch m;
  return std::regex_search(value, m, compiled(pattern), std::regex_constants::match_continuous);
}

// vLLM's class pass: regex targets are matched against the class name too; other targets are a
// case-insensitive substring test ("Linear" matches "QKVParallelLinear").
bool class_matches(const std::string& target, const std::string& class_name) {
  if (starts_with(target, "re:")) return regex_match_from_start(target.substr(3), class_name);
  return lower(class_name).find(lower(target)) != std::string::npos;
}

std::string format_or_none(const std::string& f) { return f.empty() ? "None" : f; }

std::string args_or_none(const std::optional<QuantArgs>& a) { return a ? to_string(*a) : "None"; }

std::string effective_format(const QuantConfig& c, const QuantScheme& g) {
  return g.format ? *g.format : c.format;
}

// vLLM parses every group at config load; these groups make that load fail.
void check_groups_as_vllm_parses_them(const QuantConfig& c) {
  for (const auto& g : c.groups) {
    if (!g.weights) {
      throw Error("config group \"" + g.name +
                  "\" has no weights; vLLM cannot parse a compressed-tensors config group "
                  "without weight args");
    }
    const std::string fmt = effective_format(c, g);
    if (is_activation_quant_format(fmt) && !g.input_activations &&
        g.weights->type != QuantType::kFloat) {
      throw Error("config group \"" + g.name + "\" uses activation-quantization format " + fmt +
                  " without input_activations, which vLLM accepts only for float weights (it "
                  "fails an assertion), got weights.type=" + to_string(g.weights->type));
    }
  }
}

struct TargetEntry {
  std::string target;
  const QuantScheme* group;
};

// target -> scheme in config order; a later duplicate overwrites but keeps the first position.
std::vector<TargetEntry> target_scheme_map(const QuantConfig& c) {
  std::vector<TargetEntry> map;
  auto find = [&](const std::string& t) {
    return std::find_if(map.begin(), map.end(), [&](const TargetEntry& e) { return e.target == t; });
  };
  for (const auto& g : c.groups) {
    for (const auto& t : g.targets) {
      if (auto it = find(t); it != map.end()) {
        it->group = &g;
      } else {
        map.push_back({t, &g});
      }
    }
  }
  // FusedMoE's class name does not contain "linear", so vLLM aliases the Linear scheme to it.
  if (auto lin = find("Linear"); lin != map.end() && find(kFusedMoeClass) == map.end()) {
    map.push_back({kFusedMoeClass, lin->group});
  }
  return map;
}

// vLLM's per-projection scheme dict: {weights, input_activations, format}.
struct SchemeDict {
  const QuantScheme* group = nullptr;
  std::string target;
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input;
  std::string format;

  bool same_as(const SchemeDict& o) const {
    return weights == o.weights && input == o.input && format == o.format;
  }
};

SchemeDict dict_of(const QuantConfig& c, const TargetEntry& e) {
  return SchemeDict{e.group, e.target, e.group->weights, e.group->input_activations,
                    effective_format(c, *e.group)};
}

bool is_ignored(const QuantConfig& c, const std::string& name) {
  return std::any_of(c.ignore.begin(), c.ignore.end(),
                     [&](const std::string& i) { return target_matches_name(i, name); });
}

// NEWER vLLM (_get_moe_scheme_dicts): candidates = every prefix alias x {vLLM name, checkpoint
// name}; ignored if any candidate is ignored; names first, then the module class for the first.
std::optional<SchemeDict> projection_scheme(const QuantConfig& c,
                                            const std::vector<TargetEntry>& map,
                                            const std::vector<std::string>& prefixes,
                                            const std::string& canonical,
                                            const std::string& ckpt_name) {
  std::vector<std::string> names{canonical};
  if (!ckpt_name.empty() && ckpt_name != canonical) names.push_back(ckpt_name);
  std::vector<std::string> candidates;
  for (const auto& p : prefixes) {
    for (const auto& n : names) candidates.push_back(p + ".0." + n);
  }
  if (std::any_of(candidates.begin(), candidates.end(),
                  [&](const std::string& n) { return is_ignored(c, n); })) {
    return std::nullopt;
  }
  for (const auto& cand : candidates) {
    for (const auto& e : map) {
      if (target_matches_name(e.target, cand)) return dict_of(c, e);
    }
  }
  for (const auto& e : map) {
    if (class_matches(e.target, kFusedMoeClass)) return dict_of(c, e);
  }
  throw Error("Unable to find matching target for " + candidates[0] +
              " in the compressed-tensors config.");
}

// ---- predicates (vllm-moe-system.md §1.2) ----

using Args = std::optional<QuantArgs>;

bool is_nvfp4_format(const Args& q) {
  return q && q->strategy == Strategy::kTensorGroup && q->symmetric && q->group_size == 16 &&
         q->type == QuantType::kFloat && q->num_bits == 4;
}

bool is_mxfp4(const Args& q) {
  return q && q->strategy == Strategy::kGroup && q->symmetric && q->group_size == 32 &&
         q->type == QuantType::kFloat && q->num_bits == 4;
}

// Checks neither type nor bits (the reference version dropped the symmetric check too).
bool is_wna16_group_channel(const Args& w, const Args& a) {
  return !a && w && (w->strategy == Strategy::kChannel || w->strategy == Strategy::kGroup) &&
         !w->is_dynamic();
}

bool is_fp8_w8a8(const Args& w, const Args& a) {
  if (!w || !a) return false;
  const bool float_types = w->type == QuantType::kFloat && a->type == QuantType::kFloat;
  const bool weight_ok = w->symmetric && !w->is_dynamic() &&
                         (w->strategy == Strategy::kTensor || w->strategy == Strategy::kChannel ||
                          w->strategy == Strategy::kBlock);
  if (!float_types || !weight_ok) return false;
  if (a->is_dynamic()) return true;
  return a->symmetric && a->strategy == Strategy::kTensor;
}

bool is_dynamic_token_w8a8(const Args& w, const Args& a) {
  return w && a && w->num_bits == 8 && a->num_bits == 8 &&
         (w->strategy == Strategy::kTensor || w->strategy == Strategy::kChannel) &&
         a->strategy == Strategy::kToken && w->symmetric && !w->is_dynamic() && a->is_dynamic();
}

// Types are not checked, so int8-activation W4A8 matches too (§8 item 5).
bool is_fp8_w4a8(const Args& w, const Args& a) {
  return w && a && w->num_bits == 4 && a->num_bits == 8 && w->strategy == Strategy::kGroup &&
         a->strategy == Strategy::kToken && !w->is_dynamic() && a->is_dynamic() &&
         w->symmetric && a->symmetric;
}

bool is_fp8_w4a8_sm90(const Args& w, const Args& a, Target target) {
  return capability_of(target) == 90 && is_fp8_w4a8(w, a);
}

bool is_dynamic_token_w4a8_int(const Args& w, const Args& a) {
  return w && a && w->num_bits == 4 && a->num_bits == 8 &&
         (w->strategy == Strategy::kGroup || w->strategy == Strategy::kChannel) &&
         a->strategy == Strategy::kToken && w->symmetric && !w->is_dynamic() && a->is_dynamic();
}

// ---- method constructors ----

void set_method(DispatchDecision& d, MoeMethod m) {
  d.method = m;
  d.vllm_class = vllm_class_name(m);
}

void wna16(DispatchDecision& d, const QuantArgs& w, const MoeDispatchInput& layer, Target target) {
  const std::string& fmt = d.scheme.format;
  if (!(w.num_bits == 4 || w.num_bits == 8) || fmt != kPackQuantized) {
    throw Error(std::string("For Fused MoE layers, only format: ") + kPackQuantized +
                " and bits: [4, 8] is supported but got format: " + format_or_none(fmt) +
                " and bits: " + std::to_string(w.num_bits));
  }
  // Python's `group_size or -1`.
  const int g = w.group_size && *w.group_size != 0 ? *w.group_size : -1;
  d.marlin_compatible = marlin_supports_layer(layer.hidden, layer.inter, g,
                                              layer.router_weight_on_input);
  if (w.type == QuantType::kFloat) {
    d.notes.push_back("weights.type is float, but vLLM's WNA16 path does not check the type and "
                      "reads the weights as integers");
  }
  if (!d.marlin_compatible) {
    if (w.strategy == Strategy::kGroup && w.actorder == ActOrder::kGroup) {
      throw Error("WNA16MoE is not supported with actorder=group/dynamic.");
    }
    if (w.strategy != Strategy::kGroup) {
      throw Error("CompressedTensorsWNA16MoEMethod supports strategy group only, got " +
                  to_string(w.strategy) + " (vLLM fails an assertion)");
    }
    if (!w.symmetric) throw Error("Only symmetric quantization is supported for MoE");
    set_method(d, MoeMethod::kWna16Triton);
    d.notes.push_back("layer shape not Marlin-compatible (H % 128, I % max(64, g), g in "
                      "{-1, 32, 64, 128}, no router weight on input): Triton WNA16");
    return;
  }
  set_method(d, MoeMethod::kWna16Marlin);
  if (!w.symmetric) {
    d.notes.push_back("asymmetric weights (zero points): the reference vLLM Marlin MoE asserts "
                      "symmetric; qmoe follows newer vLLM, which supports zero points");
  }
  if (target == Target::kCpu) {
    d.notes.push_back("vLLM's reference version has no CPU kernel for this method; qmoe runs the "
                      "same math on the CPU");
  }
}

void nvfp4(DispatchDecision& d, const Args& a, const MoeDispatchInput& layer, Target target) {
  if (!(is_nvfp4_format(a) || !a)) {
    throw Error("For NVFP4 weights, input quantization must also be NVFP4 format or None for "
                "NVFP4A16, found " + args_or_none(a));
  }
  set_method(d, MoeMethod::kNvfp4);
  d.nvfp4_use_a16 = !a;
  if (d.nvfp4_use_a16) {
    d.notes.push_back("NVFP4A16: no input_activations, so use_a16 = true (weight-only, "
                      "activations stay 16-bit)");
  } else if (target == Target::kSm90) {
    d.notes.push_back("on sm90 vLLM runs NVFP4 W4A4 as weight-only Marlin (activations not "
                      "quantized)");
  } else if (target == Target::kSm100) {
    d.notes.push_back("NVFP4 W4A4: activations quantized to NVFP4 at run time");
  }
  if (layer.activation != Activation::kSilu) {
    d.vllm_rejection = "Only SiLU activation is supported, not " + to_string(layer.activation) + ".";
  }
}

void fp8(DispatchDecision& d, const QuantArgs& w, const QuantArgs& a,
         const MoeDispatchInput& layer) {
  const bool per_tensor = w.strategy == Strategy::kTensor && a.strategy == Strategy::kTensor;
  const bool per_channel = w.strategy == Strategy::kChannel && a.strategy == Strategy::kToken;
  if (!per_tensor && !per_channel && w.strategy != Strategy::kBlock) {
    throw Error("FP8 MoE: unsupported weight/activation strategy combination W=" +
                to_string(w.strategy) + " A=" + to_string(a.strategy) +
                " (vLLM fails an assertion)");
  }
  const bool static_inputs = !a.is_dynamic();
  if (static_inputs && per_channel) {
    throw Error("For FP8 Fused MoE layer, we require either per tensor or channelwise, dynamic "
                "per token quantization.");
  }
  if (!per_tensor && !per_channel && w.block_structure) {
    const int bn = (*w.block_structure)[0];
    const int bk = (*w.block_structure)[1];
    if (layer.inter % bn != 0) {
      throw Error("The output_size of gate's and up's weight = " + std::to_string(layer.inter) +
                  " is not divisible by weight quantization block_n = " + std::to_string(bn) + ".");
    }
    if (layer.tp_size > 1 && layer.inter % bk != 0) {
      throw Error("The input_size of down's weight = " + std::to_string(layer.inter) +
                  " is not divisible by weight quantization block_k = " + std::to_string(bk) + ".");
    }
  }
  set_method(d, MoeMethod::kFp8);
  if (per_tensor) {
    d.notes.push_back("per-tensor FP8: gate and up are requantized to their shared max scale "
                      "at load");
    if (static_inputs) {
      d.notes.push_back("static input scales collapse to one max over all experts");
    }
  }
}

void int8(DispatchDecision& d, const QuantArgs& w, const QuantArgs& a) {
  if (!(w.strategy == Strategy::kChannel && a.strategy == Strategy::kToken)) {
    throw Error("For INT8 Fused MoE layers, we require channelwise, dynamic per token "
                "quantization. Found " + to_string(w) + ", " + to_string(a));
  }
  if (!a.is_dynamic()) {
    throw Error("For INT8 Fused MoE layers, we require channelwise, dynamic per token "
                "quantization. Found static input scales.");
  }
  set_method(d, MoeMethod::kInt8);
  if (!a.symmetric) {
    d.notes.push_back("asymmetric int8 activations: vLLM's MoE path ignores the zero point");
  }
}

void w4a8_fp8(DispatchDecision& d, const QuantArgs& w, const QuantArgs& a,
              const MoeDispatchInput& layer) {
  if (!w.symmetric) throw Error("Only symmetric quantization is supported for W4A8 MoE");
  if (w.actorder == ActOrder::kGroup) {
    throw Error("W4A8 MoE: actorder=group is not supported (vLLM fails an assertion)");
  }
  if (w.group_size != 128) throw Error("Only group size 128 supported for W4A8 MoE");
  if (layer.hidden % 256 != 0) {
    throw Error("hidden_size=" + std::to_string(layer.hidden) + " must be divisible by 256");
  }
  if (layer.inter % 256 != 0) {
    throw Error("intermediate_size_per_partition=" + std::to_string(layer.inter) +
                " must be divisible by 256");
  }
  set_method(d, MoeMethod::kW4A8Fp8);
  d.notes.push_back("W4A8-FP8 weights are held as vLLM's kernel feeds them, fp8(q * s8) with a scale "
                    "per row: 1 byte per weight, twice the checkpoint's int4 (docs/numerics.md; "
                    "LoadOptions::w4a8_fp8_int4 / qmoe run --w4a8-int4 keep the int4 codes, exact products)");
  if (a.type == QuantType::kInt) {
    d.notes.push_back("W4A8 with int8 activation args is routed to the FP8-activation method on "
                      "sm90 (vLLM's _is_fp8_w4a8 does not check types): activations are "
                      "quantized to FP8");
  }
}

void w4a8_int8(DispatchDecision& d, const QuantArgs& w, const QuantArgs& a,
               const MoeDispatchInput& layer, Target target) {
  if (!(a.strategy == Strategy::kToken && a.is_dynamic())) {
    throw Error("W4A8-int MoE needs dynamic per-token activation quantization.");
  }
  if (w.num_bits != 4) throw Error("This method only supports 4-bit weights (num_bits=4).");
  set_method(d, MoeMethod::kW4A8Int8);
  if (target != Target::kCpu) {
    d.vllm_rejection = "CompressedTensorsW4A8Int8MoEMethod is CPU-only.";
  } else if (layer.activation != Activation::kSilu && layer.activation != Activation::kSwigluOai &&
             layer.activation != Activation::kSwigluStep) {
    d.vllm_rejection = "Only SiLU/SwiGLUGU/SwiGLUUG are supported.";
  }
  if (a.type == QuantType::kFloat) {
    d.notes.push_back("activation args are float, but vLLM's W4A8-int predicate does not check "
                      "types: activations are quantized to int8");
  }
}

}  // namespace

std::string to_string(Target t) {
  switch (t) {
    case Target::kSm90: return "sm90";
    case Target::kSm100: return "sm100";
    case Target::kCpu: return "cpu";
  }
  return "?";
}

std::optional<Target> parse_target(const std::string& name) {
  const std::string n = lower(name);
  if (n == "sm90" || n == "sm_90" || n == "90") return Target::kSm90;
  if (n == "sm100" || n == "sm_100" || n == "100") return Target::kSm100;
  if (n == "cpu") return Target::kCpu;
  return std::nullopt;
}

int capability_of(Target t) {
  switch (t) {
    case Target::kSm90: return 90;
    case Target::kSm100: return 100;
    case Target::kCpu: return 0;
  }
  return 0;
}

std::string to_string(MoeMethod m) {
  switch (m) {
    case MoeMethod::kUnquantized: return "unquantized";
    case MoeMethod::kWna16Marlin: return "wna16_marlin";
    case MoeMethod::kWna16Triton: return "wna16_triton";
    case MoeMethod::kMxfp4: return "mxfp4";
    case MoeMethod::kNvfp4: return "nvfp4";
    case MoeMethod::kFp8: return "fp8";
    case MoeMethod::kInt8: return "int8";
    case MoeMethod::kW4A8Fp8: return "w4a8_fp8";
    case MoeMethod::kW4A8Int8: return "w4a8_int8";
  }
  return "?";
}

std::string vllm_class_name(MoeMethod m) {
  switch (m) {
    case MoeMethod::kUnquantized: return "UnquantizedFusedMoEMethod";
    case MoeMethod::kWna16Marlin: return "CompressedTensorsWNA16MarlinMoEMethod";
    case MoeMethod::kWna16Triton: return "CompressedTensorsWNA16MoEMethod";
    case MoeMethod::kMxfp4: return "CompressedTensorsW4A4Mxfp4MoEMethod";
    case MoeMethod::kNvfp4: return "CompressedTensorsW4A4Nvfp4MoEMethod";
    case MoeMethod::kFp8: return "CompressedTensorsW8A8Fp8MoEMethod";
    case MoeMethod::kInt8: return "CompressedTensorsW8A8Int8MoEMethod";
    case MoeMethod::kW4A8Fp8: return "CompressedTensorsW4A8Fp8MoEMethod";
    case MoeMethod::kW4A8Int8: return "CompressedTensorsW4A8Int8MoEMethod";
  }
  return "?";
}

bool target_matches_name(const std::string& target, const std::string& name) {
  if (starts_with(target, "re:")) return regex_match_from_start(target.substr(3), name);
  return target == name;
}

bool marlin_supports_layer(int hidden, int inter, int group_size, bool router_weight_on_input) {
  const bool group_ok =
      group_size == -1 || group_size == 32 || group_size == 64 || group_size == 128;
  if (!group_ok || router_weight_on_input) return false;
  return hidden % 128 == 0 && inter % std::max(64, group_size) == 0;
}

LayerScheme resolve_moe_scheme(const QuantConfig& config, const MoeDispatchInput& layer) {
  check_groups_as_vllm_parses_them(config);
  const std::vector<TargetEntry> map = target_scheme_map(config);

  std::vector<std::string> prefixes{layer.experts_prefix};
  const std::pair<std::string, std::string> alias{".block_sparse_moe.experts", ".mlp.experts"};
  for (const auto& [from, to] : {alias, std::pair{alias.second, alias.first}}) {
    if (layer.experts_prefix.find(from) != std::string::npos) {
      prefixes.push_back(replace_all(layer.experts_prefix, from, to));
    }
  }

  const std::array<std::pair<const char*, const std::string*>, 3> projections{{
      {"gate_proj", &layer.ckpt_gate_name},
      {"up_proj", &layer.ckpt_up_name},
      {"down_proj", &layer.ckpt_down_name},
  }};
  std::vector<std::optional<SchemeDict>> dicts;
  for (const auto& [canonical, ckpt] : projections) {
    dicts.push_back(projection_scheme(config, map, prefixes, canonical, *ckpt));
  }
  // vLLM pops the last (down_proj) and compares the others with it.
  const std::optional<SchemeDict> chosen = dicts.back();
  for (const auto& d : dicts) {
    const bool same = d.has_value() == chosen.has_value() && (!d || d->same_as(*chosen));
    if (!same) {
      throw Error("All MoE projections need to have same quantization scheme but found multiple");
    }
  }

  LayerScheme s;
  if (!chosen) {
    s.ignored = true;
    return s;
  }
  s.group_name = chosen->group->name;
  s.matched_target = chosen->target;
  s.weights = chosen->weights;
  s.input = chosen->input;
  s.format = chosen->format;
  return s;
}

DispatchDecision dispatch_moe(const QuantConfig* config, const MoeDispatchInput& layer,
                              Target target) {
  DispatchDecision d;
  set_method(d, MoeMethod::kUnquantized);
  if (config == nullptr) {
    d.notes.push_back("no quantization_config: the layer is not quantized");
    return d;
  }
  d.scheme = resolve_moe_scheme(*config, layer);
  if (d.scheme.ignored) {
    d.notes.push_back("expert projections matched by ignore: unquantized");
    return d;
  }
  const Args& w = d.scheme.weights;
  const Args& a = d.scheme.input;

  if (is_mxfp4(w)) {
    set_method(d, MoeMethod::kMxfp4);
    d.notes.push_back(a ? "MXFP4: activation args ignored, vLLM runs weight-only (activations "
                          "not quantized)"
                        : "MXFP4A16: weight-only");
  } else if (is_wna16_group_channel(w, a)) {
    wna16(d, *w, layer, target);
  } else if (is_nvfp4_format(w)) {
    nvfp4(d, a, layer, target);
  } else if (is_fp8_w8a8(w, a)) {  // the sm90/sm100 variants only add a capability condition
    fp8(d, *w, *a, layer);
  } else if (is_dynamic_token_w8a8(w, a)) {
    int8(d, *w, *a);
  } else if (is_fp8_w4a8_sm90(w, a, target)) {
    w4a8_fp8(d, *w, *a, layer);
  } else if (is_dynamic_token_w4a8_int(w, a)) {
    w4a8_int8(d, *w, *a, layer, target);
  } else {
    // For weight-only schemes vLLM itself dies on an AttributeError before this message.
    throw Error("Unsupported FusedMoe scheme: " + args_or_none(w) + ", " + args_or_none(a));
  }
  return d;
}

}  // namespace qmoe
