// A synthetic but valid Hugging Face byte-level BPE tokenizer with the Qwen3.5 mechanics: NFC
// normalizer, the Qwen3.5 Split regex + ByteLevel pre-tokenizer, ByteLevel decoder, the 33 Qwen3.5
// added tokens right after the BPE vocabulary. The merges are synthetic (letter-extension merges
// drawn from a fixed-seed PRNG) but valid: every merge joins two vocabulary entries into the next
// new id, so ids 0..bpe_vocab-1 are dense. The merge list for a smaller vocabulary is a prefix of
// the one for a larger vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qwen35::tools {

struct AddedToken {
  const char* content;
  bool special;
};

// The Qwen3.5 added tokens in id order (<|endoftext|> first, <|audio_pad|> last).
const std::vector<AddedToken>& qwen35_added_tokens();

// Id of an added token given the BPE vocabulary size (first added id); -1 if unknown.
int64_t added_token_id(int64_t bpe_vocab, const std::string& content);

// Vocabulary (id order) and merges of the synthetic BPE model, byte-level encoded strings.
struct BpeModel {
  std::vector<std::string> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
};
BpeModel make_bpe_model(int64_t bpe_vocab);

std::string make_tokenizer_json(int64_t bpe_vocab);
// chat_template: chat_template_for(model_type).
std::string make_tokenizer_config_json(int64_t bpe_vocab, int64_t model_max_length,
                                       const std::string& model_type);

// The Qwen3.5 chat template (tools/synth/chat_template.jinja, embedded at build time).
std::string qwen35_chat_template();
// Qwen3's (tools/synth/qwen3_chat_template.jinja: the chat_template of Qwen3's
// tokenizer_config.json, as tests/fixtures/chat_template/qwen3 holds it): Hermes-style JSON tool
// calls, and a generation prompt that leaves <think> to the model.
std::string qwen3_chat_template();
// The template a checkpoint of `model_type` ships: Qwen3's for qwen3 and qwen3_moe, else Qwen3.5's.
std::string chat_template_for(const std::string& model_type);

}  // namespace qwen35::tools
