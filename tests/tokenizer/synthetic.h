// A tiny byte-level BPE tokenizer.json built in memory for unit tests: the 256 byte tokens
// (ids 0-255, in byte order) plus a few merges: "he" 256, "ll" 257, "hell" 258, "hello" 259.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/utf8.h"

namespace qwen35::tokenizer::testing {

inline nlohmann::json synthetic_json(bool merges_as_pairs = false) {
  using nlohmann::json;
  static const ByteLevelAlphabet kAlphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(kAlphabet.byte_to_cp[b], &s);
    vocab[s] = b;
  }
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  json merges = json::array();
  for (auto [a, b] : {std::pair{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}) {
    if (merges_as_pairs) {
      merges.push_back(json::array({a, b}));
    } else {
      merges.push_back(std::string(a) + " " + b);
    }
  }
  const std::string regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", {{"type", "NFC"}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers", json::array({{{"type", "Split"},
                                              {"pattern", {{"Regex", regex}}},
                                              {"behavior", "Isolated"},
                                              {"invert", false}},
                                             {{"type", "ByteLevel"},
                                              {"add_prefix_space", false},
                                              {"trim_offsets", false},
                                              {"use_regex", false}}})}}},
            {"post_processor", {{"type", "ByteLevel"}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  return j;
}

inline nlohmann::json added_token(const std::string& content, int id, bool special,
                                  bool lstrip = false, bool rstrip = false,
                                  bool single_word = false, bool normalized = false) {
  return {{"id", id},
          {"content", content},
          {"special", special},
          {"lstrip", lstrip},
          {"rstrip", rstrip},
          {"single_word", single_word},
          {"normalized", normalized}};
}

}  // namespace qwen35::tokenizer::testing
