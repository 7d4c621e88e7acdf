#include "tools/synth/tokenizer_gen.h"

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/random.h"

namespace qwen35::tools {

using ojson = nlohmann::ordered_json;

namespace {

const unsigned char kChatTemplate[] = {
#include "synth_chat_template.inc"
};
const unsigned char kQwen3ChatTemplate[] = {
#include "synth_qwen3_chat_template.inc"
};

// UTF-8 encoding of a code point below 0x800 (all byte-level symbols are).
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2 bytes_to_unicode, in its list order (printable bytes first): the first 256 ids.
std::vector<std::string> byte_symbols() {
  std::vector<int> order;
  std::vector<bool> printable(256, false);
  for (int b = 0; b < 256; ++b) {
    printable[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (printable[b]) order.push_back(b);
  }
  std::vector<uint32_t> cp(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) cp[b] = printable[b] ? uint32_t(b) : uint32_t(256 + extra++);
  for (int b = 0; b < 256; ++b)
    if (!printable[b]) order.push_back(b);
  std::vector<std::string> out;
  for (int b : order) out.push_back(utf8(cp[b]));
  return out;
}


class Builder {
 public:
  explicit Builder(int64_t target) : target_(size_t(target)) {
    m_.vocab = byte_symbols();
    for (const auto& s : m_.vocab) have_.insert(s);
  }
  bool full() const { return m_.vocab.size() >= target_; }
  // Adds merge (a, b) when both exist and a+b is new; returns whether it was added.
  bool merge(const std::string& a, const std::string& b) {
    if (full() || !have_.count(a) || !have_.count(b)) return false;
    std::string ab = a + b;
    if (!have_.insert(ab).second) return false;
    m_.merges.emplace_back(a, b);
    m_.vocab.push_back(std::move(ab));
    return true;
  }
  BpeModel take() { return std::move(m_); }

 private:
  size_t target_;
  BpeModel m_;
  std::unordered_set<std::string> have_;
};

}  // namespace

const std::vector<AddedToken>& qwen35_added_tokens() {
  static const std::vector<AddedToken> kTokens = {
      {"<|endoftext|>", true},      {"<|im_start|>", true},
      {"<|im_end|>", true},         {"<|object_ref_start|>", true},
      {"<|object_ref_end|>", true}, {"<|box_start|>", true},
      {"<|box_end|>", true},        {"<|quad_start|>", true},
      {"<|quad_end|>", true},       {"<|vision_start|>", true},
      {"<|vision_end|>", true},     {"<|vision_pad|>", true},
      {"<|image_pad|>", true},      {"<|video_pad|>", true},
      {"<tool_call>", false},       {"</tool_call>", false},
      {"<|fim_prefix|>", false},    {"<|fim_middle|>", false},
      {"<|fim_suffix|>", false},    {"<|fim_pad|>", false},
      {"<|repo_name|>", false},     {"<|file_sep|>", false},
      {"<tool_response>", false},   {"</tool_response>", false},
      {"<think>", false},           {"</think>", false},
      {"<|audio_start|>", true},    {"<|audio_end|>", true},
      {"<tts_pad>", true},          {"<tts_text_bos>", true},
      {"<tts_text_eod>", true},     {"<tts_text_bos_single>", true},
      {"<|audio_pad|>", true},
  };
  return kTokens;
}

int64_t added_token_id(int64_t bpe_vocab, const std::string& content) {
  const auto& t = qwen35_added_tokens();
  for (size_t i = 0; i < t.size(); ++i)
    if (content == t[i].content) return bpe_vocab + int64_t(i);
  return -1;
}

BpeModel make_bpe_model(int64_t bpe_vocab) {
  Builder b(bpe_vocab);
  const std::string sp = utf8(0x120), nl = utf8(0x10a), tab = utf8(0x109);  // Ġ Ċ ĉ
  // Whitespace runs and a few punctuation pairs, as real vocabularies have.
  b.merge(sp, sp);
  b.merge(sp + sp, sp + sp);
  b.merge(sp + sp + sp + sp, sp + sp + sp + sp);
  b.merge(nl, nl);
  b.merge(tab, tab);
  for (const char* p : {"()", "{}", "[]", "==", "->", "::", "//", "\");", "',"})
    b.merge(std::string(1, p[0]), std::string(p + 1));
  for (const char* p : {"(", "{", "=", "\"", "-", "+", "*", "/"}) b.merge(sp, p);
  std::vector<std::string> words;  // letter tokens, optionally with a leading Ġ
  for (char c = 'a'; c <= 'z'; ++c) words.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) words.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c)
    if (b.merge(sp, std::string(1, c))) words.push_back(sp + c);
  for (char c = 'A'; c <= 'Z'; ++c)
    if (b.merge(sp, std::string(1, c))) words.push_back(sp + c);
  // Extend a word token by one lowercase letter (English letter frequencies), preferring early
  // (short, frequent) tokens; rarely join two words. Fixed seed: the tokenizer never varies.
  static const char kLetters[] =
      "eeeeeeeeeeeetttttttttaaaaaaaaoooooooiiiiiiinnnnnnnsssssshhhhhh"
      "rrrrrrddddlllluuucccmmmwwffggyyppbbvkjxqz";
  const size_t n_letters = sizeof(kLetters) - 1;
  uint64_t state = 0x5eed0fb9e0ull;
  size_t stall = 0;
  while (!b.full()) {
    const uint64_t r = core::splitmix64(&state);
    const double u = double(r >> 11) * (1.0 / 9007199254740992.0);
    const size_t i = size_t(double(words.size()) * u * u * u);
    const std::string& w = words[std::min(i, words.size() - 1)];
    std::string right(1, kLetters[(r & 0xffff) % n_letters]);
    if (((r >> 16) & 0xff) < 8) {  // ~3%: join with another word that has no leading space
      const std::string& w2 = words[size_t((r >> 24) & 0xffffff) % words.size()];
      if (w2[0] >= 'a' && w2[0] <= 'z') right = w2;
    }
    if (w.size() + right.size() <= 24 && b.merge(w, right)) {
      words.push_back(w + right);
      stall = 0;
    } else if (++stall > 1000000) {
      break;  // cannot happen for sane sizes; keeps the loop finite
    }
  }
  // Dense filler (never produced by a merge) if the loop above ever stalls.
  BpeModel m = b.take();
  for (int64_t id = int64_t(m.vocab.size()); id < bpe_vocab; ++id)
    m.vocab.push_back("<|synth_unused_" + std::to_string(id) + "|>");
  return m;
}

