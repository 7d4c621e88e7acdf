// The BPE model (vocab + merges), the added tokens and tokenizer_config.json.
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_data.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {

namespace {

using core::Status;
using json = nlohmann::json;

constexpr int64_t kMaxIds = int64_t(1) << 24;

Status err(const std::string& label, const std::string& field, const std::string& what) {
  return core::error("[tokenizer] '" + label + "': " + field + ": " + what);
}

std::string quote_token(std::string_view s) {
  std::string q = "'";
  q.append(s.substr(0, 60));
  if (s.size() > 60) q += "...";
  return q + "'";
}

bool is_null_or_empty_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

Status check_model_options(const json& m, const std::string& label) {
  auto type = m.find("type");
  if (type == m.end() || !type->is_string() || *type != "BPE") {
    return err(label, "model.type",
               "unsupported " + (type == m.end() ? std::string("(missing)") : type->dump()) +
                   " (supported: BPE)");
  }
  auto dropout = m.find("dropout");
  if (dropout != m.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return err(label, "model.dropout", "BPE dropout is not supported");
  }
  if (!is_null_or_empty_string(m, "continuing_subword_prefix")) {
    return err(label, "model.continuing_subword_prefix", "not supported");
  }
  if (!is_null_or_empty_string(m, "end_of_word_suffix")) {
    return err(label, "model.end_of_word_suffix", "not supported");
  }
  auto bf = m.find("byte_fallback");
  if (bf != m.end() && bf->is_boolean() && bf->get<bool>()) {
    return err(label, "model.byte_fallback", "not supported");
  }
  return core::ok_status();
}

// The two halves of merges[i]: "a b" or ["a", "b"].
bool merge_pair(const json& m, std::string_view* a, std::string_view* b) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) return false;
    *a = std::string_view(s).substr(0, sp);
    *b = std::string_view(s).substr(sp + 1);
    return true;
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get_ref<const std::string&>();
    *b = m[1].get_ref<const std::string&>();
    return true;
  }
  return false;
}

}  // namespace

Status load_model(const json& root, const std::string& label, TokenizerData* d) {
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object())
    return err(label, "model", "missing or not an object");
  const json& m = *mit;
  QWEN35_RETURN_IF_ERROR(check_model_options(m, label));
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) {
    return err(label, "model.vocab", "missing or not an object");
  }
  std::vector<const std::string*> by_id;
  d->token_ids.reserve(vit->size() + 64);
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxIds) {
      return err(label, "model.vocab[" + quote_token(it.key()) + "]",
                 "id is not an integer in [0, 2^24): " + it.value().dump());
    }
    const auto id = static_cast<size_t>(it.value().get<int64_t>());
    if (by_id.size() <= id) by_id.resize(id + 1, nullptr);
    if (by_id[id] != nullptr) {
      return err(label, "model.vocab",
                 "id " + std::to_string(id) + " is used by both " + quote_token(*by_id[id]) +
                     " and " + quote_token(it.key()));
    }
    by_id[id] = &it.key();
    d->token_ids.emplace(it.key(), int32_t(id));
  }
  // Tables per id; added tokens may extend them later.
  d->n_ids = by_id.size();
  d->flags.assign(d->n_ids, 0);
  d->text_off.assign(1, 0);
  d->bytes_off.assign(1, 0);
  static const ByteLevelAlphabet kAlphabet;
  StringMap<int32_t> vocab_bytes;
  const bool ignore_merges = m.value("ignore_merges", false);
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (by_id[id] != nullptr) {
      d->flags[id] = TokenizerData::kPresent;
      d->text_buf += *by_id[id];
      const size_t before = d->bytes_buf.size();
      if (!kAlphabet.decode(*by_id[id], &d->bytes_buf)) {
        d->bytes_buf.resize(before);
        d->bytes_buf += *by_id[id];
      } else if (ignore_merges) {
        vocab_bytes.emplace(d->bytes_buf.substr(before), int32_t(id));
      }
    }
    d->text_off.push_back(uint32_t(d->text_buf.size()));
    d->bytes_off.push_back(uint32_t(d->bytes_buf.size()));
  }
  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(kAlphabet.byte_to_cp[b], &s);
    auto it = d->token_ids.find(s);
    byte_ids[b] = it == d->token_ids.end() ? -1 : it->second;
  }
  int32_t unk_id = -1;
  auto unk = m.find("unk_token");
  if (unk != m.end() && unk->is_string()) {
    auto it = d->token_ids.find(unk->get<std::string>());
    if (it == d->token_ids.end()) {
      return err(label, "model.unk_token",
                 quote_token(unk->get<std::string>()) + " is not in the vocab");
    }
    unk_id = it->second;
  }
  d->bpe.init(byte_ids, unk_id, m.value("fuse_unk", false), ignore_merges, std::move(vocab_bytes));

  auto mg = m.find("merges");
  if (mg == m.end() || mg->is_null()) return core::ok_status();
  if (!mg->is_array()) return err(label, "model.merges", "not an array");
  d->bpe.reserve_merges(mg->size());
  std::string joined;
  for (size_t i = 0; i < mg->size(); ++i) {
    const std::string field = "merges[" + std::to_string(i) + "]";
    std::string_view a, b;
    if (!merge_pair((*mg)[i], &a, &b)) {
      return core::error("[tokenizer] '" + label + "': " + field + " is not a pair");
    }
    auto ia = d->token_ids.find(a), ib = d->token_ids.find(b);
    if (ia == d->token_ids.end()) return err(label, field, quote_token(a) + " is not in the vocab");
    if (ib == d->token_ids.end()) return err(label, field, quote_token(b) + " is not in the vocab");
    joined.assign(a);
    joined.append(b);
    auto ij = d->token_ids.find(joined);
    if (ij == d->token_ids.end()) {
      return err(label, field, "merged token " + quote_token(joined) + " is not in the vocab");
    }
    d->bpe.add_merge(ia->second, ib->second, {int32_t(i), ij->second});
  }
  return core::ok_status();
}

