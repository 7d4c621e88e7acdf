// Images in a prompt the command line builds (`run --image`, the chat's /image, `bench --image`):
// the user message's content parts, as the chat template takes them, and the expansion of each
// image's placeholder into its run of image tokens (docs/design.md "Images"). The template
// renders an image part as <|vision_start|><|image_pad|><|vision_end|>, one <|image_pad|> per
// image; the engine wants (h/merge)·(w/merge) image tokens there, its merged tower rows.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace qwen35::model {
struct ModelConfig;
}
namespace qwen35::tokenizer {
class Tokenizer;
}

namespace qwen35::cli {

// The id of <|image_pad|>: config.json's image_token_id, else the tokenizer's (GGUF models);
// -1 when neither has one.
int32_t image_token_id(const model::ModelConfig& c, const tokenizer::Tokenizer& tok);

// A user message's content: `n_images` image parts, then the text (Qwen's order for a message
// holding [image..., text]). Without images, the plain string, so text-only prompts render as
// they always did.
nlohmann::ordered_json user_content(size_t n_images, const std::string& text);

// `ids` with its k-th `image_token` repeated tokens[k] times. The number of image tokens in
// `ids` must equal tokens.size() (text that spells <|image_pad|> itself is refused here).
// The bytes of an image file, refused past `max_bytes` without reading the rest; errors name the
// file ("cannot read photo.png: No such file or directory").
core::Result<std::string> read_image_file(const std::string& path, size_t max_bytes);

core::Result<std::vector<int32_t>> expand_image_tokens(std::span<const int32_t> ids, int32_t image_token,
                                                       std::span<const int64_t> tokens);

}  // namespace qwen35::cli
