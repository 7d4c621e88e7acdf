// qwen35 inspect -m DIR|FILE.gguf: geometry, layer pattern, quantization summary, parameter count, memory,
// and the support verdict. Exit 0 when the checkpoint is supported, 1 (with the reason) otherwise.
#include "cli/device_plan.h"
#include "cli/device_select.h"
#include "cli/flags.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "cli/commands.h"
#include "cli/model_assets.h"
#include "kernels/cpu/amx.h"
#include "kernels/kv_format.h"
#include "model/kv_pool.h"
#include "model/pipeline_plan.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "server/chat_request.h"
#include "template/chat_template.h"

namespace qwen35::cli {
namespace {

std::string describe(const kernels::Matrix& m) {
  switch (m.type) {
    case kernels::WeightType::kF32: return "f32";
    case kernels::WeightType::kF16: return "f16";
    case kernels::WeightType::kBF16: return "bf16";
    case kernels::WeightType::kAffine:
      return std::to_string(m.bits) + "-bit g" + std::to_string(m.group);
    case kernels::WeightType::kQ8_0: return "Q8_0";
    case kernels::WeightType::kQ4_0: return "Q4_0";
    case kernels::WeightType::kIQ4_NL: return "IQ4_NL";
    case kernels::WeightType::kQ4_K: return "Q4_K";
    case kernels::WeightType::kQ5_K: return "Q5_K";
    case kernels::WeightType::kQ6_K: return "Q6_K";
    case kernels::WeightType::kIQ4_XS: return "IQ4_XS";
    case kernels::WeightType::kQ4_1: return "Q4_1";
    case kernels::WeightType::kQ5_0: return "Q5_0";
    case kernels::WeightType::kQ5_1: return "Q5_1";
    case kernels::WeightType::kQ2_K: return "Q2_K";
    case kernels::WeightType::kQ3_K: return "Q3_K";
    case kernels::WeightType::kIQ2_XXS: return "IQ2_XXS";
    case kernels::WeightType::kIQ2_XS: return "IQ2_XS";
    case kernels::WeightType::kIQ3_XXS: return "IQ3_XXS";
    case kernels::WeightType::kIQ3_S: return "IQ3_S";
  }
  return "?";
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char b[64];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return b;
}

// The stored type of each matrix, grouped by the table's summary lines. Takes the weights
// mutable because the table's slots do; nothing is changed.
void quant_summary(model::ModelWeights& w) {
  std::map<std::string, std::set<std::string>> kinds;
  auto add = [&](const model::Tensor& t, model::LayerWeights* l, const std::string& line) {
    const model::Slot s = t.slot(w, l);
    if (s.present != nullptr && !*s.present) return;
    if (s.matrix != nullptr) kinds[line].insert(describe(*s.matrix));
    if (s.experts != nullptr)
      for (const model::MlpWeights& e : *s.experts) kinds[line].insert(describe(e.*t.expert));
  };
  for (const model::Tensor& t : model::tensor_table()) {
    if (t.summary == nullptr) continue;
    if (t.is_layer()) {
      for (model::LayerWeights& L : w.layers)
        if (model::in_layer(t, w.config, L.kind)) add(t, &L, t.summary);
    } else if (t.block == model::Block::kHead) {
      add(t, nullptr, std::string(t.summary) + (w.tied ? " (tied)" : ""));  // tied: the embedding's copy
    } else if (t.block == model::Block::kModel) {
      add(t, nullptr, t.summary);
    }
  }
  if (w.gguf) {  // the file's own tally: every tensor, by ggml type
    std::map<std::string, std::pair<int, size_t>> types;
    for (const auto& [_, t] : w.gguf->tensors()) {
      auto& e = types[formats::ggml_type_name(t->type)];
      ++e.first;
      e.second += t->nbytes;
    }
    std::printf("tensor types:");
    for (const auto& [name, e] : types) std::printf("  %s x%d (%s)", name.c_str(), e.first, human(double(e.second)).c_str());
    std::printf("\n");
  }
  std::printf("quantization:\n");
  for (const auto& [k, v] : kinds) {
    std::string s;
    for (const auto& d : v) s += (s.empty() ? "" : ", ") + d;
    std::printf("  %-28s %s\n", k.c_str(), s.c_str());
  }
}

// The vision tower: geometry, size and verdict, or why there is none.
void vision_report(const model::ModelWeights& w) {
  if (!w.vision) {
    std::printf("vision: %s\n", w.vision_problem.empty() ? "no vision tower" : w.vision_problem.c_str());
    return;
  }
  const model::VisionWeights& v = *w.vision;
  const model::VisionConfig& c = v.config;
  std::printf("vision: %lld blocks, width %lld, %lld heads of %lld, mlp %lld, patch %lldx%lldx%lld, merge %lldx%lld, "
              "position table %lldx%lld, out %lld\n",
              (long long)c.depth, (long long)c.hidden, (long long)c.n_heads, (long long)c.head_dim,
              (long long)c.intermediate, (long long)c.patch, (long long)c.patch, (long long)c.temporal,
              (long long)c.merge, (long long)c.merge, (long long)c.grid_side, (long long)c.grid_side,
              (long long)c.out_hidden);
  std::set<std::string> types;
  for (const model::VisionBlockWeights& b : v.blocks) types.insert(describe(b.qkv));
  std::string t;
  for (const std::string& d : types) t += (t.empty() ? "" : ", ") + d;
  std::printf("vision weights: %s, %.0f parameters (%.3f B), %zu bytes (%s), blocks %s\n", v.source.c_str(),
              double(v.n_params), double(v.n_params) / 1e9, v.bytes, human(double(v.bytes)).c_str(), t.c_str());
  if (c.image_token_id >= 0) std::printf("vision verdict: usable (image token %lld)\n", (long long)c.image_token_id);
  else std::printf("vision verdict: usable (image token: <|image_pad|> of the tokenizer)\n");
}

// --fit-mb: for each --kv-type, the longest context of one sequence whose KV, with the weights
// and the sequence's recurrent state, fits in `mb` MiB (a multiple of 64 positions; activations
// and the process's own overhead are not counted).
void kv_type_fit(const model::ModelConfig& c, double weight_bytes, double rec, double mb) {
  std::printf("longest context in %.0f MiB (weights + recurrent state + KV) by --kv-type:", mb);
  const double room = mb * 1048576.0 - weight_bytes - rec;
  for (kernels::KvType t : kernels::kAllKvTypes) {
    const std::string name(kernels::kv_type_name(t));
    if (!model::check_kv_types(c, {t, t}).ok()) continue;
    const double b = double(model::kv_bytes_per_token(c, {t, t}));
    const int64_t n = room > 0 && b > 0 ? int64_t(room / b) / 64 * 64 : 0;
    std::printf(" %s %lld,", name.c_str(), (long long)n);
  }
  std::printf(" tokens\n");
}

struct PlanFlags {
  int ranks = 0;
  int64_t ctx = 4096, slots = 1;
  std::string split;
  double budget_mb = 0;
};

// --ranks: the pipeline plan (model/pipeline_plan.h). Exit 1 with one line when it cannot be made.
// The KV cache's bytes per token for each --kv-type (K and V of one type; a pair costs the mean
// of its two), the real bytes the pool counts (model::kv_bytes_per_token).
void kv_type_sizes(const model::ModelConfig& c) {
  std::printf("kv cache per token by --kv-type:");
  for (kernels::KvType t : kernels::kAllKvTypes) {
    const std::string name(kernels::kv_type_name(t));
    if (!model::check_kv_types(c, {t, t}).ok()) {
      std::printf(" %s n/a (head_dim %lld),", name.c_str(), (long long)c.head_dim);
      continue;
    }
    const double b = double(model::kv_bytes_per_token(c, {t, t}));
    std::printf(" %s %.0f (%s),", name.c_str(), b, human(b).c_str());
  }
  std::printf(" bytes\n");
}

int print_plan(model::ModelWeights& mw, const PlanFlags& f) {
  if (f.ctx < 1 || f.slots < 1 || f.budget_mb < 0)
    return fail("inspect", "--ctx and --parallel must be at least 1, --rank-budget-mb >= 0");
  std::vector<int64_t> starts;
  for (size_t at = 0; at < f.split.size();) {
    const size_t comma = std::min(f.split.find(',', at), f.split.size());
    const std::string part = f.split.substr(at, comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0') return fail("inspect", "--pipeline-split: '" + part + "' is not a layer index");
    starts.push_back(v);
    at = comma + 1;
  }
  const model::PipelineCosts costs = model::pipeline_costs(mw, f.ctx, f.slots);
  auto plan = model::plan_pipeline(costs, f.ranks, starts, size_t(f.budget_mb * double(1 << 20)));
  if (!plan.ok()) return fail("inspect", plan.message());
  std::printf("pipeline plan: %d ranks over %zu layers (state and KV for %lld sequence%s of %lld positions, f32)\n",
              f.ranks, mw.layers.size(), (long long)f.slots, f.slots == 1 ? "" : "s", (long long)f.ctx);
  std::printf("%s", model::describe(*plan, costs).c_str());
  return 0;
}

// What the server reads from the chat template: the tool-call form (server::tool_call_format)
// and whether the generation prompt opens <think> (Qwen3.5's) or leaves it to the model (Qwen3's).
void template_report(const std::string& path) {
  auto t = load_chat_template(path);
  if (!t.ok()) {
    std::printf("chat template: none (%s)\n", t.message().c_str());
    return;
  }
  const bool json = server::tool_call_format(*t) == server::ToolCallFormat::kJson;
  const auto user = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "q"}])");
  auto prompt = t->render(user, nullptr, true, nlohmann::ordered_json::object());
  const char* thinking = !prompt.ok()                     ? "unknown (the probe did not render)"
                         : server::opens_thinking(*prompt) ? "opened by the generation prompt"
                                                           : "left to the model";
  std::printf("chat template: tool calls as %s; thinking %s\n",
              json ? "Hermes-style JSON (<tool_call>{\"name\": ...})" : "XML (<tool_call><function=...>)",
              thinking);
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  flags::App app{"Geometry, layer pattern, quantization, memory and support verdict of a checkpoint",
               "qwen35 inspect"};
  std::string dir, mmproj;
  app.add_option("-m,--model", dir, "checkpoint directory or .gguf file")->required();
  app.add_option("--mmproj", mmproj, "GGUF models: the vision tower's mmproj file (default: the one "
                 "mmproj*.gguf beside the model, if any)");
  PlanFlags plan;
  double fit_mb = 0;
  app.add_option("--fit-mb", fit_mb, "also print, per --kv-type, the longest context of one sequence "
                 "whose KV fits in this many MiB beside the weights and its recurrent state; with "
                 "--device vulkan, the longest --ctx at --parallel 1, 2, 4, ... 64 and the most "
                 "--parallel at --ctx that fit in this many MiB of the device (at most its memory)");
  app.add_option("--ranks", plan.ranks, "print how the model splits by layers over N pipeline ranks, and each "
                 "rank's memory (weights + state + KV), without loading the weights");
  app.add_option("--ctx", plan.ctx, "with --ranks or --device vulkan: the context each sequence's KV is "
                 "counted at (default 4096)");
  app.add_option("--parallel", plan.slots, "with --ranks or --device vulkan: sequences counted (default 1)");
  DevicePlanFlags dplan;
  app.add_option("--step-tokens", dplan.step_tokens, "with --device vulkan: rows a step, as serve's "
                 "--step-tokens (default 256): the device's working memory is sized for them");
  app.add_option("--kv-type", dplan.kv_type, "with --device vulkan: the KV cache's type, K[,V] as "
                 "run's --kv-type (default f32): the device holds the pool in that format");
  std::string spec = "off";
  app.add_option("--spec", spec, "with --device vulkan: mtp plans the MTP head's weights, cache and "
                 "verification state too (lookup, off: not)");
  app.add_option("--pipeline-split", plan.split, "with --ranks: the layers where ranks 1.. begin (comma-"
                 "separated, increasing) instead of the balanced split");
  app.add_option("--rank-budget-mb", plan.budget_mb, "with --ranks: a plan with a rank over this many MiB "
                 "is an error");
  std::string device = "cpu";
  app.add_option("--device", device, "cpu (default), or vulkan[:N]: also plan the device memory of "
                 "Vulkan device N of `qwen35 devices` (weights, KV and state for --ctx x --parallel, "
                 "workspace for --step-tokens rows) and say whether the model fits, uploading nothing");
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  if (auto st = check_device(device); !st.ok()) return fail("inspect", st.message());
  if (spec != "off" && spec != "lookup" && spec != "mtp")
    return fail("inspect", "--spec must be lookup, mtp or off, got '" + spec + "'");
  if (plan.ctx < 1 || plan.slots < 1 || dplan.step_tokens < 1)
    return fail("inspect", "--ctx, --parallel and --step-tokens must be at least 1");
  auto w = model::load_weights(dir);
  if (!w.ok()) {
    std::printf("verdict: NOT SUPPORTED\n");
    return fail("inspect", w.message());
  }
  model::ModelWeights& mw = **w;
  if (mw.dialect == model::Dialect::kGguf) {
    if (mmproj.empty()) {
      auto found = model::find_mmproj(dir);
      if (!found.ok()) mw.vision_problem = found.message();
      else mmproj = *found;
    }
    if (!mmproj.empty()) model::attach_mmproj(mw, mmproj);
  } else if (!mmproj.empty()) {
    return fail("inspect", "--mmproj applies to GGUF models; this checkpoint's tower is in its safetensors");
  }
  const model::ModelConfig& c = mw.config;
  std::printf("checkpoint: %s\n", dir.c_str());
  const bool qwen3 = c.family == model::Family::kQwen3;
  std::printf("family: %s\n", c.family_name());
  std::printf("model_type: %s (%s)\n", c.model_type.c_str(), c.moe ? "MoE" : "dense");
  // Qwen3 stores every norm as applied; Qwen3.5's HF files store w for a norm applied as 1+w.
  const char* zero_centred = qwen3 ? "w (applied as w)" : "w (applied as 1+w)";
  if (mw.dialect == model::Dialect::kGguf)
    std::printf("layout: GGUF v%u (%zu file%s), ggml tensor names, norms stored as %s%s\n",
                mw.gguf->files().front()->version(), mw.gguf->files().size(), mw.gguf->files().size() == 1 ? "" : "s",
                qwen3 ? "w (applied as w)" : "1+w", mw.tiled_v_heads ? ", value heads tiled" : "");
  else
    std::printf("layout: %s, tensor prefix '%s', norms stored as %s\n",
                mw.dialect == model::Dialect::kHf ? "Hugging Face" : "MLX", mw.prefix.c_str(),
                mw.dialect == model::Dialect::kHf ? zero_centred : qwen3 ? "w (applied as w)" : "1+w");
  std::printf("layers: %lld, hidden: %lld, vocab: %lld\n", (long long)c.n_layers, (long long)c.hidden,
              (long long)c.vocab);
  std::printf("layer pattern: %s  (%lld linear-attention, %lld full-attention)\n",
              c.layer_pattern().c_str(), (long long)c.n_linear_layers(), (long long)c.n_full_layers());
  std::printf("full attention: %lld heads, %lld kv heads, head_dim %lld, rotary dims %lld, rope theta %g, %s, "
              "q/k RMSNorm per head\n",
              (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim,
              (long long)c.rotary_dim, c.rope_theta, c.attn_gate ? "output gate" : "no output gate");
  std::printf("rms norm eps: %g\n", c.eps);
  if (c.n_linear_layers() > 0)
    std::printf("gated deltanet: %lld key heads, %lld value heads, d_k %lld, d_v %lld, conv kernel %lld\n",
                (long long)c.n_k_heads, (long long)c.n_v_heads, (long long)c.d_k, (long long)c.d_v,
                (long long)c.conv_kernel);
  if (c.n_linear_layers() > 0 && c.family == model::Family::kQwen3Next)
    std::printf("qwen3-next: rope one-dimensional; deltanet input projections stored fused per key head "
                "(in_proj_qkvz, in_proj_ba; GGUF ssm_in or attn_qkv + attn_gate, ssm_ba), regrouped at load; "
                "value heads in grouped order\n");
  if (c.n_linear_layers() == 0)
    std::printf("gated deltanet: none (no recurrent state; a prefix-cache snapshot is KV blocks only)\n");
  if (c.moe && c.shared_intermediate > 0)
    std::printf("moe: %lld experts, top-%lld%s, expert intermediate %lld, shared expert intermediate %lld\n",
                (long long)c.n_experts, (long long)c.top_k, c.norm_topk ? " renormalised" : " not renormalised",
                (long long)c.moe_intermediate, (long long)c.shared_intermediate);
  else if (c.moe)
    std::printf("moe: %lld experts, top-%lld%s, expert intermediate %lld, no shared expert, every layer MoE\n",
                (long long)c.n_experts, (long long)c.top_k, c.norm_topk ? " renormalised" : " not renormalised",
                (long long)c.moe_intermediate);
  else
    std::printf("mlp: intermediate %lld\n", (long long)c.intermediate);
  std::printf("head: %s\n", mw.tied ? "tied to the embedding" : "separate lm_head");
  if (mw.mtp)
    std::printf("mtp: present, %s (drafts with --spec mtp)\n", human(double(mw.mtp_bytes)).c_str());
  else if (mw.has_mtp)
    std::printf("mtp: present, not usable: %s\n", mw.mtp_problem.c_str());
  else
    std::printf("mtp: absent (no MTP tensors; --spec mtp unavailable)\n");
  vision_report(mw);
  template_report(dir);
  quant_summary(mw);
  const double params = double(mw.n_params);
  std::printf("parameters: %.0f (%.3f B)\n", params, params / 1e9);
  std::printf("weight bytes: %zu (%s)\n", mw.weight_bytes, human(double(mw.weight_bytes)).c_str());
  const double kv = 2.0 * double(c.n_full_layers() * c.n_kv_heads * c.head_dim) * 4;
  const double rec = double(c.n_linear_layers()) *
                     (double((c.conv_kernel - 1) * c.conv_channels()) + double(c.n_v_heads * c.d_k * c.d_v)) * 4;
  std::printf("kv cache per token (f32): %.0f bytes (%s)\n", kv, human(kv).c_str());
  kv_type_sizes(c);
  std::printf("recurrent state per sequence (f32): %.0f bytes (%s)\n", rec, human(rec).c_str());
  if (fit_mb > 0) kv_type_fit(c, double(mw.weight_bytes), rec, fit_mb);
  const kernels::cpu::AmxStatus amx = kernels::cpu::amx_status();
  std::printf("amx: %s\n", amx.in_use ? "in use for the fast mode's prefill matmuls" : ("not in use: " + amx.why_not).c_str());
  std::printf("verdict: SUPPORTED\n");
  if (plan.ranks > 0)
    if (int rc = print_plan(mw, plan); rc != 0) return rc;
  dplan.ctx = plan.ctx;
  dplan.parallel = plan.slots;
  dplan.mtp = spec == "mtp";
  dplan.fit_mb = fit_mb;
  return print_device_plan(mw, device, dplan);
}

}  // namespace qwen35::cli