Status load_added_tokens(const json& root, const std::string& label, TokenizerData* d) {
  // HF gives an added token the vocab id of its content, else the next id after the model vocab.
  const auto model_vocab_len = static_cast<uint32_t>(d->token_ids.size());
  auto at = root.find("added_tokens");
  if (at == root.end() || at->is_null()) return core::ok_status();
  if (!at->is_array()) return err(label, "added_tokens", "not an array");
  int64_t max_added = -1;
  StringMap<int32_t> added_ids;
  for (size_t i = 0; i < at->size(); ++i) {
    const json& j = (*at)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!j.is_object() || !j.contains("content") || !j["content"].is_string()) {
      return err(label, field, "not an object with a string 'content'");
    }
    AddedToken t;
    t.content = j["content"].get<std::string>();
    if (t.content.empty() || added_ids.count(t.content) != 0) continue;  // as HF: ignored
    for (const char* key : {"special", "lstrip", "rstrip", "single_word", "normalized"}) {
      auto it = j.find(key);
      if (it != j.end() && !it->is_boolean()) return err(label, field + "." + key, "not a bool");
    }
    t.special = j.value("special", false);
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    t.single_word = j.value("single_word", false);
    t.normalized = j.value("normalized", !t.special);
    auto in_vocab = d->token_ids.find(t.content);
    if (in_vocab != d->token_ids.end()) {
      t.id = in_vocab->second;
    } else {
      t.id =
          max_added >= int64_t(model_vocab_len) ? int32_t(max_added + 1) : int32_t(model_vocab_len);
    }
    if (t.id >= kMaxIds) return err(label, field, "id past 2^24");
    max_added = std::max<int64_t>(max_added, t.id);
    added_ids.emplace(t.content, t.id);
    d->added.push_back(std::move(t));
  }
  static const ByteLevelAlphabet kAlphabet;
  for (const AddedToken& t : d->added) {
    d->token_ids[t.content] = t.id;
    // Rebuild the per-id tables to cover the added ids; an added id replaces the model token.
    if (size_t(t.id) >= d->n_ids) {
      d->flags.resize(t.id + 1, 0);
      d->text_off.resize(t.id + 2, d->text_off.back());
      d->bytes_off.resize(t.id + 2, d->bytes_off.back());
      d->n_ids = t.id + 1;
    }
  }
  // Added-token strings live after the model tokens; re-point their offsets with a second table.
  std::string text_buf, bytes_buf;
  std::vector<uint32_t> text_off{0}, bytes_off{0};
  std::vector<const AddedToken*> by_id(d->n_ids, nullptr);
  for (const AddedToken& t : d->added) by_id[t.id] = &t;
  for (size_t id = 0; id < d->n_ids; ++id) {
    if (by_id[id] != nullptr) {
      const std::string& c = by_id[id]->content;
      text_buf += c;
      if (!kAlphabet.decode(c, &bytes_buf)) bytes_buf += c;
      d->flags[id] = TokenizerData::kPresent | (by_id[id]->special ? TokenizerData::kSpecial : 0);
    } else {
      text_buf.append(d->text_buf, d->text_off[id], d->text_off[id + 1] - d->text_off[id]);
      bytes_buf.append(d->bytes_buf, d->bytes_off[id], d->bytes_off[id + 1] - d->bytes_off[id]);
    }
    text_off.push_back(uint32_t(text_buf.size()));
    bytes_off.push_back(uint32_t(bytes_buf.size()));
  }
  d->text_buf = std::move(text_buf);
  d->bytes_buf = std::move(bytes_buf);
  d->text_off = std::move(text_off);
  d->bytes_off = std::move(bytes_off);
  std::vector<const AddedToken*> raw, normalized;
  std::vector<AddedToken> nfc_copies;
  nfc_copies.reserve(d->added.size());
  for (const AddedToken& t : d->added) {
    if (!t.normalized) {
      raw.push_back(&t);
      continue;
    }
    nfc_copies.push_back(t);
    if (d->nfc) {
      nfc_copies.back().content.clear();
      if (utf8_valid_prefix(t.content) != t.content.size()) {
        return err(label, "added_tokens", quote_token(t.content) + " is not valid UTF-8");
      }
      QWEN35_RETURN_IF_ERROR(append_nfc(t.content, &nfc_copies.back().content));
    }
    normalized.push_back(&nfc_copies.back());
  }
  d->raw_matcher.init(raw);
  d->normalized_matcher.init(normalized);
  return core::ok_status();
}

