#include "cli/model_assets.h"

#include <memory>
#include <mutex>

#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

namespace {
// The metadata of the GGUF file last asked about: the tokenizer and the template read the same
// file, parsed once.
core::Result<std::shared_ptr<formats::GgufModel>> gguf_metadata(const std::string& path) {
  static std::mutex mu;
  static std::shared_ptr<formats::GgufModel> last;
  std::lock_guard<std::mutex> lock(mu);
  if (last && last->path() == path) return last;
  QWEN35_ASSIGN_OR_RETURN(last, formats::GgufModel::open(path, core::LoadMode::kMmap));
  return last;
}
}  // namespace

core::Result<tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
  if (!formats::is_gguf_path(path)) return tokenizer::Tokenizer::load(path);
  QWEN35_ASSIGN_OR_RETURN(auto g, gguf_metadata(path));
  return tokenizer::Tokenizer::from_gguf(*g);
}

core::Result<tmpl::ChatTemplate> load_chat_template(const std::string& path) {
  if (!formats::is_gguf_path(path)) return tmpl::load_chat_template(path);
  QWEN35_ASSIGN_OR_RETURN(auto g, gguf_metadata(path));
  if (g->find_value("tokenizer.chat_template") == nullptr)
    return core::error("[template] '" + path + "' has no tokenizer.chat_template");
  QWEN35_ASSIGN_OR_RETURN(std::string source, g->get_string("tokenizer.chat_template"));
  auto t = tmpl::ChatTemplate::parse(std::move(source));
  if (!t.ok()) return core::error("[template] '" + path + "' tokenizer.chat_template: " + t.message());
  // The named special tokens as default variables, as tokenizer_config.json gives them.
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  const formats::GgufValue* tokens = g->find_value("tokenizer.ggml.tokens");
  for (auto [key, var] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                          std::pair{"tokenizer.ggml.eos_token_id", "eos_token"},
                          std::pair{"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    const formats::GgufValue* v = g->find_value(key);
    if (tokens && v && v->is_int() && v->i >= 0 && size_t(v->i) < tokens->strings.size())
      vars[var] = tokens->strings[size_t(v->i)];
  }
  t->set_default_vars(std::move(vars));
  return t;
}

core::Result<formats::GenerationConfig> load_generation_config(const std::string& path) {
  if (formats::is_gguf_path(path)) return formats::GenerationConfig{};
  return formats::load_generation_config(path);
}

}  // namespace qwen35::cli
