#include "formats/hf_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mmap.h"

namespace qwen35::formats {

using core::error;
using core::Result;
using core::Status;
using json = nlohmann::json;

const QuantSpec* QuantConfig::lookup(const std::string& module, bool* unquantized) const {
  *unquantized = false;
  std::vector<std::string> keys = {module};
  const std::string hf = "model.language_model.", mlx = "language_model.model.";
  if (module.rfind(hf, 0) == 0) keys.push_back(mlx + module.substr(hf.size()));
  if (module.rfind(mlx, 0) == 0) keys.push_back(hf + module.substr(mlx.size()));
  for (const auto& k : keys) {
    auto it = overrides.find(k);
    if (it == overrides.end()) continue;
    if (!it->second) {
      *unquantized = true;
      return nullptr;
    }
    return &*it->second;
  }
  return nullptr;
}

namespace {

// Reads typed fields from the merged (text_config over root) object with clear messages.
class Reader {
 public:
  Reader(const json& root, const json* text, std::string label)
      : root_(root), text_(text), label_(std::move(label)) {}

  const json* find(const std::string& key) const {
    if (text_ != nullptr) {
      auto it = text_->find(key);
      if (it != text_->end() && !it->is_null()) return &*it;
    }
    auto it = root_.find(key);
    if (it != root_.end() && !it->is_null()) return &*it;
    return nullptr;
  }
  Status int_field(const std::string& key, int64_t* out, bool required) const {
    const json* v = find(key);
    if (v == nullptr) return required ? err(key, "is missing") : Status();
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > uint64_t(INT64_MAX)) return err(key, "integer out of range: " + v->dump());
      *out = int64_t(v->get<uint64_t>());
      return Status();
    }
    if (v->is_number_integer()) {
      *out = v->get<int64_t>();
      return Status();
    }
    if (v->is_number_float()) {
      // Integral floats (e.g. 1024.0) are accepted; range-check before the cast (UB otherwise).
      const double d = v->get<double>();
      if (!(d >= -9.2e18 && d <= 9.2e18)) return err(key, "number out of range: " + v->dump());
      if (d != double(int64_t(d))) return err(key, "expected an integer, got " + v->dump());
      *out = int64_t(d);
      return Status();
    }
    return err(key, "expected an integer, got " + v->dump());
  }
  Status num_field(const std::string& key, double* out) const {
    const json* v = find(key);
    if (v == nullptr) return Status();
    if (!v->is_number()) return err(key, "expected a number, got " + v->dump());
    *out = v->get<double>();
    return Status();
  }
  Status bool_field(const std::string& key, bool* out) const {
    const json* v = find(key);
    if (v == nullptr) return Status();
    if (!v->is_boolean()) return err(key, "expected true or false, got " + v->dump());
    *out = v->get<bool>();
    return Status();
  }
  Status err(const std::string& key, const std::string& what) const {
    return error("[config] '" + label_ + "' field '" + key + "': " + what);
  }

 private:
  const json& root_;
  const json* text_;
  std::string label_;
};

Status parse_quant_spec(const json& j, const std::string& where, QuantSpec* q, bool need_all) {
  auto bits = j.find("bits");
  auto gs = j.find("group_size");
  auto mode = j.find("mode");
  if (bits != j.end()) {
    if (!bits->is_number_integer()) return error(where + " 'bits' must be an integer");
    q->bits = bits->get<int>();
  } else if (need_all) {
    return error(where + " has no 'bits'");
  }
  if (gs != j.end()) {
    if (!gs->is_number_integer()) return error(where + " 'group_size' must be an integer");
    q->group_size = gs->get<int>();
  } else if (need_all) {
    return error(where + " has no 'group_size'");
  }
  if (mode != j.end()) {
    if (!mode->is_string()) return error(where + " 'mode' must be a string");
    q->mode = mode->get<std::string>();
  }
  return Status();
}

Status parse_quantization(const json& q, const std::string& label, QuantConfig* out) {
  const std::string where = "[config] '" + label + "' quantization";
  if (!q.is_object()) return error(where + ": expected an object");
  QWEN35_RETURN_IF_ERROR(parse_quant_spec(q, where, &out->defaults, true));
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it.key() == "bits" || it.key() == "group_size" || it.key() == "mode") continue;
    if (it.value().is_boolean()) {
      if (it.value().get<bool>()) out->overrides[it.key()] = out->defaults;
      else out->overrides[it.key()] = std::nullopt;
    } else if (it.value().is_object()) {
      QuantSpec s = out->defaults;
      QWEN35_RETURN_IF_ERROR(parse_quant_spec(it.value(), where + " override '" + it.key() + "'", &s, false));
      out->overrides[it.key()] = s;
    }  // other scalar keys (e.g. "quant_method") are informational
  }
  return Status();
}

