// What a model path gives besides its weights, for either kind of path: a checkpoint directory
// (tokenizer.json, tokenizer_config.json / chat_template.jinja, generation_config.json) or a
// .gguf file (its tokenizer.* metadata; no generation config). Declarations only: a caller
// includes the header of what it uses (tokenizer/tokenizer.h, template/chat_template.h,
// formats/hf_config.h), and no command compiles the others.
#pragma once

#include <string>

#include "core/result.h"

namespace qwen35::tokenizer {
class Tokenizer;
}
namespace qwen35::tmpl {
class ChatTemplate;
}
namespace qwen35::formats {
struct GenerationConfig;
}

namespace qwen35::cli {

core::Result<tokenizer::Tokenizer> load_tokenizer(const std::string& path);
core::Result<tmpl::ChatTemplate> load_chat_template(const std::string& path);
// A GGUF file has none: the defaults (GenerationConfig::present false).
core::Result<formats::GenerationConfig> load_generation_config(const std::string& path);

}  // namespace qwen35::cli
