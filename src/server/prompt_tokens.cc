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

  bool apply(Json* j) const {
    if (j->is_string()) {
      std::string s = j->get<std::string>();
      if (!apply(&s)) return false;
      *j = std::move(s);
      return true;
    }
    bool changed = false;
    if (j->is_object()) {
      // Keys are client text too (tool parameter names, argument names).
      Json out = Json::object();
      for (auto& [k, v] : j->items()) {
        std::string key = k;
        Json value = v;
        changed |= apply(&key);
        changed |= apply(&value);
        out[key] = std::move(value);
      }
      if (changed) *j = std::move(out);
    } else if (j->is_array()) {
      for (auto& v : *j) changed |= apply(&v);
    }
    return changed;
  }

  // `c` with its client text neutralized; false when nothing in it spells a special token.
  bool copy(const ChatRequest& c, ChatRequest* out) const {
    *out = c;
    // Every string is neutralized: no short-circuit once one has changed.
    bool changed = apply(&out->tools);
    changed |= apply(&out->template_kwargs);
    for (auto& m : out->messages) {
      changed |= apply(&m.content);
      changed |= apply(&m.tool_call_id);
      if (m.reasoning) changed |= apply(&*m.reasoning);
      for (auto& call : m.tool_calls) {
        changed |= apply(&call.id);
        changed |= apply(&call.name);
        changed |= apply(&call.arguments);
      }
    }
    return changed;
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
                                           const std::string& text, std::vector<int32_t>* ids) {
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
  return std::nullopt;
}

}  // namespace qwen35::server