Status parse_ids(const json* v, std::vector<int64_t>* out) {
  if (v == nullptr) return Status();
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) return error("token id out of range");
    out->push_back(v->get<int64_t>());
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)))
        return error("token id list holds a non-integer or out-of-range id");
      out->push_back(e.get<int64_t>());
    }
  } else {
    return error("expected a token id or a list of ids");
  }
  return Status();
}


// vision_config: read on its own (no text_config fallback); problems go into v.error.
HfVisionConfig parse_vision_config(const json& vj, const std::string& label) {
  HfVisionConfig v;
  if (!vj.is_object()) {
    v.error = "[config] '" + label + "' field 'vision_config': expected an object";
    return v;
  }
  Reader r(vj, nullptr, label + " vision_config");
  auto run = [&]() -> Status {
    for (auto [key, out] : {std::pair{"depth", &v.depth}, {"hidden_size", &v.hidden_size},
                            {"intermediate_size", &v.intermediate_size}, {"num_heads", &v.num_heads},
                            {"out_hidden_size", &v.out_hidden_size}})
      QWEN35_RETURN_IF_ERROR(r.int_field(key, out, true));
    QWEN35_RETURN_IF_ERROR(r.int_field("in_channels", &v.in_channels, false));
    QWEN35_RETURN_IF_ERROR(r.int_field("patch_size", &v.patch_size, false));
    QWEN35_RETURN_IF_ERROR(r.int_field("spatial_merge_size", &v.spatial_merge_size, false));
    QWEN35_RETURN_IF_ERROR(r.int_field("temporal_patch_size", &v.temporal_patch_size, false));
    QWEN35_RETURN_IF_ERROR(r.int_field("num_position_embeddings", &v.num_position_embeddings, false));
    if (const json* a = r.find("hidden_act")) {
      if (!a->is_string()) return r.err("hidden_act", "expected a string, got " + a->dump());
      v.hidden_act = a->get<std::string>();
    }
    if (Status s = parse_ids(r.find("deepstack_visual_indexes"), &v.deepstack_visual_indexes); !s.ok())
      return r.err("deepstack_visual_indexes", "expected a list of layer indexes");
    return Status();
  };
  if (Status s = run(); !s.ok()) v.error = s.message();
  return v;
}

}  // namespace