Status load_config(std::string_view config_json, const std::string& label, TokenizerData* d) {
  json c;
  try {
    c = json::parse(config_json);
  } catch (const json::exception& e) {
    return core::error("[tokenizer] '" + label + "': invalid JSON: " + e.what());
  }
  if (!c.is_object()) return err(label, "(root)", "not a JSON object");
  TokenizerConfig& cfg = d->config;
  auto token_field = [&](const char* key, std::string* out) -> Status {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) return core::ok_status();
    if (it->is_string()) {
      *out = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      *out = (*it)["content"].get<std::string>();
    } else {
      return err(label, key, "expected a string or {\"content\": ...}");
    }
    return core::ok_status();
  };
  QWEN35_RETURN_IF_ERROR(token_field("bos_token", &cfg.bos_token));
  QWEN35_RETURN_IF_ERROR(token_field("eos_token", &cfg.eos_token));
  QWEN35_RETURN_IF_ERROR(token_field("pad_token", &cfg.pad_token));
  QWEN35_RETURN_IF_ERROR(token_field("unk_token", &cfg.unk_token));
  for (auto [key, out] : {std::pair{"add_bos_token", &cfg.add_bos_token},
                          {"add_eos_token", &cfg.add_eos_token},
                          {"clean_up_tokenization_spaces", &cfg.clean_up_tokenization_spaces}}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    if (!it->is_boolean()) return err(label, key, "expected true or false");
    *out = it->get<bool>();
  }
  auto ct = c.find("chat_template");
  if (ct != c.end() && ct->is_string()) cfg.chat_template = ct->get<std::string>();
  auto id_of = [&](const std::string& s) -> int32_t {
    if (s.empty()) return -1;
    auto it = d->token_ids.find(s);
    return it == d->token_ids.end() ? -1 : it->second;
  };
  d->bos_id = id_of(cfg.bos_token);
  d->eos_id = id_of(cfg.eos_token);
  d->pad_id = id_of(cfg.pad_token);
  return core::ok_status();
}

}  // namespace qwen35::tokenizer
