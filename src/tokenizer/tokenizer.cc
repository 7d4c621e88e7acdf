#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_data.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {

Tokenizer::Tokenizer(std::unique_ptr<TokenizerData> d) : d_(std::move(d)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

core::Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  QWEN35_RETURN_IF_ERROR(encode_into(text, &ids));
  return ids;
}

core::Status Tokenizer::encode_into(std::string_view text, std::vector<int32_t>* ids,
                                    std::span<const TextRange> literal) const {
  const size_t valid = utf8_valid_prefix(text);
  if (valid != text.size()) {
    return core::error("[tokenizer] input text is not valid UTF-8 at byte " +
                       std::to_string(valid));
  }
  // 1. Added tokens with normalized == false are found in the raw text.
  std::vector<Segment> segs;
  if (d_->raw_matcher.empty()) {
    segs.push_back({0, text.size(), -1});
  } else {
    d_->raw_matcher.split(text, 0, &segs, literal);
  }
  std::string norm;
  std::vector<Segment> sub;
  std::vector<TextRange> local;
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      ids->push_back(s.id);
      continue;
    }
    // 2. Normalize the plain text between them, then find the normalized added tokens.
    std::string_view plain = text.substr(s.begin, s.end - s.begin);
    if (d_->nfc) {
      norm.clear();
      QWEN35_RETURN_IF_ERROR(append_nfc(plain, &norm));
      plain = norm;
    }
    if (d_->normalized_matcher.empty()) {
      QWEN35_RETURN_IF_ERROR(encode_plain(plain, ids));
      continue;
    }
    // The literal ranges in this segment's terms. Normalization may move offsets: then the
    // whole segment is literal when any of it is (special tokens that are matched after
    // normalization are rare, and text that spells one stays text).
    local.clear();
    for (const TextRange& r : literal) {
      const size_t b = std::max(r.begin, s.begin), e = std::min(r.end, s.end);
      if (b >= e) continue;
      if (plain.size() != s.end - s.begin || plain != text.substr(s.begin, s.end - s.begin)) {
        local.assign(1, {0, plain.size()});
        break;
      }
      local.push_back({b - s.begin, e - s.begin});
    }
    sub.clear();
    d_->normalized_matcher.split(plain, 0, &sub, local);
    for (const Segment& t : sub) {
      if (t.id >= 0) {
        ids->push_back(t.id);
      } else {
        QWEN35_RETURN_IF_ERROR(encode_plain(plain.substr(t.begin, t.end - t.begin), ids));
      }
    }
  }
  return core::ok_status();
}

// 3. Pre-tokenize normalized text into pieces and run BPE on each.
core::Status Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return core::ok_status();
  using Pieces = std::vector<std::pair<size_t, size_t>>;
  Pieces pieces{{0, text.size()}}, next;
  for (const RegexSplitter& sp : d_->splitters) {
    next.clear();
    for (auto [b, e] : pieces) {
      const size_t first = next.size();
      QWEN35_RETURN_IF_ERROR(sp.split(text.substr(b, e - b), &next));
      for (size_t k = first; k < next.size(); ++k) {
        next[k].first += b;
        next[k].second += b;
      }
    }
    pieces.swap(next);
  }
  for (auto [b, e] : pieces) d_->bpe.encode_word(text.substr(b, e - b), ids);
  return core::ok_status();
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (!is_valid_id(id)) continue;
    const uint8_t f = d_->flags[id];
    if (!(f & TokenizerData::kPresent) || (skip_special && (f & TokenizerData::kSpecial))) continue;
    bytes += token_bytes(id);
  }
  if (utf8_valid_prefix(bytes) == bytes.size()) return bytes;
  std::string out;
  out.reserve(bytes.size() + 8);
  append_lossy(bytes, /*final=*/true, &out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!is_valid_id(id)) return {};
  return std::string_view(d_->bytes_buf)
      .substr(d_->bytes_off[id], d_->bytes_off[id + 1] - d_->bytes_off[id]);
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (!is_valid_id(id)) return {};
  return std::string_view(d_->text_buf)
      .substr(d_->text_off[id], d_->text_off[id + 1] - d_->text_off[id]);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = d_->token_ids.find(token);
  return it == d_->token_ids.end() ? -1 : it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return is_valid_id(id) && (d_->flags[id] & TokenizerData::kSpecial) != 0;
}
size_t Tokenizer::vocab_size() const { return d_->n_ids; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return d_->added; }
const TokenizerConfig& Tokenizer::config() const { return d_->config; }
int32_t Tokenizer::bos_id() const { return d_->bos_id; }
int32_t Tokenizer::eos_id() const { return d_->eos_id; }
int32_t Tokenizer::pad_id() const { return d_->pad_id; }

std::string StreamDecoder::push(int32_t id) {
  if (!tok_->is_valid_id(id) || (skip_special_ && tok_->is_special(id))) return {};
  std::string out;
  const std::string_view bytes = tok_->token_bytes(id);
  if (pending_.empty()) {
    const size_t used = append_lossy(bytes, /*final=*/false, &out);
    pending_.assign(bytes.substr(used));
  } else {
    pending_.append(bytes);
    const size_t used = append_lossy(pending_, /*final=*/false, &out);
    pending_.erase(0, used);
  }
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  append_lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace qwen35::tokenizer
