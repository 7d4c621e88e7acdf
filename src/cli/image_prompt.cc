#include "cli/image_prompt.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <filesystem>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

int32_t image_token_id(const model::ModelConfig& c, const tokenizer::Tokenizer& tok) {
  if (c.vision.image_token_id >= 0) return int32_t(c.vision.image_token_id);
  return tok.token_to_id("<|image_pad|>");
}

nlohmann::ordered_json user_content(size_t n_images, const std::string& text) {
  if (n_images == 0) return text;
  auto parts = nlohmann::ordered_json::array();
  for (size_t i = 0; i < n_images; ++i) parts.push_back({{"type", "image"}});
  parts.push_back({{"type", "text"}, {"text", text}});
  return parts;
}

core::Result<std::string> read_image_file(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return core::error("cannot read " + path + ": it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::error("cannot read " + path + ": " + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    bytes.append(buf, size_t(in.gcount()));
    if (bytes.size() > max_bytes)
      return core::error(path + " is larger than the " + std::to_string(max_bytes) + " bytes an image may have");
  }
  if (in.bad()) return core::error("cannot read " + path);
  return bytes;
}

core::Result<std::vector<int32_t>> expand_image_tokens(std::span<const int32_t> ids, int32_t image_token,
                                                       std::span<const int64_t> tokens) {
  size_t found = 0;
  for (int32_t id : ids) found += id == image_token ? 1 : 0;
  if (image_token < 0 && !tokens.empty())
    return core::error("this model's vocabulary has no <|image_pad|> token");
  if (found != tokens.size())
    return core::error("the prompt has " + std::to_string(found) + " image placeholder" + (found == 1 ? "" : "s") +
                       " (<|image_pad|>) for " + std::to_string(tokens.size()) + " image" +
                       (tokens.size() == 1 ? "" : "s") + ": the text may not spell <|image_pad|> itself");
  std::vector<int32_t> out;
  int64_t extra = 0;
  for (int64_t n : tokens) extra += n - 1;
  out.reserve(ids.size() + size_t(std::max<int64_t>(0, extra)));
  size_t k = 0;
  for (int32_t id : ids) {
    if (id != image_token) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), size_t(tokens[k++]), image_token);
  }
  return out;
}

}  // namespace qwen35::cli