std::string make_tokenizer_json(int64_t bpe_vocab) {
  const BpeModel m = make_bpe_model(bpe_vocab);
  ojson added = ojson::array();
  const auto& toks = qwen35_added_tokens();
  for (size_t i = 0; i < toks.size(); ++i)
    added.push_back({{"id", bpe_vocab + int64_t(i)},
                     {"content", toks[i].content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", toks[i].special}});
  const ojson byte_level = {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", false},
                            {"use_regex", false}};
  const char* kRegex =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}"
      "\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  ojson pre = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"},
                  {"pattern", {{"Regex", kRegex}}},
                  {"behavior", "Isolated"},
                  {"invert", false}},
                 byte_level}}};
  ojson model = {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false}};
  ojson t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  t["added_tokens"] = std::move(added);
  t["normalizer"] = {{"type", "NFC"}};
  t["pre_tokenizer"] = std::move(pre);
  t["post_processor"] = byte_level;
  t["decoder"] = byte_level;
  t["model"] = std::move(model);
  // The vocabulary and merges are appended as text: ordered_json objects insert in linear time.
  std::string out = t.dump();
  out.resize(out.size() - 2);  // drop "}}": reopen the model object
  out += ",\"vocab\":{";
  for (size_t i = 0; i < m.vocab.size(); ++i) {
    if (i) out += ',';
    out += ojson(m.vocab[i]).dump();
    out += ':';
    out += std::to_string(i);
  }
  out += "},\"merges\":[";
  for (size_t i = 0; i < m.merges.size(); ++i) {
    if (i) out += ',';
    out += '[';
    out += ojson(m.merges[i].first).dump();
    out += ',';
    out += ojson(m.merges[i].second).dump();
    out += ']';
  }
  out += "]}}\n";
  return out;
}

std::string make_tokenizer_config_json(int64_t bpe_vocab, int64_t model_max_length,
                                       const std::string& model_type) {
  ojson decoder = ojson::object();
  ojson extra = ojson::array();
  const auto& toks = qwen35_added_tokens();
  for (size_t i = 0; i < toks.size(); ++i) {
    decoder[std::to_string(bpe_vocab + int64_t(i))] = {
        {"content", toks[i].content}, {"lstrip", false},
        {"normalized", false},        {"rstrip", false},
        {"single_word", false},       {"special", toks[i].special}};
    const std::string c = toks[i].content;
    if (toks[i].special && c != "<|endoftext|>" && i < 14) extra.push_back(c);
  }
  ojson t = {{"add_bos_token", false}, {"add_prefix_space", false}};
  t["added_tokens_decoder"] = std::move(decoder);
  t["additional_special_tokens"] = std::move(extra);
  t["bos_token"] = nullptr;
  t["chat_template"] = chat_template_for(model_type);
  t["clean_up_tokenization_spaces"] = false;
  t["eos_token"] = "<|im_end|>";
  t["errors"] = "replace";
  t["model_max_length"] = model_max_length;
  t["pad_token"] = "<|endoftext|>";
  t["split_special_tokens"] = false;
  t["tokenizer_class"] = "Qwen2Tokenizer";
  t["unk_token"] = nullptr;
  return t.dump(2) + "\n";
}

std::string qwen35_chat_template() {
  return std::string(reinterpret_cast<const char*>(kChatTemplate), sizeof(kChatTemplate));
}

std::string qwen3_chat_template() {
  return std::string(reinterpret_cast<const char*>(kQwen3ChatTemplate), sizeof(kQwen3ChatTemplate));
}

std::string chat_template_for(const std::string& model_type) {
  return model_type == "qwen3" || model_type == "qwen3_moe" ? qwen3_chat_template()
                                                            : qwen35_chat_template();
}

}  // namespace qwen35::tools
