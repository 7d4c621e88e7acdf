#include "server/prompt_tokens.h"

#include <algorithm>

#include "server/request_fields.h"

namespace qwen35::server {
using namespace fields;
namespace {

// Replaces the spellings of the tokenizer's special added tokens (the control tokens) in client
// text by filler of the same length.
class Neutralizer {
 public:
  explicit Neutralizer(const tokenizer::Tokenizer& tok) {
    for (const auto& t : tok.added_tokens())
      if (t.special && !t.content.empty()) specials_.push_back(t.content);
    // The filler: plain ASCII that JSON and Jinja's filters leave as it is (no escape, no white
    // space), and that no special token holds, so a run of it spells nothing.
    for (char f : {'#', '~', '_', 'x', 'Q'})
      if (std::none_of(specials_.begin(), specials_.end(),
                       [f](const std::string& s) { return s.find(f) != std::string::npos; })) {
        fill_ = f;
        break;
      }
  }
  const std::vector<std::string>& specials() const { return specials_; }

  // True when `s` changed.
  bool apply(std::string* s) const {
    bool changed = false;
    for (const auto& sp : specials_)
      for (size_t p = s->find(sp); fill_ && p != std::string::npos; p = s->find(sp, p + 1)) {
        s->replace(p, sp.size(), std::string(sp.size(), fill_));
        changed = true;
      }
    return changed;
  }

  // Whether `s` spells a special token (a scan; nothing is copied).
  bool spells(const std::string& s) const {
    return fill_ && std::any_of(specials_.begin(), specials_.end(), [&](const std::string& sp) {
             return s.find(sp) != std::string::npos;
           });
  }
  bool spells(const Json& j) const {
    if (j.is_string()) return spells(j.get_ref<const std::string&>());
    if (j.is_object())  // keys are client text too (tool parameter names, argument names)
      for (const auto& [k, v] : j.items())
        if (spells(k) || spells(v)) return true;
    if (j.is_array())
      for (const auto& v : j)
        if (spells(v)) return true;
    return false;
  }

  bool apply(Json* j) const {
    if (j->is_string()) return apply(&j->get_ref<std::string&>());
    if (j->is_array()) {
      bool changed = false;
      for (auto& v : *j) changed |= apply(&v);
      return changed;
    }
    if (!j->is_object() || !spells(*j)) return false;
    Json out = Json::object();  // rebuilt: a key may change
    for (auto& [k, v] : j->items()) {
      std::string key = k;
      Json value = v;
      apply(&key);
      apply(&value);
      out[key] = std::move(value);
    }
    *j = std::move(out);
    return true;
  }

  // Whether any client text of `c` spells a special token: the common case is no, and then
  // nothing is copied or rendered again.
  bool spells(const ChatRequest& c) const {
    if (spells(c.tools) || spells(c.template_kwargs)) return true;
    for (const auto& m : c.messages) {
      if (spells(m.content) || spells(m.tool_call_id) || (m.reasoning && spells(*m.reasoning)))
        return true;
      for (const auto& call : m.tool_calls)
        if (spells(call.id) || spells(call.name) || spells(call.arguments)) return true;
    }
    return false;
  }

  // `c` with its client text neutralized; false (and *out untouched) when nothing in it spells
  // a special token.
  bool copy(const ChatRequest& c, ChatRequest* out) const {
    if (!spells(c)) return false;
    *out = c;
    apply(&out->tools);
    apply(&out->template_kwargs);
    for (auto& m : out->messages) {
      apply(&m.content);
      apply(&m.tool_call_id);
      if (m.reasoning) apply(&*m.reasoning);
      for (auto& call : m.tool_calls) {
        apply(&call.id);
        apply(&call.name);
        apply(&call.arguments);
      }
    }
    return true;
  }

 private:
  std::vector<std::string> specials_;
  char fill_ = 0;  // 0: none found (no real vocabulary); nothing is neutralized
};

// The special spellings of `text` that are not in `plain` (the neutral rendering), as sorted,
// disjoint ranges.
std::vector<tokenizer::TextRange> client_spans(const std::string& text, const std::string& plain,
                                               const std::vector<std::string>& specials) {
  std::vector<tokenizer::TextRange> found, merged;
  for (const auto& sp : specials)
    for (size_t p = text.find(sp); p != std::string::npos; p = text.find(sp, p + 1))
      if (plain.compare(p, sp.size(), sp) != 0) found.push_back({p, p + sp.size()});
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (const auto& r : found)
    if (!merged.empty() && r.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, r.end);
    else
      merged.push_back(r);
  return merged;
}

}  // namespace

std::optional<ApiError> encode_chat_prompt(const ChatRequest& c, const ModelInfo& mi,
                                           const std::string& text, std::vector<int32_t>* ids,
                                           std::vector<tokenizer::TextRange>* literal_out) {
  std::vector<tokenizer::TextRange> literal;
  ChatRequest neutral;
  if (!mi.special_tokens_in_content) {
    const Neutralizer n(*mi.tok);
    if (n.copy(c, &neutral)) {
      std::string plain;
      QWEN35_TRY(render_chat(neutral, mi, &plain));
      if (plain.size() != text.size())
        return bad(c.names.messages,
                   "the request's text spells a control token of this model where the chat "
                   "template treats it unlike other text; remove it, or start the server with "
                   "--special-tokens-in-content");
      literal = client_spans(text, plain, n.specials());
    }
  }
  ids->clear();
  if (auto st = mi.tok->encode_into(text, ids, literal); !st.ok())
    return bad(c.names.messages, st.message());
  if (literal_out) *literal_out = std::move(literal);
  return std::nullopt;
}

}  // namespace qwen35::server
