// What a model path gives besides its weights, for either kind of path: a checkpoint directory
// (tokenizer.json, tokenizer_config.json / chat_template.jinja, generation_config.json) or a
// .gguf file (its tokenizer.* metadata; no generation config).
#pragma once

#include <string>

#include "core/result.h"
#include "formats/hf_config.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

core::Result<tokenizer::Tokenizer> load_tokenizer(const std::string& path);
core::Result<tmpl::ChatTemplate> load_chat_template(const std::string& path);
// A GGUF file has none: the defaults (GenerationConfig::present false).
core::Result<formats::GenerationConfig> load_generation_config(const std::string& path);

}  // namespace qwen35::cli
