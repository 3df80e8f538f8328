#!/usr/bin/env python3
"""Generate the committed compressed-tensors MoE test fixtures.

Every fixture is a tiny, real compressed-tensors checkpoint of one (or two) MoE
layers, produced with the `compressed-tensors` package itself:

  1. build a torch module tree whose module names are the checkpoint names
     (e.g. ``model.layers.0.mlp.experts.3.gate_proj`` as ``nn.Linear``);
  2. attach a ``QuantizationConfig`` with ``apply_quantization_config``;
  3. calibrate qparams with the library's ``calculate_qparams`` /
     ``generate_gparam`` from min/max statistics (what llm-compressor's
     ``memoryless_minmax`` / ``static_minmax`` observers feed them);
  4. compress with ``ModelCompressor`` and save the module state dict;
     ``ModelCompressor.update_config`` writes ``quantization_config``.

Reference outputs (``io.safetensors``) are computed from weights that the
library itself decompresses (``ModelCompressor.decompress_model``) and, for
activation-quantized schemes, with an emulation of vLLM's activation
quantization (``expected_actq``).

Usage:
    /opt/qmoe-venv/bin/python tools/make_fixtures.py --out tests/data/fixtures

compressed-tensors >= 0.19 removed ``actorder: "group"`` (g_idx).  The
``w4a16_actorder_group`` fixture is therefore produced by re-running this script
in a subprocess with compressed-tensors 0.18.0 first on ``PYTHONPATH``
(``--legacy-ct``, default /opt/qmoe-ct018; see tools/requirements-fixtures.txt).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass, field

os.environ.setdefault("TQDM_DISABLE", "1")  # the library's progress bars are noise here

import torch
import torch.nn.functional as F
from loguru import logger
from safetensors.torch import load_file, save_file

import compressed_tensors
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStatus,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
from compressed_tensors.utils.match import match_name
from compressed_tensors.utils.module import replace_direct_state_dict

# expected library warnings (forced pack-quantized format, deprecated actorder)
logger.disable("compressed_tensors")

CT_VERSION = compressed_tensors.__version__
DEFAULT_LEGACY_CT = "/opt/qmoe-ct018"
TOKENS = 16
CALIB_TOKENS = 64
BF16 = torch.bfloat16


# --------------------------------------------------------------------------
# Architectures: checkpoint naming and routing / activation conventions
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    key: str
    architecture: str
    block: str                 # MoE block module under model.layers.L
    router: str                # router module name inside the block
    projs: tuple               # (gate, up, down) checkpoint names
    routing: str               # softmax | grouped_sigmoid | llama4
    act: str = "silu"          # silu | swigluoai
    router_bias: bool = False
    expert_bias: bool = False
    shared_experts: bool = False
    apply_router_weight_on_input: bool = False


ARCHS = {
    "qwen3": Arch("qwen3", "Qwen3MoeForCausalLM", "mlp", "gate",
                  ("gate_proj", "up_proj", "down_proj"), "softmax"),
    "mixtral": Arch("mixtral", "MixtralForCausalLM", "block_sparse_moe", "gate",
                    ("w1", "w3", "w2"), "softmax"),
    "deepseek": Arch("deepseek", "DeepseekV3ForCausalLM", "mlp", "gate",
                     ("gate_proj", "up_proj", "down_proj"), "grouped_sigmoid",
                     shared_experts=True),
    "llama4": Arch("llama4", "Llama4ForCausalLM", "feed_forward", "router",
                   ("gate_proj", "up_proj", "down_proj"), "llama4",
                   apply_router_weight_on_input=True),
    "gptoss": Arch("gptoss", "GptOssForCausalLM", "mlp", "router",
                   ("gate_proj", "up_proj", "down_proj"), "softmax",
                   act="swigluoai", router_bias=True, expert_bias=True),
}

DEEPSEEK_N_GROUP = 4
DEEPSEEK_TOPK_GROUP = 2
DEEPSEEK_SCALING = 2.5
SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702


# --------------------------------------------------------------------------
# Fixture specifications
# --------------------------------------------------------------------------

@dataclass
class Fixture:
    name: str
    arch: str
    preset: str                      # label for the manifest
    scheme: object                   # callable -> QuantizationScheme, or None
    fmt: str | None = None           # forced quantization_format
    H: int = 256
    I: int = 128
    E: int = 4
    top_k: int = 2
    num_layers: int = 1
    extra_ignore: list = field(default_factory=list)   # kept verbatim in ignore
    legacy: bool = False             # needs compressed-tensors 0.18 (g_idx)
    notes: str = ""

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode()) & 0x7FFFFFFF


def preset(name):
    return lambda: preset_name_to_scheme(name, ["Linear"])


def int_weights(bits, strategy, group_size=None, symmetric=True, actorder=None):
    """Weight-only int scheme written the way a recipe would spell it."""
    def make():
        kw = dict(num_bits=bits, type="int", strategy=strategy, symmetric=symmetric,
                  dynamic=False)
        if group_size is not None:
            kw["group_size"] = group_size
        if actorder is not None:
            kw["actorder"] = actorder
        return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**kw))
    return make


def fp8_tensor_dynamic():
    return QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=8, type="float", strategy="tensor",
                                 symmetric=True, dynamic=False),
        input_activations=QuantizationArgs(num_bits=8, type="float", strategy="tensor",
                                           symmetric=True, dynamic=True),
    )


FIXTURES = [
    # ---- Qwen3-MoE ----
    Fixture("w4a16_g128", "qwen3", "W4A16", preset("W4A16")),
    Fixture("w4a16_asym", "qwen3", "W4A16_ASYM", preset("W4A16_ASYM")),
    Fixture("w4a16_actorder_group", "qwen3", "W4A16 + actorder=group",
            int_weights(4, "group", 128, actorder="group"), legacy=True,
            notes="compressed-tensors >=0.19 removed actorder=group, so this one "
                  "comes from 0.18.0; g_idx from a random per-expert column permutation "
                  "(GPTQ-like order), shared by gate/up; down_proj (I=128) has a "
                  "single group so its g_idx is all zeros"),
    Fixture("w4a16_actorder_weight", "qwen3", "W4A16 + actorder=weight",
            int_weights(4, "group", 128, actorder="weight"),
            notes="actorder=weight only changes calibration; layout equals plain g128"),
    Fixture("w4a16_g32", "qwen3", "W4A16 (group_size=32)", int_weights(4, "group", 32)),
    Fixture("w4a16_channel", "qwen3", "W4A16 (channel)", int_weights(4, "channel")),
    Fixture("w8a16", "qwen3", "W8A16", preset("W8A16")),
    Fixture("nvfp4", "qwen3", "NVFP4", preset("NVFP4"),
            notes="gate/up of an expert share weight_global_scale; "
                  "input_global_scale from routed calibration activations"),
    Fixture("nvfp4a16", "qwen3", "NVFP4A16", preset("NVFP4A16"),
            notes="gate/up of an expert share weight_global_scale"),
    Fixture("mxfp4a16", "qwen3", "MXFP4A16", preset("MXFP4A16")),
    Fixture("fp8_static", "qwen3", "FP8", preset("FP8"),
            notes="static per-tensor input_scale per expert from routed calibration "
                  "activations (differs between experts)"),
    Fixture("fp8_tensor_dynamic", "qwen3",
            "custom: FP8 tensor weights + dynamic per-tensor FP8 activations",
            fp8_tensor_dynamic),
    Fixture("fp8_dynamic", "qwen3", "FP8_DYNAMIC", preset("FP8_DYNAMIC")),
    Fixture("int8_w8a8", "qwen3", "W8A8", preset("W8A8")),
    Fixture("w4a8_fp8", "qwen3", "W4AFP8", preset("W4AFP8"), fmt="pack-quantized",
            I=256, notes="format forced to pack-quantized (the library infers "
                         "int-quantized); H=I=256 for the CUTLASS W4A8 path"),
    Fixture("w4a8_int_packed", "qwen3", "W4A8", preset("W4A8"), fmt="pack-quantized",
            notes="format forced to pack-quantized (the library infers int-quantized)"),
    Fixture("w4a8_int_intq", "qwen3", "W4A8", preset("W4A8"),
            notes="library-inferred int-quantized: I8 weight holding int4 values"),
    Fixture("unquantized", "qwen3", "none", None,
            notes="plain bf16, no quantization_config"),
    Fixture("ignored_layer", "qwen3", "W4A16", preset("W4A16"), num_layers=2,
            extra_ignore=["re:model.layers.1.mlp.experts.*"],
            notes="layer 1 experts ignored via regex and stored bf16; "
                  "expected = layer 0, expected_layer1 = layer 1 (same inputs)"),
    # ---- Mixtral ----
    Fixture("mixtral_w4a16_channel", "mixtral", "W4A16 (channel)",
            int_weights(4, "channel")),
    Fixture("mixtral_fp8_dynamic", "mixtral", "FP8_DYNAMIC", preset("FP8_DYNAMIC")),
    # ---- DeepSeek-V3 ----
    Fixture("deepseek_fp8_block", "deepseek", "FP8_BLOCK", preset("FP8_BLOCK"), E=8,
            notes="grouped sigmoid routing with e_score_correction_bias; "
                  "shared expert quantized too (not part of the expected output)"),
    Fixture("deepseek_nvfp4", "deepseek", "NVFP4", preset("NVFP4"), E=8,
            notes="grouped sigmoid routing with e_score_correction_bias; "
                  "shared expert quantized too (not part of the expected output)"),
    Fixture("deepseek_w4a16", "deepseek", "W4A16", preset("W4A16"), E=8,
            notes="grouped sigmoid routing with e_score_correction_bias; "
                  "shared expert quantized too (not part of the expected output)"),
    # ---- Llama-4 ----
    Fixture("llama4_w4a16", "llama4", "W4A16", preset("W4A16"), top_k=1,
            notes="top-1 over raw logits, sigmoid weight applied to the input"),
    # ---- gpt-oss ----
    Fixture("gptoss_mxfp4a16", "gptoss", "MXFP4A16", preset("MXFP4A16"),
            notes="expert biases (bf16), swigluoai with half-split gate/up, "
                  "router with bias"),
]


# --------------------------------------------------------------------------
# Module tree
# --------------------------------------------------------------------------

def moe_prefix(arch: Arch, layer: int) -> str:
    return f"model.layers.{layer}.{arch.block}"


def expert_names(fx: Fixture, arch: Arch, layer: int):
    """[(expert_id, (gate, up, down) module names)] of one layer's routed experts."""
    p = moe_prefix(arch, layer)
    return [(e, tuple(f"{p}.experts.{e}.{n}" for n in arch.projs)) for e in range(fx.E)]


