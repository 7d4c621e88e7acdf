#include "server/request.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "model/state.h"
#include "server/chat_request.h"
#include "server/request_fields.h"
#include "server/structured.h"
#include "tokenizer/utf8.h"

namespace qwen35::server {
using namespace fields;
namespace {

ApiError not_supported(const std::string& name, const std::string& why) {
  return bad(name, "'" + name + "' is not supported yet" + (why.empty() ? "" : ": " + why));
}

// OpenAI request fields this server does not implement. Silently ignoring one would hand the
// client an answer it did not ask for (text instead of JSON, no bias, no forced tool call), so
// each is refused with a 400 that names it, unless it is absent, null, or the value that means
// "nothing special". (response_format and tool_choice are read in server/structured.cc.)
// Decisions (issue 14):
//   logit_bias           {} only                  the sampler has no per-token bias
//   prompt_logprobs                               vLLM's; completions' echo + logprobs gives them
//   parallel_tool_calls  false keeps the first call of a choice (max_tool_calls)
//   functions, function_call (chat)               deprecated; use "tools"
//   audio, web_search_options (chat)              no audio out, no search
//   modalities           ["text"] only
//   verbosity (chat)     low, medium, high        accepted; a hint the model does not see
//   suffix (completions) "" only                  no fill-in-the-middle
//   best_of (completions) 1 or n                  no server-side ranking of candidates
// Accepted and ignored, as they do not change the output: user, metadata, store,
// service_tier, prompt_cache_key, safety_identifier. Unknown fields are ignored as vLLM does
// (clients send vendor extensions); the vLLM extensions we implement are parsed normally.
// "speculative": "lookup" | "mtp" | "off", or {"method": ..., "draft_tokens": K} (either key
// may be left out: the server's setting stands). "prediction" (OpenAI's predicted outputs):
// {"type": "content", "content": text or text parts}, tokens prompt lookup drafts from.
std::optional<ApiError> parse_speculative(const Json& b, const ModelInfo& mi,
                                          CompletionRequest* r) {
  if (const Json* pr = field(b, "prediction")) {
    const char* what =
        "'prediction' must be {\"type\": \"content\", \"content\": a string or text parts}";
    if (!pr->is_object() || !has_type(*pr, "content") || !field(*pr, "content"))
      return bad("prediction", what);
    Json content = *field(*pr, "content");
    std::string text;
    if (content.is_string()) {
      text = content.get<std::string>();
    } else if (content.is_array()) {
      for (const auto& part : content) {
        if (!part.is_object() || !has_type(part, "text") || !part.contains("text") ||
            !part["text"].is_string())
          return bad("prediction.content", what);
        text += part["text"].get<std::string>();
      }
    } else {
      return bad("prediction.content", what);
    }
    auto ids = mi.tok->encode(text);
    if (!ids.ok()) return bad("prediction", ids.message());
    r->prediction = std::move(*ids);
  }
  const Json* f = field(b, "speculative");
  if (!f) return std::nullopt;
  const char* what =
      "'speculative' must be \"lookup\", \"mtp\", \"off\" or {\"method\": ..., "
      "\"draft_tokens\": K}";
  const Json* method = f->is_string() ? f : nullptr;
  if (f->is_object()) {
    for (const auto& [k, v] : f->items())
      if (k != "method" && k != "draft_tokens") return bad("speculative." + k, what);
    method = field(*f, "method");
    if (const Json* k = field(*f, "draft_tokens")) {
      if (!k->is_number_integer() || k->get<int64_t>() < 1 ||
          k->get<int64_t>() >= model::kMaxVerifyRows)
        return bad("speculative.draft_tokens",
                   "'speculative.draft_tokens' must be an integer in [1, " +
                       std::to_string(model::kMaxVerifyRows - 1) + "]");
      r->spec_draft_tokens = int(k->get<int64_t>());
    }
  } else if (!method) {
    return bad("speculative", what);
  }
  if (method) {
    const auto m = method->is_string() ? runtime::parse_spec_method(method->get<std::string>())
                                       : std::nullopt;
    if (!m) return bad(f->is_string() ? "speculative" : "speculative.method", what);
    r->spec_method = *m;
  }
  return std::nullopt;
}

std::optional<ApiError> refuse_unsupported(const Json& b, bool chat, int n) {
  if (const Json* f = field(b, "logit_bias"); f && !(f->is_object() && f->empty()))
    return not_supported("logit_bias", "");
  if (const Json* f = field(b, "parallel_tool_calls"); f && !f->is_boolean())
    return bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
  if (field(b, "prompt_logprobs"))
    return not_supported("prompt_logprobs", chat ? "" : "'echo': true with 'logprobs' gives the "
                                                        "prompt's logprobs");
  if (const Json* f = field(b, "modalities");
      f && !(f->is_array() && f->size() == 1 && (*f)[0] == "text"))
    return not_supported("modalities", "only [\"text\"]");
  if (chat) {
    for (const char* name : {"functions", "function_call"})
      if (field(b, name)) return not_supported(name, "deprecated by OpenAI; use 'tools'");
    for (const char* name : {"audio", "web_search_options"})
      if (field(b, name)) return not_supported(name, "");
    // GPT-5's verbosity: a hint the model does not see, accepted as Responses' text.verbosity is.
    if (const Json* v = field(b, "verbosity"); v && *v != "low" && *v != "medium" && *v != "high")
      return bad("verbosity", "'verbosity' must be \"low\", \"medium\" or \"high\"");
  } else {
    if (const Json* f = field(b, "suffix"); f && !(f->is_string() && f->get<std::string>().empty()))
      return not_supported("suffix", "no fill-in-the-middle");
    if (const Json* f = field(b, "best_of");
        f && !(f->is_number_integer() && (f->get<int64_t>() == 1 || f->get<int64_t>() == n)))
      return not_supported("best_of", "only 1 or equal to 'n'");
  }
  return std::nullopt;
}

// Fields that chat and completions share: sampling, lengths, stop, n, stream, debugging extras.
}  // namespace

std::optional<ApiError> read_openai_common(const Json& b, const ModelInfo& mi,
                                           CompletionRequest* r) {
  QWEN35_TRY(start_request(b, mi, r));
  QWEN35_TRY(read_sampling(b, {"temperature", "top_p", "top_k", "min_p", "presence_penalty",
                               "frequency_penalty", "repetition_penalty"},
                           r));
  auto& s = r->sampling;
  if (field(b, "seed")) {
    // The sampler's seed is 64 unsigned bits: a negative seed would alias a large one (-1 is
    // 2^64 - 1), so it is refused rather than mapped.
    const Json& f = *field(b, "seed");
    if (!f.is_number_integer() || (!f.is_number_unsigned() && f.get<int64_t>() < 0))
      return bad("seed", "'seed' must be an integer in [0, 18446744073709551615] (leave it out "
                         "for a random one)");
    s.seed = f.is_number_unsigned() ? f.get<uint64_t>() : uint64_t(f.get<int64_t>());
  }
  QWEN35_TRY(read_max_tokens(
      b, field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", r));
  int64_t v = 0;
  if (field(b, "n")) {
    QWEN35_TRY(get_int(b, "n", &v, 1, 16));
    r->n = int(v);
  }
  QWEN35_TRY(get_bool(b, "stream", &r->stream));
  if (const Json* so = field(b, "stream_options")) {
    if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
    QWEN35_TRY(get_bool(*so, "include_usage", &r->include_usage));
  }
  QWEN35_TRY(read_stop(b, "stop", r));
  bool ignore_eos = false;
  QWEN35_TRY(get_bool(b, "ignore_eos", &ignore_eos));
  if (ignore_eos) r->eos_ids.clear();
  QWEN35_TRY(get_bool(b, "return_token_ids", &r->return_token_ids));
  QWEN35_TRY(get_bool(b, "skip_special_tokens", &r->skip_special));
  QWEN35_TRY(parse_speculative(b, mi, r));
  QWEN35_TRY(check_sampling(*r));
  QWEN35_TRY(refuse_unsupported(b, r->chat, r->n));
  if (const Json* p = field(b, "parallel_tool_calls"); p && r->chat && !p->get<bool>())
    r->max_tool_calls = 1;
  return std::nullopt;
}

std::optional<ApiError> parse_request_body(std::string_view body, const ModelInfo& mi, Json* out) {
  if (tokenizer::utf8_valid_prefix(body) != body.size())
    return bad("", "the request body is not valid UTF-8");
  JsonStatus st;
  *out = parse_json(body, mi.max_json_depth, &st);
  if (st == JsonStatus::kTooDeep)
    return bad("", "the request body nests JSON deeper than the limit of " +
                       std::to_string(mi.max_json_depth) + " levels");
  if (st != JsonStatus::kOk || !out->is_object())
    return bad("", "the request body is not a valid JSON object");
  return std::nullopt;
}

std::optional<ApiError> get_token_id(const Json& x, const tokenizer::Tokenizer& tok,
                                     const char* param, int32_t* out) {
  if (!x.is_number_integer())
    return bad(param, std::string("'") + param + "' must hold integer token ids");
  // Compare as 64 bits first: cut to 32 bits, -4294967291 would become the valid id 5.
  const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t(INT32_MAX)
                                           : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
  if (!fits || !tok.is_valid_id(int32_t(x.get<int64_t>())))
    return bad(param, "token id " + x.dump() + " is out of range [0, " +
                          std::to_string(tok.vocab_size()) + ")");
  *out = int32_t(x.get<int64_t>());
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize(const Json& b, const ModelInfo& mi,
                                         std::vector<int32_t>* ids) {
  QWEN35_TRY(check_model(b, mi));
  const Json* t = field(b, "tokens");
  if (!t || !t->is_array()) return bad("tokens", "'tokens' (a list of token ids) is required");
  for (const auto& x : *t) {
    int32_t id = 0;
    QWEN35_TRY(get_token_id(x, *mi.tok, "tokens", &id));
    ids->push_back(id);
  }
  return std::nullopt;
}

std::optional<ApiError> check_model(const Json& b, const ModelInfo& mi) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  const Json* m = field(b, "model");
  if (!m) return std::nullopt;
  if (!m->is_string()) return bad("model", "'model' must be a string");
  const std::string name = *m;
  if (name != mi.name && name != mi.path) {
    ApiError e = bad(
        "model", "the model '" + name + "' does not exist (this server serves '" + mi.name + "')");
    e.kind = ErrorKind::kModelNotFound;  // 400 as for any other bad field (issue 6)
    return e;
  }
  return std::nullopt;
}

// "kv_type" (an extension, as --kv-type: "q8_0" or "q8_0,turbo4"): the KV cache type the client
// expects. The engine has one pool, of one type, so this only confirms it: any other (or an
// unknown name) is a 400 naming the field and the server's type.
std::optional<ApiError> check_kv_type(const Json& b, const ModelInfo& mi) {
  const Json* f = field(b, "kv_type");
  if (!f) return std::nullopt;
  const std::string have = kernels::kv_types_name(mi.kv_types);
  if (!f->is_string())
    return bad("kv_type", "'kv_type' must be a string such as \"q8_0\" or \"q8_0,turbo4\"");
  const auto t = kernels::parse_kv_types(f->get<std::string>());
  if (!t.ok()) return bad("kv_type", "'kv_type': " + t.message());
  if (!(*t == mi.kv_types))
    return bad("kv_type", "'kv_type' " + kernels::kv_types_name(*t) +
                              " is not this server's KV cache type (" + have +
                              "; it is set per server, by serve --kv-type)");
  return std::nullopt;
}

std::optional<ApiError> start_request(const Json& b, const ModelInfo& mi, CompletionRequest* r) {
  QWEN35_TRY(check_model(b, mi));
  QWEN35_TRY(check_kv_type(b, mi));
  r->model = mi.name;
  r->sampling = mi.defaults;
  r->eos_ids = mi.eos_ids;
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const Json& b, std::initializer_list<const char*> keys,
                                      CompletionRequest* r) {
  auto& s = r->sampling;
  const std::pair<const char*, float*> floats[] = {
      {"temperature", &s.temperature},           {"top_p", &s.top_p},
      {"min_p", &s.min_p},                       {"presence_penalty", &s.presence_penalty},
      {"frequency_penalty", &s.frequency_penalty}, {"repetition_penalty", &s.repetition_penalty}};
  for (const char* key : keys) {
    const std::string_view k = key;
    if (k == "top_k") {
      int64_t v = 0;
      if (!field(b, "top_k")) continue;
      QWEN35_TRY(get_int(b, "top_k", &v, -1, INT32_MAX));
      s.top_k = int32_t(v);
      continue;
    }
    for (const auto& [name, dst] : floats)
      if (k == name) QWEN35_TRY(get_float(b, name, dst));
  }
  if (s.temperature < 0) return bad("temperature", "'temperature' must be >= 0");
  return std::nullopt;
}

std::optional<ApiError> read_max_tokens(const Json& b, const char* key, CompletionRequest* r) {
  if (!field(b, key)) return std::nullopt;
  return get_int(b, key, &r->max_tokens, 1, INT64_MAX);
}

std::optional<ApiError> read_stop(const Json& b, const char* key, CompletionRequest* r) {
  const Json* st = field(b, key);
  if (!st) return std::nullopt;
  const std::string stop = key;
  const std::string what = "'" + stop + "' must be a string or a list of strings";
  if (st->is_string()) {
    r->stops.push_back(st->get<std::string>());
  } else if (st->is_array()) {
    for (const auto& x : *st) {
      if (!x.is_string()) return bad(stop, what);
      r->stops.push_back(x.get<std::string>());
    }
  } else {
    return bad(stop, what);
  }
  for (const auto& x : r->stops)
    if (x.empty()) return bad(stop, "the strings of '" + stop + "' must not be empty");
  return std::nullopt;
}

std::optional<ApiError> check_sampling(const CompletionRequest& r) {
  if (auto st = r.sampling.validate(); !st.ok()) return bad("", st.message());
  return std::nullopt;
}

std::optional<ApiError> set_reasoning_budget(int64_t budget, bool open, const ModelInfo& mi,
                                             const std::string& param, CompletionRequest* r) {
  if (budget < 0) return std::nullopt;
  const int32_t end_id = mi.tok->token_to_id("</think>");
  if (end_id < 0) return bad(param, "this model's vocabulary has no </think> token");
  r->sampling.reasoning_budget = budget;
  r->sampling.think_end = end_id;
  r->sampling.think_start = mi.tok->token_to_id("<think>");
  r->sampling.reasoning_open = open;
  return std::nullopt;
}

namespace {
bool ends_with_tag(const std::string& text, std::string_view tag) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end >= tag.size() && text.compare(end - tag.size(), tag.size(), tag) == 0;
}
}  // namespace

bool opens_thinking(const std::string& text) { return ends_with_tag(text, "<think>"); }

bool closes_thinking(const std::string& text) { return ends_with_tag(text, "</think>"); }

std::optional<ApiError> parse_completion_request(const Json& b, const ModelInfo& mi,
                                                 CompletionRequest* r) {
  QWEN35_TRY(read_openai_common(b, mi, r));
  const Json* p = field(b, "prompt");
  if (!p) return bad("prompt", "'prompt' is required");
  // One prompt: a string or a list of token ids. A batch: a list of those (strings or id lists).
  auto one = [&](const Json& q, CompletionRequest::Prompt* out) -> std::optional<ApiError> {
    if (q.is_string()) {
      out->text = q.get<std::string>();
      auto ids = mi.tok->encode(out->text);
      if (!ids.ok()) return bad("prompt", ids.message());
      out->ids = std::move(*ids);
    } else if (q.is_array() && !q.empty() && q[0].is_number()) {
      for (const auto& x : q) {
        int32_t id = 0;
        QWEN35_TRY(get_token_id(x, *mi.tok, "prompt", &id));
        out->ids.push_back(id);
      }
      out->text = mi.tok->decode(out->ids);
    } else {
      return bad("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
    }
    if (out->ids.empty()) return bad("prompt", "the prompt is empty");
    return std::nullopt;
  };
  constexpr size_t kMaxBatch = 64;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() > kMaxBatch)
      return bad("prompt", "at most " + std::to_string(kMaxBatch) + " prompts per request");
    if (int64_t(p->size()) * r->n > 256) return bad("n", "prompts x n must be at most 256");
    for (const auto& q : *p) {
      if (q.is_array() && !q.empty() && !q[0].is_number())
        return bad("prompt", "a batched prompt must be a string or a list of token ids");
      r->batch.emplace_back();
      QWEN35_TRY(one(q, &r->batch.back()));
    }
  } else if (p->is_array() && p->empty()) {
    return bad("prompt", "the prompt is empty");
  } else {
    r->batch.emplace_back();
    QWEN35_TRY(one(*p, &r->batch.back()));
  }
  int64_t lp = -1;
  QWEN35_TRY(get_int(b, "logprobs", &lp, 0, 20));
  r->sampling.logprobs = int32_t(lp);
  // A budget applies to prompts that end inside an open <think> (per prompt: the sampler
  // parameters are shared, so a batch must agree).
  int64_t budget = -1;
  QWEN35_TRY(get_int(b, "thinking_token_budget", &budget, 0, INT64_MAX));
  if (budget >= 0) {
    const bool open = opens_thinking(r->batch[0].text);
    for (const auto& q : r->batch)
      if (opens_thinking(q.text) != open)
        return bad("thinking_token_budget",
                   "a batch of prompts with a reasoning budget must all end inside <think>, or none");
    QWEN35_TRY(set_reasoning_budget(budget, open, mi, "thinking_token_budget", r));
  }
  OutputFormat format;
  QWEN35_TRY(read_response_format(b, &format));
  if (format.kind != OutputFormat::Kind::kText) {
    // The grammar starts after the thinking block when the prompts open one (a batch agrees).
    r->in_reasoning = opens_thinking(r->batch[0].text);
    for (const auto& q : r->batch)
      if (opens_thinking(q.text) != r->in_reasoning)
        return bad("response_format",
                   "a batch of prompts with a response_format must all end inside <think>, or none");
    QWEN35_TRY(set_structured_output(format, ToolChoice{}, ChatNames{}, mi, r));
  }
  QWEN35_TRY(get_bool(b, "echo", &r->echo));
  if (r->echo && lp >= 0) r->prompt_logprobs = int32_t(lp);
  r->parse_reasoning = false;
  return std::nullopt;
}

}  // namespace qwen35::server