Result<HfConfig> parse_hf_config(const std::string& text, const std::string& label) {
  json root = json::parse(text, nullptr, false);
  if (root.is_discarded()) return error("[config] '" + label + "' is not valid JSON");
  if (!root.is_object()) return error("[config] '" + label + "' is not a JSON object");
  HfConfig c;
  const json* tc = nullptr;
  if (auto it = root.find("text_config"); it != root.end() && !it->is_null()) {
    if (!it->is_object()) return error("[config] '" + label + "' field 'text_config': expected an object");
    tc = &*it;
    c.has_text_config = true;
  }
  Reader r(root, tc, label);
  for (const json* o : {static_cast<const json*>(&root), tc})
    if (o != nullptr)
      for (auto it = o->begin(); it != o->end(); ++it)
        if (!it->is_null()) c.keys.insert(it.key());
  if (auto it = root.find("model_type"); it != root.end()) {
    if (!it->is_string()) return r.err("model_type", "expected a string");
    c.model_type = it->get<std::string>();
  }
  c.text_model_type = c.model_type;
  if (tc != nullptr)
    if (auto it = tc->find("model_type"); it != tc->end() && it->is_string())
      c.text_model_type = it->get<std::string>();
  if (c.model_type.empty()) c.model_type = c.text_model_type;
  if (c.model_type.empty()) return r.err("model_type", "is missing");
  if (auto it = root.find("architectures"); it != root.end() && it->is_array())
    for (const auto& a : *it)
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());

  QWEN35_RETURN_IF_ERROR(r.int_field("hidden_size", &c.hidden_size, true));
  QWEN35_RETURN_IF_ERROR(r.int_field("num_hidden_layers", &c.num_hidden_layers, true));
  QWEN35_RETURN_IF_ERROR(r.int_field("intermediate_size", &c.intermediate_size, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("num_attention_heads", &c.num_attention_heads, true));
  c.num_key_value_heads = c.num_attention_heads;
  QWEN35_RETURN_IF_ERROR(r.int_field("num_key_value_heads", &c.num_key_value_heads, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("head_dim", &c.head_dim, false));
  if (c.head_dim == 0 && c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  QWEN35_RETURN_IF_ERROR(r.int_field("vocab_size", &c.vocab_size, true));
  QWEN35_RETURN_IF_ERROR(r.num_field("rms_norm_eps", &c.rms_norm_eps));
  QWEN35_RETURN_IF_ERROR(r.bool_field("attention_bias", &c.attention_bias));
  QWEN35_RETURN_IF_ERROR(r.bool_field("attn_output_gate", &c.attn_output_gate));
  QWEN35_RETURN_IF_ERROR(r.int_field("linear_num_key_heads", &c.linear_num_key_heads, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("linear_num_value_heads", &c.linear_num_value_heads, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("linear_key_head_dim", &c.linear_key_head_dim, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("linear_value_head_dim", &c.linear_value_head_dim, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("linear_conv_kernel_dim", &c.linear_conv_kernel_dim, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("full_attention_interval", &c.full_attention_interval, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("max_position_embeddings", &c.max_position_embeddings, false));
  if (const json* lt = r.find("layer_types")) {
    if (!lt->is_array()) return r.err("layer_types", "expected a list of strings");
    for (const auto& t : *lt) {
      if (!t.is_string()) return r.err("layer_types", "expected a list of strings");
      c.layer_types.push_back(t.get<std::string>());
    }
  }
  // RoPE: rope_parameters > rope_scaling > flat keys.
  QWEN35_RETURN_IF_ERROR(r.num_field("rope_theta", &c.rope_theta));
  QWEN35_RETURN_IF_ERROR(r.num_field("partial_rotary_factor", &c.partial_rotary_factor));
  c.rope_theta_set = r.find("rope_theta") != nullptr;
  c.partial_rotary_factor_set = r.find("partial_rotary_factor") != nullptr;
  const json* rp = r.find("rope_parameters");
  c.rope_block_key = rp != nullptr ? "rope_parameters" : "";
  if (rp == nullptr && (rp = r.find("rope_scaling")) != nullptr) c.rope_block_key = "rope_scaling";
  if (rp != nullptr) {
    if (!rp->is_object()) return r.err("rope_parameters", "expected an object");
    if (auto it = rp->find("rope_theta"); it != rp->end()) {
      if (!it->is_number()) return r.err("rope_parameters.rope_theta", "expected a number");
      c.rope_theta = it->get<double>();
      c.rope_theta_set = true;
    }
    if (auto it = rp->find("partial_rotary_factor"); it != rp->end()) {
      if (!it->is_number()) return r.err("rope_parameters.partial_rotary_factor", "expected a number");
      c.partial_rotary_factor = it->get<double>();
      c.partial_rotary_factor_set = true;
    }
    if (auto it = rp->find("mrope_section"); it != rp->end()) {
      if (!it->is_array() || it->size() > 3)
        return r.err("rope_parameters.mrope_section", "expected an array of at most 3 integers");
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
          return r.err("rope_parameters.mrope_section", "expected non-negative integers");
        c.mrope_section.push_back(v.get<int64_t>());
      }
    }
    auto t = rp->find("rope_type");
    if (t == rp->end()) t = rp->find("type");
    if (t != rp->end() && t->is_string()) c.rope_type = t->get<std::string>();
  }
  if (tc != nullptr && tc->contains("tie_word_embeddings") && (*tc)["tie_word_embeddings"].is_boolean())
    c.tie_word_embeddings = (*tc)["tie_word_embeddings"].get<bool>();
  else if (root.contains("tie_word_embeddings") && root["tie_word_embeddings"].is_boolean())
    c.tie_word_embeddings = root["tie_word_embeddings"].get<bool>();

  QWEN35_RETURN_IF_ERROR(r.int_field("num_experts", &c.num_experts, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("num_experts_per_tok", &c.num_experts_per_tok, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("moe_intermediate_size", &c.moe_intermediate_size, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("shared_expert_intermediate_size", &c.shared_expert_intermediate_size, false));
  QWEN35_RETURN_IF_ERROR(r.bool_field("norm_topk_prob", &c.norm_topk_prob));
  QWEN35_RETURN_IF_ERROR(r.int_field("mtp_num_hidden_layers", &c.mtp_num_hidden_layers, false));
  QWEN35_RETURN_IF_ERROR(r.int_field("decoder_sparse_step", &c.decoder_sparse_step, false));
  QWEN35_RETURN_IF_ERROR(r.bool_field("use_sliding_window", &c.use_sliding_window));
  if (Status s = parse_ids(r.find("mlp_only_layers"), &c.mlp_only_layers); !s.ok())
    return r.err("mlp_only_layers", "expected a list of layer indexes");
  if (Status s = parse_ids(r.find("eos_token_id"), &c.eos_token_ids); !s.ok())
    return r.err("eos_token_id", s.message());

  // MLX: "quantization" (root or text_config); "quantization_config" without quant_method is the
  // same block, with quant_method it is another scheme (gptq, awq, fp8...).
  const json* q = nullptr;
  if (auto it = root.find("quantization"); it != root.end() && !it->is_null()) q = &*it;
  else if (tc != nullptr && tc->contains("quantization") && !(*tc)["quantization"].is_null()) q = &(*tc)["quantization"];
  if (q == nullptr) {
    const json* qc = nullptr;
    if (auto it = root.find("quantization_config"); it != root.end() && it->is_object()) qc = &*it;
    else if (tc != nullptr && tc->contains("quantization_config") && (*tc)["quantization_config"].is_object())
      qc = &(*tc)["quantization_config"];
    if (qc != nullptr) {
      if (auto m = qc->find("quant_method"); m != qc->end()) c.quant_method = m->is_string() ? m->get<std::string>() : m->dump();
      else if (qc->contains("bits")) q = qc;
    }
  }
  if (q != nullptr) {
    QuantConfig qcfg;
    QWEN35_RETURN_IF_ERROR(parse_quantization(*q, label, &qcfg));
    c.quantization = std::move(qcfg);
  }
  if (auto it = root.find("vision_config"); it != root.end() && !it->is_null())
    c.vision = parse_vision_config(*it, label);
  Reader rr(root, nullptr, label);
  for (auto [key, out] : {std::pair{"image_token_id", &c.image_token_id}, {"video_token_id", &c.video_token_id},
                          {"vision_start_token_id", &c.vision_start_token_id},
                          {"vision_end_token_id", &c.vision_end_token_id}})
    QWEN35_RETURN_IF_ERROR(rr.int_field(key, out, false));
  return c;
}

Result<HfConfig> load_hf_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return error("[checkpoint] '" + dir + "' does not exist");
  if (!fs::is_directory(dir, ec))
    return error("[checkpoint] '" + dir + "' is not a directory (pass the checkpoint folder)");
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(path, ec)) return error("[config] no config.json in '" + dir + "'");
  auto text = core::read_text_file(path);
  if (!text.ok()) return error("[config] " + text.message());
  return parse_hf_config(*text, "config.json");
}

Result<GenerationConfig> load_generation_config(const std::string& dir) {
  namespace fs = std::filesystem;
  GenerationConfig g;
  const std::string path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return g;
  auto text = core::read_text_file(path);
  if (!text.ok()) return error("[config] " + text.message());
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return error("[config] 'generation_config.json' is not a valid JSON object");
  g.present = true;
  Reader r(j, nullptr, "generation_config.json");
  auto opt_num = [&](const char* k, std::optional<double>* out) -> Status {
    if (r.find(k) == nullptr) return Status();
    double v = 0;
    QWEN35_RETURN_IF_ERROR(r.num_field(k, &v));
    *out = v;
    return Status();
  };
  QWEN35_RETURN_IF_ERROR(opt_num("temperature", &g.temperature));
  QWEN35_RETURN_IF_ERROR(opt_num("top_p", &g.top_p));
  QWEN35_RETURN_IF_ERROR(opt_num("min_p", &g.min_p));
  QWEN35_RETURN_IF_ERROR(opt_num("repetition_penalty", &g.repetition_penalty));
  QWEN35_RETURN_IF_ERROR(opt_num("presence_penalty", &g.presence_penalty));
  if (r.find("top_k") != nullptr) {
    int64_t k = 0;
    QWEN35_RETURN_IF_ERROR(r.int_field("top_k", &k, false));
    g.top_k = k;
  }
  if (r.find("do_sample") != nullptr) {
    bool b = false;
    QWEN35_RETURN_IF_ERROR(r.bool_field("do_sample", &b));
    g.do_sample = b;
  }
  if (Status s = parse_ids(r.find("eos_token_id"), &g.eos_token_ids); !s.ok())
    return r.err("eos_token_id", s.message());
  return g;
}

}  // namespace qwen35::formats