def shared_names(arch: Arch, layer: int):
    p = moe_prefix(arch, layer)
    return tuple(f"{p}.shared_experts.{n}" for n in ("gate_proj", "up_proj", "down_proj"))


def linear_shapes(fx: Fixture):
    """Ordered {module name: (out, in, has_bias)} of every Linear in the checkpoint."""
    arch = ARCHS[fx.arch]
    shapes = {}
    for layer in range(fx.num_layers):
        p = moe_prefix(arch, layer)
        shapes[f"{p}.{arch.router}"] = (fx.E, fx.H, arch.router_bias)
        for _, (g, u, d) in expert_names(fx, arch, layer):
            shapes[g] = (fx.I, fx.H, arch.expert_bias)
            shapes[u] = (fx.I, fx.H, arch.expert_bias)
            shapes[d] = (fx.H, fx.I, arch.expert_bias)
        if arch.shared_experts:  # n_shared_experts = 1 -> same intermediate size
            g, u, d = shared_names(arch, layer)
            shapes[g] = (fx.I, fx.H, False)
            shapes[u] = (fx.I, fx.H, False)
            shapes[d] = (fx.H, fx.I, False)
    return shapes


def build_tree(fx: Fixture) -> torch.nn.Module:
    """Plain container modules + bf16 nn.Linear leaves named like the checkpoint."""
    root = torch.nn.Module()
    for name, (out_f, in_f, bias) in linear_shapes(fx).items():
        parent = root
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(leaf, torch.nn.Linear(in_f, out_f, bias=bias, dtype=BF16))
    arch = ARCHS[fx.arch]
    if arch.routing == "grouped_sigmoid":
        # DeepSeek keeps the correction bias as an F32 tensor next to the router
        for layer in range(fx.num_layers):
            gate = root.get_submodule(f"{moe_prefix(arch, layer)}.{arch.router}")
            gate.register_buffer("e_score_correction_bias",
                                 torch.zeros(fx.E, dtype=torch.float32))
    return root


