// Loading tokenizer.json / tokenizer_config.json into TokenizerData. Every unsupported feature
// fails closed with an error that names the field.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer_data.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {

namespace {

using core::Status;
using json = nlohmann::json;

class Ctx {
 public:
  explicit Ctx(std::string label) : label_(std::move(label)) {}
  Status err(const std::string& field, const std::string& what) const {
    return core::error("[tokenizer] '" + label_ + "': " + field + ": " + what);
  }
  const std::string& label() const { return label_; }

 private:
  std::string label_;
};

std::string short_dump(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// A field that must be absent/null or equal to one of the accepted values.
Status expect_null_or(const json& obj, const std::string& key, const std::string& path,
                      const std::vector<json>& accepted, const Ctx& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return core::ok_status();
  for (const json& a : accepted) {
    if (*it == a) return core::ok_status();
  }
  return ctx.err(path + "." + key, "unsupported value " + short_dump(*it));
}

bool get_bool(const json& obj, const std::string& key, bool dflt) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

Status parse_normalizer(const json& root, const Ctx& ctx, bool* nfc) {
  *nfc = false;
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return core::ok_status();
  std::vector<const json*> steps;
  std::string path = "normalizer";
  if (type_of(*it) == "Sequence") {
    auto seq = it->find("normalizers");
    if (seq == it->end() || !seq->is_array()) return ctx.err(path, "Sequence without normalizers");
    for (const json& s : *seq) steps.push_back(&s);
  } else {
    steps.push_back(&*it);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string t = type_of(*steps[i]);
    if (t != "NFC") {
      return ctx.err(steps.size() > 1 ? path + ".normalizers[" + std::to_string(i) + "]" : path,
                     "unsupported type '" + t + "' (supported: NFC)");
    }
    *nfc = true;
  }
  return core::ok_status();
}

Status parse_byte_level(const json& j, const std::string& path, const Ctx& ctx, bool* use_regex) {
  QWEN35_RETURN_IF_ERROR(expect_null_or(j, "add_prefix_space", path, {false}, ctx));
  *use_regex = get_bool(j, "use_regex", true);
  return core::ok_status();
}

Status parse_pre_tokenizer(const json& root, const Ctx& ctx, std::vector<RegexSplitter>* out) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) {
    return ctx.err("pre_tokenizer", "missing (a ByteLevel pre-tokenizer is required)");
  }
  std::vector<std::pair<const json*, std::string>> steps;
  if (type_of(*it) == "Sequence") {
    auto seq = it->find("pretokenizers");
    if (seq == it->end() || !seq->is_array()) {
      return ctx.err("pre_tokenizer", "Sequence without pretokenizers");
    }
    for (size_t i = 0; i < seq->size(); ++i) {
      steps.emplace_back(&(*seq)[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    }
  } else {
    steps.emplace_back(&*it, "pre_tokenizer");
  }
  bool have_byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = *steps[i].first;
    const std::string& path = steps[i].second;
    const std::string t = type_of(s);
    if (have_byte_level) return ctx.err(path, "a step after ByteLevel is not supported");
    if (t == "ByteLevel") {
      bool use_regex = true;
      QWEN35_RETURN_IF_ERROR(parse_byte_level(s, path, ctx, &use_regex));
      if (use_regex) {
        auto r = RegexSplitter::create(kGpt2Pattern, "[tokenizer] GPT-2 regex");
        if (!r.ok()) return r.status();
        out->push_back(std::move(r).value());
      }
      have_byte_level = true;
    } else if (t == "Split") {
      auto pat = s.find("pattern");
      if (pat == s.end() || !pat->is_object() || !pat->contains("Regex") ||
          !(*pat)["Regex"].is_string()) {
        return ctx.err(path + ".pattern", "only {\"Regex\": ...} patterns are supported");
      }
      QWEN35_RETURN_IF_ERROR(expect_null_or(s, "invert", path, {false}, ctx));
      auto beh = s.find("behavior");
      if (beh == s.end() || *beh != "Isolated") {
        return ctx.err(path + ".behavior", "unsupported value " +
                                               (beh == s.end() ? "(missing)" : short_dump(*beh)) +
                                               " (supported: Isolated)");
      }
      auto r = RegexSplitter::create((*pat)["Regex"].get<std::string>(),
                                     "[tokenizer] '" + ctx.label() + "': " + path + ".pattern");
      if (!r.ok()) return r.status();
      out->push_back(std::move(r).value());
    } else {
      return ctx.err(path, "unsupported type '" + t + "' (supported: Split, ByteLevel)");
    }
  }
  if (!have_byte_level) return ctx.err("pre_tokenizer", "no ByteLevel step (byte-level BPE only)");
  return core::ok_status();
}

Status check_decoder_and_post(const json& root, const Ctx& ctx) {
  auto dec = root.find("decoder");
  if (dec == root.end() || type_of(*dec) != "ByteLevel") {
    return ctx.err("decoder", "unsupported value " +
                                  (dec == root.end() ? "(missing)" : short_dump(*dec)) +
                                  " (supported: ByteLevel)");
  }
  auto post = root.find("post_processor");
  if (post != root.end() && !post->is_null() && type_of(*post) != "ByteLevel") {
    return ctx.err("post_processor",
                   "unsupported type '" + type_of(*post) + "' (supported: ByteLevel or null)");
  }
  QWEN35_RETURN_IF_ERROR(expect_null_or(root, "truncation", "tokenizer", {}, ctx));
  QWEN35_RETURN_IF_ERROR(expect_null_or(root, "padding", "tokenizer", {}, ctx));
  return core::ok_status();
}

}  // namespace

