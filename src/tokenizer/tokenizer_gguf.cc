// The tokenizer of a GGUF file, from its metadata (tokenizer.ggml.*): restated as the
// tokenizer.json it stands for and loaded by the same code as a tokenizer.json.
//   - model "gpt2": byte-level BPE; tokens (every id, in order) and merges ("a b");
//   - pre "qwen35" (or "qwen2"): the Split regex of that tokenizer, then ByteLevel;
//   - no normalizer: llama.cpp applies none to these files, so neither do we (a tokenizer.json
//     of the same model may ask for NFC; the ids differ only on text that NFC changes);
//   - token types CONTROL (3) and USER_DEFINED (4) are added tokens, matched in the raw text;
//     CONTROL ones are special (dropped by decode with skip_special);
//   - bos / eos / padding ids name the config's tokens; tokenizer.chat_template is the template.
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {

namespace {

using json = nlohmann::json;  // std::map objects: the vocabulary has ~250k keys

// The Split regexes of the pre-tokenizers GGUF names (`tokenizer.ggml.pre`), as their
// tokenizer.json files write them.
const char* split_regex(const std::string& pre) {
  if (pre == "qwen35")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "qwen2")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  return nullptr;
}

constexpr int64_t kControl = 3, kUserDefined = 4;

}  // namespace

core::Result<Tokenizer> Tokenizer::from_gguf(const formats::GgufModel& g) {
  const std::string label = g.path().empty() ? std::string("GGUF metadata") : g.path();
  auto fail = [&](const std::string& what) { return core::error("[tokenizer] '" + label + "': " + what); };
  QWEN35_ASSIGN_OR_RETURN(std::string model, g.get_string("tokenizer.ggml.model"));
  if (model != "gpt2")
    return fail("tokenizer.ggml.model '" + model + "' is not supported (supported: gpt2, byte-level BPE)");
  std::string pre = "qwen35";
  if (g.find_value("tokenizer.ggml.pre")) {
    QWEN35_ASSIGN_OR_RETURN(pre, g.get_string("tokenizer.ggml.pre"));
  }
  const char* regex = split_regex(pre);
  if (regex == nullptr) return fail("tokenizer.ggml.pre '" + pre + "' is not supported (supported: qwen35, qwen2)");
  const formats::GgufValue* tokens = g.find_value("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array() || tokens->elem != formats::GgufValueType::kString)
    return fail("tokenizer.ggml.tokens is missing or not an array of strings");
  const formats::GgufValue* merges = g.find_value("tokenizer.ggml.merges");
  if (merges == nullptr || !merges->is_array() || merges->elem != formats::GgufValueType::kString)
    return fail("tokenizer.ggml.merges is missing or not an array of strings");
  const formats::GgufValue* types = g.find_value("tokenizer.ggml.token_type");
  if (types != nullptr && (!types->is_array() || types->ints.size() != tokens->strings.size()))
    return fail("tokenizer.ggml.token_type is not an integer array of one entry per token");
  const size_t n = tokens->strings.size();
  json vocab = json::object(), added = json::array();
  std::unordered_set<std::string_view> seen;
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = tokens->strings[id];
    if (utf8_valid_prefix(t) != t.size()) return fail("token " + std::to_string(id) + " is not valid UTF-8");
    if (!seen.insert(t).second) return fail("token " + std::to_string(id) + " repeats an earlier token");
    vocab[t] = id;
    const int64_t type = types ? types->ints[id] : 1;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", type == kControl}});
  }
  for (size_t i = 0; i < merges->strings.size(); ++i)
    if (utf8_valid_prefix(merges->strings[i]) != merges->strings[i].size())
      return fail("merge " + std::to_string(i) + " is not valid UTF-8");
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                           {"use_regex", false}};
  json tj = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                      byte_level})}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", false}, {"vocab", std::move(vocab)}, {"merges", merges->strings}}},
  };
  json cfg = json::object();
  auto token_of = [&](const char* key, const char* field) -> core::Status {
    const formats::GgufValue* v = g.find_value(key);
    if (v == nullptr) return core::ok_status();
    if (!v->is_int() || v->i < 0 || size_t(v->i) >= n)
      return fail(std::string(key) + " is not a token id");
    cfg[field] = tokens->strings[size_t(v->i)];
    return core::ok_status();
  };
  QWEN35_RETURN_IF_ERROR(token_of("tokenizer.ggml.bos_token_id", "bos_token"));
  QWEN35_RETURN_IF_ERROR(token_of("tokenizer.ggml.eos_token_id", "eos_token"));
  QWEN35_RETURN_IF_ERROR(token_of("tokenizer.ggml.padding_token_id", "pad_token"));
  if (const formats::GgufValue* v = g.find_value("tokenizer.ggml.add_bos_token"); v && v->is_int())
    cfg["add_bos_token"] = v->i != 0;
  if (const formats::GgufValue* v = g.find_value("tokenizer.chat_template");
      v && v->type == formats::GgufValueType::kString && utf8_valid_prefix(v->s) == v->s.size())
    cfg["chat_template"] = v->s;
  return from_json(tj.dump(), cfg.dump(), label);
}

}  // namespace qwen35::tokenizer