def init_weights(model: torch.nn.Module, fx: Fixture, gen: torch.Generator):
    """Deterministic random bf16 weights (randn * 0.05) in a fixed module order."""
    with torch.no_grad():
        for name in linear_shapes(fx):
            mod = model.get_submodule(name)
            mod.weight.copy_((torch.randn(mod.weight.shape, generator=gen) * 0.05).to(BF16))
            if mod.bias is not None:
                mod.bias.copy_((torch.randn(mod.bias.shape, generator=gen) * 0.05).to(BF16))
        for mod in model.modules():
            if hasattr(mod, "e_score_correction_bias"):
                mod.e_score_correction_bias.copy_(
                    torch.randn(mod.e_score_correction_bias.shape, generator=gen) * 0.1)


# --------------------------------------------------------------------------
# Routing (float32) and the MoE forward (float64)
# --------------------------------------------------------------------------

def topk_stable(x: torch.Tensor, k: int):
    """Top-k along the last dim; ties go to the lower index (stable sort)."""
    vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


def route(logits: torch.Tensor, arch: Arch, k: int, bias: torch.Tensor | None = None):
    """Return (topk_ids int64 [T,k], topk_weights f32 [T,k])."""
    logits = logits.float()
    if arch.routing == "softmax":
        probs = torch.softmax(logits, dim=-1)
        vals, ids = topk_stable(probs, k)
        return ids, vals / vals.sum(-1, keepdim=True)
    if arch.routing == "llama4":
        vals, ids = topk_stable(logits, k)
        return ids, torch.sigmoid(vals)
    if arch.routing == "grouped_sigmoid":
        scores = torch.sigmoid(logits)
        biased = scores + bias.float()
        T, E = biased.shape
        grouped = biased.view(T, DEEPSEEK_N_GROUP, E // DEEPSEEK_N_GROUP)
        group_scores = topk_stable(grouped, 2)[0].sum(-1)
        _, keep = topk_stable(group_scores, DEEPSEEK_TOPK_GROUP)
        group_mask = torch.zeros(T, DEEPSEEK_N_GROUP, dtype=torch.bool)
        group_mask.scatter_(1, keep, True)
        expert_mask = group_mask.repeat_interleave(E // DEEPSEEK_N_GROUP, dim=1)
        _, ids = topk_stable(biased.masked_fill(~expert_mask, float("-inf")), k)
        w = scores.gather(1, ids)
        return ids, w / w.sum(-1, keepdim=True) * DEEPSEEK_SCALING
    raise ValueError(arch.routing)


def activation(u: torch.Tensor, arch: Arch) -> torch.Tensor:
    """Gated activation on u = [gate | up] (half split)."""
    g, v = u.chunk(2, dim=-1)
    if arch.act == "silu":
        return F.silu(g) * v
    g = g.clamp(max=SWIGLU_LIMIT)
    v = v.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
    return (v + 1) * g * torch.sigmoid(SWIGLU_ALPHA * g)


def moe_forward(x, ids, weights, experts, arch: Arch, actq=None):
    """Routed-experts-only MoE forward in float64.

    experts[e] = dict(w13 [2I,H], w2 [H,I], b13, b2) as float64.
    actq = None or (quant_in1, quant_in2): callables applied to the whole GEMM1
    input batch [T,H] and the whole GEMM2 input batch [T*k,I] (so per-tensor
    dynamic scales see the full batch, as in vLLM's fused kernels).
    """
    T, k = ids.shape
    x = x.double()
    w = weights.double()
    if arch.apply_router_weight_on_input:
        assert k == 1
        x = x * w  # routed weight scales the input; the output is not re-weighted
    if actq is not None:
        x = actq[0](x)
    rows = []
    for t in range(T):
        for j in range(k):
            e = int(ids[t, j])
            u = experts[e]["w13"] @ x[t]
            if experts[e]["b13"] is not None:
                u = u + experts[e]["b13"]
            rows.append(activation(u, arch))
    a = torch.stack(rows)                               # [T*k, I]
    if actq is not None:
        a = actq[1](a)
    out = torch.zeros(T, experts[int(ids[0, 0])]["w2"].shape[0], dtype=torch.float64)
    for t in range(T):
        for j in range(k):
            e = int(ids[t, j])
            y = experts[e]["w2"] @ a[t * k + j]
            if experts[e]["b2"] is not None:
                y = y + experts[e]["b2"]
            out[t] += y if arch.apply_router_weight_on_input else w[t, j] * y
    return out


# --------------------------------------------------------------------------
# Calibration (qparams via the library's helpers)
# --------------------------------------------------------------------------

def observed_min_max(x: torch.Tensor, args: QuantizationArgs, g_idx=None):
    """Min/max reduced to the qparam shape of `args` (what a minmax observer does)."""
    strategy = args.strategy
    if strategy in ("tensor", "token"):
        return x.amin().reshape(1), x.amax().reshape(1)
    if strategy == "channel":
        return x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    if strategy in ("group", "tensor_group"):
        gs = args.group_size
        if g_idx is not None:  # activation ordering: group g = columns with g_idx == g
            n_groups = int(g_idx.max()) + 1
            mins = torch.stack([x[:, g_idx == g].amin(-1) for g in range(n_groups)], -1)
            maxs = torch.stack([x[:, g_idx == g].amax(-1) for g in range(n_groups)], -1)
            return mins, maxs
        xg = x.unflatten(-1, (x.shape[-1] // gs, gs))
        return xg.amin(-1), xg.amax(-1)
    if strategy == "block":
        bh, bw = args.block_structure
        r, c = x.shape
        assert r % bh == 0 and c % bw == 0
        xb = x.reshape(r // bh, bh, c // bw, bw)
        return xb.amin(dim=(1, 3)), xb.amax(dim=(1, 3))
    raise ValueError(strategy)


def set_param(module, name, value):
    param = getattr(module, name)
    with torch.no_grad():
        param.data = value.to(param.dtype).reshape(param.shape).clone()


def calibrate_weights(model, fx: Fixture, gen: torch.Generator):
    """Weight qparams for every quantized Linear (memoryless min/max)."""
    arch = ARCHS[fx.arch]
    # gate/up pairs whose tensor_group global scales are fused (llm-compressor
    # makes them share min(gs_gate, gs_up) so vLLM can use one w13 scale)
    pairs = []
    for layer in range(fx.num_layers):
        pairs += [(g, u) for _, (g, u, _) in expert_names(fx, arch, layer)]
        if arch.shared_experts:
            g, u, _ = shared_names(arch, layer)
            pairs.append((g, u))
    partner = {g: u for g, u in pairs} | {u: g for g, u in pairs}

    quantized = {n: m for n, m in model.named_modules()
                 if getattr(m, "quantization_scheme", None) is not None
                 and m.quantization_scheme.weights is not None}

    # actorder=group: a random column order per expert input (gate/up share it,
    # as vLLM requires identical g_idx for w1/w3)
    g_idx_of = {}
    for name, mod in quantized.items():
        args = mod.quantization_scheme.weights
        if getattr(args, "actorder", None) in ("group", "dynamic"):
            if name in g_idx_of:
                continue
            cols = mod.weight.shape[1]
            perm = torch.randperm(cols, generator=gen)
            g_idx = torch.empty(cols, dtype=torch.int32)
            g_idx[perm] = (torch.arange(cols) // args.group_size).to(torch.int32)
            g_idx_of[name] = g_idx
            if name in partner:
                g_idx_of[partner[name]] = g_idx

    def global_scale(mod):
        w = mod.weight.data
        return generate_gparam(w.amin(), w.amax())  # bf16 stats -> f32 [1]

    for name, mod in quantized.items():
        args = mod.quantization_scheme.weights
        w = mod.weight.data
        gscale = None
        if args.strategy == "tensor_group":
            gscale = global_scale(mod)
            if name in partner:
                gscale = torch.minimum(gscale, global_scale(
                    model.get_submodule(partner[name])))
            set_param(mod, "weight_global_scale", gscale)
        g_idx = g_idx_of.get(name)
        mins, maxs = observed_min_max(w, args, g_idx)
        scale, zp = calculate_qparams(mins, maxs, args, global_scale=gscale)
        set_param(mod, "weight_scale", scale)
        if hasattr(mod, "weight_zero_point"):
            set_param(mod, "weight_zero_point", zp)
        if g_idx is not None:
            set_param(mod, "weight_g_idx", g_idx)


def calibration_inputs(model, fx: Fixture, gen: torch.Generator):
    """Per-module calibration inputs from a bf16 forward of routed random tokens.

    Experts see only the tokens routed to them (so static scales differ per
    expert); an expert that receives none falls back to all tokens.
    """
    arch = ARCHS[fx.arch]
    x = torch.randn(CALIB_TOKENS, fx.H, generator=gen).to(BF16)
    inputs = {}
    for layer in range(fx.num_layers):
        p = moe_prefix(arch, layer)
        router = model.get_submodule(f"{p}.{arch.router}")
        logits = F.linear(x, router.weight, router.bias).float()
        bias = getattr(router, "e_score_correction_bias", None)
        ids, w = route(logits, arch, fx.top_k, bias)
        groups = [(e, names, (ids == e).any(-1)) for e, names in expert_names(fx, arch, layer)]
        if arch.shared_experts:
            groups.append((None, shared_names(arch, layer),
                           torch.ones(CALIB_TOKENS, dtype=torch.bool)))
        for e, (g, u, d), sel in groups:
            xe = x[sel] if sel.any() else x
            if e is not None and arch.apply_router_weight_on_input:
                xe = (xe.float() * w[sel] if sel.any() else xe.float()).to(BF16)
            gm, um = model.get_submodule(g), model.get_submodule(u)
            u13 = torch.cat([F.linear(xe, gm.weight, gm.bias),
                             F.linear(xe, um.weight, um.bias)], dim=-1)
            h = activation(u13, arch)
            inputs[g] = inputs[u] = xe
            inputs[d] = h
    return inputs


def calibrate_inputs(model, fx: Fixture, gen: torch.Generator):
    """Static input qparams: FP8 input_scale, NVFP4 input_global_scale."""
    needs = {n: m for n, m in model.named_modules()
             if getattr(m, "quantization_scheme", None) is not None
             and m.quantization_scheme.input_activations is not None
             and m.quantization_scheme.input_activations.dynamic is not True}
    if not needs:
        return
    inputs = calibration_inputs(model, fx, gen)
    for name, mod in needs.items():
        args = mod.quantization_scheme.input_activations
        act = inputs[name]
        if args.strategy == "tensor_group":          # NVFP4: dynamic "local" scales
            set_param(mod, "input_global_scale", generate_gparam(act.amin(), act.amax()))
        else:                                        # FP8 static per-tensor
            mins, maxs = observed_min_max(act, args)
            scale, zp = calculate_qparams(mins, maxs, args)
            set_param(mod, "input_scale", scale)
            if hasattr(mod, "input_zero_point"):
                set_param(mod, "input_zero_point", zp)


# --------------------------------------------------------------------------
# Writing a checkpoint
# --------------------------------------------------------------------------

def hf_config(fx: Fixture) -> dict:
    """config.json without quantization_config, with the real models' MoE keys."""
    common = dict(hidden_size=fx.H, num_hidden_layers=fx.num_layers, hidden_act="silu",
                  torch_dtype="bfloat16", vocab_size=1024, num_attention_heads=4,
                  num_key_value_heads=4)
    if fx.arch == "qwen3":
        return dict(common, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                    num_experts=fx.E, num_experts_per_tok=fx.top_k,
                    moe_intermediate_size=fx.I, intermediate_size=4 * fx.I,
                    norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    if fx.arch == "mixtral":
        return dict(common, architectures=["MixtralForCausalLM"], model_type="mixtral",
                    num_local_experts=fx.E, num_experts_per_tok=fx.top_k,
                    intermediate_size=fx.I)
    if fx.arch == "deepseek":
        return dict(common, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                    n_routed_experts=fx.E, num_experts_per_tok=fx.top_k,
                    moe_intermediate_size=fx.I, intermediate_size=4 * fx.I,
                    n_shared_experts=1, first_k_dense_replace=0, moe_layer_freq=1,
                    n_group=DEEPSEEK_N_GROUP, topk_group=DEEPSEEK_TOPK_GROUP,
                    topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True,
                    routed_scaling_factor=DEEPSEEK_SCALING)
    if fx.arch == "llama4":
        return dict(common, architectures=["Llama4ForCausalLM"], model_type="llama4_text",
                    num_local_experts=fx.E, num_experts_per_tok=fx.top_k,
                    intermediate_size=fx.I, intermediate_size_mlp=4 * fx.I,
                    interleave_moe_layer_step=1)
    if fx.arch == "gptoss":
        return dict(common, architectures=["GptOssForCausalLM"], model_type="gpt_oss",
                    num_local_experts=fx.E, num_experts_per_tok=fx.top_k,
                    experts_per_token=fx.top_k, intermediate_size=fx.I,
                    swiglu_limit=SWIGLU_LIMIT)
    raise ValueError(fx.arch)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_checkpoint(fx: Fixture, folder: str, gen: torch.Generator):
    arch = ARCHS[fx.arch]
    model = build_tree(fx)
    init_weights(model, fx, gen)
    original = {k: v.clone() for k, v in model.state_dict().items()}

    compressor = None
    if fx.scheme is not None:
        # routers stay unquantized; llm-compressor recipes ignore them the same way
        ignore = [f"re:.*{arch.block}.{arch.router}$"] + fx.extra_ignore
        qconfig = QuantizationConfig(config_groups={"group_0": fx.scheme()}, ignore=ignore)
        apply_quantization_config(model, qconfig, show_progress=False)
        calibrate_weights(model, fx, gen)
        calibrate_inputs(model, fx, gen)
        for m in model.modules():
            if getattr(m, "quantization_scheme", None) is not None:
                m.quantization_status = QuantizationStatus.FROZEN
        compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fx.fmt)
        if fx.extra_ignore:
            # keep the recipe's regex instead of the per-module expansion
            qc = compressor.quantization_config
            qc.ignore = [n for n in qc.ignore
                         if not any(match_name(n, pat) for pat in fx.extra_ignore)]
            qc.ignore += fx.extra_ignore
        compressor.compress_model(model)

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(folder, "config.json"), hf_config(fx))
    if compressor is not None:
        compressor.update_config(folder)
    return original


# --------------------------------------------------------------------------
# Reading back: dequantization by compressed-tensors itself
# --------------------------------------------------------------------------

def load_decompressed(fx: Fixture, folder: str):
    """Return ({module: f64 weight}, {module: f64 bias}, raw state dict, qconfig|None)."""
    raw = load_file(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    qdict = cfg.get("quantization_config")
    qconfig = QuantizationConfig.model_validate(qdict) if qdict else None

    model = build_tree(fx)
    if qconfig is not None:
        apply_quantization_config(model, qconfig, show_progress=False)
    for name, mod in model.named_modules():
        local = {k[len(name) + 1:]: v for k, v in raw.items()
                 if k.rsplit(".", 1)[0] == name}
        if not local:
            continue
        if getattr(mod, "quantization_scheme", None) is not None:
            replace_direct_state_dict(mod, local)
        else:
            with torch.no_grad():
                for key, value in local.items():
                    getattr(mod, key).data = value.clone()
    if qconfig is not None:
        with contextlib.redirect_stderr(io.StringIO()):  # silence the dispatch bar
            ModelCompressor(quantization_config=qconfig).decompress_model(model)

    weights, biases = {}, {}
    for name in linear_shapes(fx):
        mod = model.get_submodule(name)
        weights[name] = mod.weight.data.double()
        bias = getattr(mod, "bias", None)  # replace_direct_state_dict drops None slots
        biases[name] = bias.data.double() if bias is not None else None
    return weights, biases, raw, qconfig


def expert_tensors(fx, arch, layer, weights, biases):
    experts = {}
    for e, (g, u, d) in expert_names(fx, arch, layer):
        b13 = None
        if biases[g] is not None:
            b13 = torch.cat([biases[g], biases[u]])
        experts[e] = dict(w13=torch.cat([weights[g], weights[u]]), w2=weights[d],
                          b13=b13, b2=biases[d])
    return experts


# --------------------------------------------------------------------------
# vLLM activation-quantization emulation (expected_actq)
# --------------------------------------------------------------------------

FP8_MAX = 448.0


def to_fp8(x32: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest-even into e4m3fn, back as float32 (input pre-clamped)."""
    return x32.to(torch.float8_e4m3fn).to(torch.float32)


def to_e2m1(x32: torch.Tensor) -> torch.Tensor:
    """Round |x| <= 6 to the E2M1 grid, ties to even mantissa."""
    a = x32.abs()
    q = torch.full_like(a, 6.0)
    q = torch.where(a <= 5.0, 4.0, q)
    q = torch.where(a < 3.5, 3.0, q)
    q = torch.where(a <= 2.5, 2.0, q)
    q = torch.where(a < 1.75, 1.5, q)
    q = torch.where(a <= 1.25, 1.0, q)
    q = torch.where(a < 0.75, 0.5, q)
    q = torch.where(a <= 0.25, 0.0, q)
    return q * torch.sign(x32)


def q_fp8_dynamic(per_token: bool):
    def quant(x64):
        x = x64.float()
        amax = x.abs().amax(-1, keepdim=True) if per_token else x.abs().amax()
        s = torch.clamp(amax / FP8_MAX, min=1.0 / (FP8_MAX * 512.0))
        q = to_fp8(torch.clamp(x * (1.0 / s), -FP8_MAX, FP8_MAX))
        return q.double() * s.double()
    return quant


def q_fp8_static(a: torch.Tensor):
    def quant(x64):
        x = x64.float()
        q = to_fp8(torch.clamp(x * (1.0 / a), -FP8_MAX, FP8_MAX))
        return q.double() * a.double()
    return quant


def q_fp8_group(group: int):
    def quant(x64):
        x = x64.float().unflatten(-1, (x64.shape[-1] // group, group))
        s = torch.clamp(x.abs().amax(-1, keepdim=True), min=1e-10) / FP8_MAX
        q = to_fp8(torch.clamp(x / s, -FP8_MAX, FP8_MAX))
        return (q.double() * s.double()).flatten(-2)
    return quant


def q_int8_token(x64):
    x = x64.float()
    s = x.abs().amax(-1, keepdim=True) / 127.0
    s = torch.where(s == 0, torch.ones_like(s), s)  # all-zero row: any scale works
    q = torch.clamp(torch.round(x / s), -128, 127)
    return q.double() * s.double()


def q_nvfp4(gs: torch.Tensor):
    def quant(x64):
        x = x64.float().unflatten(-1, (x64.shape[-1] // 16, 16))
        amax = x.abs().amax(-1, keepdim=True)
        sf = to_fp8(torch.clamp(gs * amax / 6.0, max=FP8_MAX))
        safe = torch.where(sf == 0, torch.ones_like(sf), sf)
        q = to_e2m1(torch.clamp(x * gs / safe, -6.0, 6.0))
        q = torch.where(sf == 0, torch.zeros_like(q), q)
        return (q.double() * sf.double() / gs.double()).flatten(-2)
    return quant


def kernel_weight(raw, name, args: QuantizationArgs, fmt: str) -> torch.Tensor:
    """q * scale in float64 from the stored tensors (what the fused kernels compute
    with; the library's bf16 dequant output rounds this product)."""
    scale = raw[f"{name}.weight_scale"]
    if fmt == "pack-quantized":
        shape = raw[f"{name}.weight_shape"]
        q = unpack_from_int32(raw[f"{name}.weight_packed"], args.num_bits, shape)
    elif fmt == "nvfp4-pack-quantized":
        # imported lazily: the legacy 0.18 run never needs it
        from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
        packed = raw[f"{name}.weight_packed"]
        q = unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2)
        gs = raw[f"{name}.weight_global_scale"].double()
        s = scale.double().repeat_interleave(16, dim=1) / gs
        return q.double() * s
    else:  # int-quantized / float-quantized: the `weight` tensor holds q
        q = raw[f"{name}.weight"]
    q = q.double()
    s = scale.double()
    out_f, in_f = q.shape
    if args.strategy == "tensor":
        s = s.reshape(1, 1)
    elif args.strategy == "group":
        s = s.repeat_interleave(args.group_size, dim=1)
    elif args.strategy == "block":
        bh, bw = args.block_structure
        s = s.repeat_interleave(bh, 0)[:out_f].repeat_interleave(bw, 1)[:, :in_f]
    return q * s


def w4a8_fp8_weight(raw, name, args) -> torch.Tensor:
    """vLLM CUTLASS W4A8: group scales re-encoded as fp8 times a per-row scale; the kernel's scale
    lookup table holds each product q * s8 rounded to fp8 (CUTLASS packed_scale_t)."""
    q = unpack_from_int32(raw[f"{name}.weight_packed"], args.num_bits,
                          raw[f"{name}.weight_shape"]).double()
    s = raw[f"{name}.weight_scale"].float()
    # convert_bf16_scales_to_fp8: dynamic per-token fp8 quantization of each row's group scales
    # (scale floored at 1/(448*512), x / scale, saturated), then fp8(q / 8) and chan * 8.
    chan = torch.clamp(s.abs().amax(-1, keepdim=True) / FP8_MAX, min=1.0 / (FP8_MAX * 512.0))
    code = to_fp8(torch.clamp(s / chan, -FP8_MAX, FP8_MAX))
    s8 = to_fp8(code / 8.0)
    products = to_fp8((q * s8.double().repeat_interleave(args.group_size, dim=1)).float())
    return products.double() * (chan * 8.0).double()


def requant_w13_per_tensor(raw, g, u):
    """vLLM load-time requantization of per-tensor fp8 gate/up to max(s_gate, s_up)."""
    s_g = raw[f"{g}.weight_scale"].float().reshape(())
    s_u = raw[f"{u}.weight_scale"].float().reshape(())
    smax = torch.maximum(s_g, s_u)
    halves = []
    for name, s in ((g, s_g), (u, s_u)):
        # On the GPU fp16 * (fp32 0-dim CUDA tensor) casts the scale to fp16 first.
        deq = (raw[f"{name}.weight"].float() * s.half().float()).to(torch.float16)
        q = to_fp8(torch.clamp(deq.float() * (1.0 / smax), -FP8_MAX, FP8_MAX))
        halves.append(q.double() * smax.double())
    return torch.cat(halves)


def actq_setup(fx: Fixture, layer: int, raw, qconfig, lib_weights, biases):
    """(actq quantizers, experts with kernel-side weights) or None if weight-only."""
    arch = ARCHS[fx.arch]
    scheme = qconfig.config_groups["group_0"]
    wargs, iargs = scheme.weights, scheme.input_activations
    if iargs is None:
        return None
    fmt = scheme.format or qconfig.format
    names = expert_names(fx, arch, layer)

    experts = {}
    for e, (g, u, d) in names:
        base = {n: kernel_weight(raw, n, wargs, fmt) for n in (g, u, d)}
        # sanity: q*s agrees with the library's (bf16-rounded) dequant output
        for n, w in base.items():
            assert ((w - lib_weights[n]).abs() <= 2.0 ** -8 * lib_weights[n].abs()).all(), \
                f"{fx.name}: kernel-side weight of {n} disagrees with the library"
        w13 = torch.cat([base[g], base[u]])
        w2 = base[d]
        if fmt == "float-quantized" and wargs.strategy == "tensor":
            w13 = requant_w13_per_tensor(raw, g, u)
        elif fx.preset == "W4AFP8":
            w13 = torch.cat([w4a8_fp8_weight(raw, g, wargs), w4a8_fp8_weight(raw, u, wargs)])
            w2 = w4a8_fp8_weight(raw, d, wargs)
        b13 = torch.cat([biases[g], biases[u]]) if biases[g] is not None else None
        experts[e] = dict(w13=w13, w2=w2, b13=b13, b2=biases[d])

    if iargs.type == "int":
        quant = (q_int8_token, q_int8_token)
    elif iargs.strategy == "tensor_group":            # NVFP4 W4A4
        gs13 = min(float(raw[f"{g}.input_global_scale"]) for _, (g, u, d) in names)
        gs13 = min(gs13, min(float(raw[f"{u}.input_global_scale"]) for _, (g, u, d) in names))
        gs2 = min(float(raw[f"{d}.input_global_scale"]) for _, (g, u, d) in names)
        quant = (q_nvfp4(torch.tensor(gs13, dtype=torch.float32)),
                 q_nvfp4(torch.tensor(gs2, dtype=torch.float32)))
    elif iargs.strategy == "group":                   # FP8 block: 1x128 groups
        quant = (q_fp8_group(iargs.group_size), q_fp8_group(iargs.group_size))
    elif iargs.dynamic is True:
        per_token = iargs.strategy == "token"
        quant = (q_fp8_dynamic(per_token), q_fp8_dynamic(per_token))
    else:                                             # FP8 static per-tensor
        a13 = max(max(float(raw[f"{g}.input_scale"].float()),
                      float(raw[f"{u}.input_scale"].float())) for _, (g, u, d) in names)
        a2 = max(float(raw[f"{d}.input_scale"].float()) for _, (g, u, d) in names)
        quant = (q_fp8_static(torch.tensor(a13, dtype=torch.float32)),
                 q_fp8_static(torch.tensor(a2, dtype=torch.float32)))
    return quant, experts


# --------------------------------------------------------------------------
# One fixture end to end
# --------------------------------------------------------------------------

def make_fixture(fx: Fixture, out_dir: str):
    folder = os.path.join(out_dir, fx.name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    gen = torch.Generator().manual_seed(fx.seed)
    arch = ARCHS[fx.arch]

    original = write_checkpoint(fx, folder, gen)

    # own generator: the inputs do not depend on how many draws calibration made
    io_gen = torch.Generator().manual_seed(fx.seed ^ 0x5EED)
    hidden = torch.randn(TOKENS, fx.H, generator=io_gen).to(BF16)
    logits = torch.randn(TOKENS, fx.E, generator=io_gen) * 2.0
    bias = original.get(f"{moe_prefix(arch, 0)}.{arch.router}.e_score_correction_bias")
    ids, topw = route(logits, arch, fx.top_k, bias)

    weights, biases, raw, qconfig = load_decompressed(fx, folder)
    io_t = dict(hidden_states=hidden, router_logits=logits.float(),
              topk_ids=ids.to(torch.int32), topk_weights=topw.float())
    experts = expert_tensors(fx, arch, 0, weights, biases)
    io_t["expected"] = moe_forward(hidden, ids, topw, experts, arch)
    if fx.num_layers > 1:
        experts1 = expert_tensors(fx, arch, 1, weights, biases)
        io_t["expected_layer1"] = moe_forward(hidden, ids, topw, experts1, arch)
    if qconfig is not None:
        setup = actq_setup(fx, 0, raw, qconfig, weights, biases)
        if setup is not None:
            quant, kexperts = setup
            io_t["expected_actq"] = moe_forward(hidden, ids, topw, kexperts, arch, actq=quant)
    save_file({k: v.contiguous() for k, v in io_t.items()},
              os.path.join(folder, "io.safetensors"))
    for fname in os.listdir(folder):  # safetensors writes 0600; make them readable
        os.chmod(os.path.join(folder, fname), 0o644)
    print(f"[{CT_VERSION}] {fx.name}: ok", flush=True)


# --------------------------------------------------------------------------
# Manifest and driver
# --------------------------------------------------------------------------

def manifest_entry(fx: Fixture, out_dir: str) -> dict:
    folder = os.path.join(out_dir, fx.name)
    with open(os.path.join(folder, "config.json")) as f:
        qc = json.load(f).get("quantization_config")
    io_t = load_file(os.path.join(folder, "io.safetensors"))
    version = qc["version"] if qc else CT_VERSION
    notes = f"written by compressed-tensors {version}"
    if fx.notes:
        notes += "; " + fx.notes
    return {
        "name": fx.name,
        "architecture": ARCHS[fx.arch].architecture,
        "preset": fx.preset,
        "format": qc["format"] if qc else "none",
        "layers": list(range(fx.num_layers)),
        "tokens": TOKENS,
        "has_expected_actq": "expected_actq" in io_t,
        "notes": notes,
    }


def supports_group_actorder() -> bool:
    try:
        QuantizationArgs(num_bits=4, group_size=128, actorder="group")
        return True
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="fixtures folder, e.g. tests/data/fixtures")
    ap.add_argument("--only", nargs="*", help="fixture names to (re)generate")
    ap.add_argument("--legacy-ct", default=DEFAULT_LEGACY_CT,
                    help="folder holding compressed-tensors 0.18.0 (pip --target) "
                         "for fixtures that need actorder=group")
    ap.add_argument("--no-manifest", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    os.makedirs(opts.out, exist_ok=True)
    selected = [fx for fx in FIXTURES if not opts.only or fx.name in opts.only]
    if opts.only and len(selected) != len(opts.only):
        sys.exit(f"unknown fixture in {opts.only}")

    legacy_ok = supports_group_actorder()
    delegated = []
    for fx in selected:
        if fx.legacy and not legacy_ok:
            delegated.append(fx.name)
            continue
        make_fixture(fx, opts.out)

    if delegated:
        if not os.path.isdir(os.path.join(opts.legacy_ct, "compressed_tensors")):
            sys.exit(f"{delegated} need compressed-tensors 0.18.0 in {opts.legacy_ct}: "
                     "pip install --no-deps --target "
                     f"{opts.legacy_ct} compressed-tensors==0.18.0")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [opts.legacy_ct] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        subprocess.run([sys.executable, os.path.abspath(__file__), "--out", opts.out,
                        "--no-manifest", "--only", *delegated], env=env, check=True)

    if not opts.no_manifest:
        entries = [manifest_entry(fx, opts.out) for fx in FIXTURES
                   if os.path.isfile(os.path.join(opts.out, fx.name, "io.safetensors"))]
        write_json(os.path.join(opts.out, "manifest.json"), entries)


if __name__ == "__main__":
    main()