// Defined in tokenizer_vocab.cc.
Status load_model(const json& root, const std::string& label, TokenizerData* d);
Status load_added_tokens(const json& root, const std::string& label, TokenizerData* d);
Status load_config(std::string_view config_json, const std::string& label, TokenizerData* d);

core::Result<Tokenizer> Tokenizer::from_json_unchecked(std::string_view tokenizer_json,
                                                       std::string_view config_json,
                                                       const std::string& label) {
  const Ctx ctx(label);
  json root;
  try {
    root = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    return core::error("[tokenizer] '" + label + "': invalid JSON: " + e.what());
  }
  if (!root.is_object()) return ctx.err("(root)", "not a JSON object");
  auto d = std::make_unique<TokenizerData>();
  QWEN35_RETURN_IF_ERROR(parse_normalizer(root, ctx, &d->nfc));
  QWEN35_RETURN_IF_ERROR(parse_pre_tokenizer(root, ctx, &d->splitters));
  QWEN35_RETURN_IF_ERROR(check_decoder_and_post(root, ctx));
  QWEN35_RETURN_IF_ERROR(load_model(root, label, d.get()));
  QWEN35_RETURN_IF_ERROR(load_added_tokens(root, label, d.get()));
  if (!config_json.empty()) {
    // Name the config file in its errors: ".../tokenizer.json" -> ".../tokenizer_config.json".
    std::string cfg_label = label;
    const std::string suffix = "tokenizer.json";
    if (cfg_label.size() >= suffix.size() &&
        cfg_label.compare(cfg_label.size() - suffix.size(), suffix.size(), suffix) == 0) {
      cfg_label.replace(cfg_label.size() - suffix.size(), suffix.size(), "tokenizer_config.json");
    } else {
      cfg_label += " (config)";
    }
    QWEN35_RETURN_IF_ERROR(load_config(config_json, cfg_label, d.get()));
  }
  return Tokenizer(std::move(d));
}

core::Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                             std::string_view config_json,
                                             const std::string& label) {
  // The readers check types before they read; this catch is the layer boundary for anything a
  // malformed file still makes nlohmann::json throw.
  try {
    return from_json_unchecked(tokenizer_json, config_json, label);
  } catch (const json::exception& e) {
    return core::error("[tokenizer] '" + label + "': unexpected JSON structure: " + e.what());
  }
}

namespace {

Status read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return core::error("[tokenizer] '" + path + "': cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return core::error("[tokenizer] '" + path + "': read error");
  *out = std::move(ss).str();
  return core::ok_status();
}

}  // namespace

core::Result<Tokenizer> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(tok_path, ec)) {
    return core::error("[tokenizer] '" + tok_path + "': no such file");
  }
  std::string tok_json, cfg_json;
  QWEN35_RETURN_IF_ERROR(read_file(tok_path, &tok_json));
  if (fs::is_regular_file(cfg_path, ec)) {
    QWEN35_RETURN_IF_ERROR(read_file(cfg_path, &cfg_json));
    if (cfg_json.empty()) return core::error("[tokenizer] '" + cfg_path + "': empty file");
  }
  return from_json(tok_json, cfg_json, tok_path);
}

}  // namespace qwen35::tokenizer
