#include "server/choice.h"

#include <atomic>
#include <cmath>
#include <random>

namespace qwen35::server {

ChoiceRunner::ChoiceRunner(int index, const CompletionRequest& req, const tokenizer::Tokenizer& tok,
                           std::shared_ptr<runtime::RequestStream> stream)
    : index_(index),
      stream_(std::move(stream)),
      dec_(tok, req.skip_special),
      stop_(req.stops),
      max_calls_(req.max_tool_calls) {
  if (req.chat) parser_.emplace(req.in_reasoning, req.parse_reasoning, req.parse_tools, req.tools,
                                  req.tool_format);
}

ChoiceRunner::~ChoiceRunner() { cancel(); }

void ChoiceRunner::cancel() {
  if (stream_) stream_->cancel();
}

void ChoiceRunner::feed(const std::string& text, Delta* d) {
  if (!parser_) {
    d->text += text;
    return;
  }
  for (auto& p : parser_->push(text)) {
    if (p.kind == OutputPiece::kContent)
      d->text += p.text;
    else if (p.kind == OutputPiece::kReasoning)
      d->reasoning += p.text;
    else
      take_call(std::move(p.call), d);
  }
}

void ChoiceRunner::take_call(ToolCall call, Delta* d) {
  if (max_calls_ >= 0 && n_calls_ >= max_calls_) return;  // parallel_tool_calls false
  d->calls.push_back(std::move(call));
  ++n_calls_;
}

void ChoiceRunner::finish(Delta* d, const std::string& reason) {
  if (parser_) {
    for (auto& p : parser_->flush()) {
      if (p.kind == OutputPiece::kContent)
        d->text += p.text;
      else if (p.kind == OutputPiece::kReasoning)
        d->reasoning += p.text;
      else
        take_call(std::move(p.call), d);
    }
  }
  d->finish_reason = reason == "stop" && n_calls_ > 0 ? "tool_calls" : reason;
  done_ = true;
}

bool ChoiceRunner::poll(std::chrono::milliseconds timeout, Delta* d) {
  if (done_) return false;
  runtime::StreamEvent ev;
  if (!stream_->next(&ev, timeout)) return false;
  if (ev.kind == runtime::StreamEvent::kPrompt) {
    for (auto& x : ev.prompt) prompt_samples.push_back(std::move(x));
    return true;
  }
  if (ev.kind == runtime::StreamEvent::kToken) {
    token_times.push_back(std::chrono::steady_clock::now());
    ++generated_;
    const int32_t id = ev.sample.token;
    d->samples.push_back(std::move(ev.sample));
    bool stopped = false;
    const std::string text = stop_.push(dec_.push(id), &stopped);
    feed(text, d);
    if (stopped) {
      stream_->cancel();  // the engine frees the slot at its next step
      finish(d, "stop");
    }
    return true;
  }
  // kDone: what the decoder and the stop matcher held back is final now.
  bool stopped = false;
  std::string tail = stop_.push(dec_.flush(), &stopped);
  if (!stopped) tail += stop_.flush();
  feed(tail, d);
  if (ev.finish_reason == "error") error_ = ev.error.empty() ? "engine error" : ev.error;
  finish(d, ev.finish_reason == "cancelled" ? "abort" : ev.finish_reason);
  return true;
}

namespace {
Json bytes_of(std::string_view s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}
}  // namespace

Json chat_logprob_entry(const tokenizer::Tokenizer& tok, const runtime::SampleResult& s) {
  const std::string_view t = tok.token_bytes(s.token);
  Json e = {{"token", std::string(t)}, {"logprob", s.logprob}, {"bytes", bytes_of(t)}};
  Json top = Json::array();
  for (const auto& a : s.top) {
    const std::string_view at = tok.token_bytes(a.token);
    top.push_back({{"token", std::string(at)}, {"logprob", a.logprob}, {"bytes", bytes_of(at)}});
  }
  e["top_logprobs"] = std::move(top);
  return e;
}

Json tool_call_json(const ToolCall& c, int index, bool with_index) {
  Json j;
  if (with_index) j["index"] = index;
  j["id"] = random_id("call_");
  j["type"] = "function";
  j["function"] = {{"name", c.name},
                   {"arguments", c.arguments.dump(-1, ' ', false, Json::error_handler_t::replace)}};
  return j;
}

Json completion_logprobs(const tokenizer::Tokenizer& tok,
                         const std::vector<runtime::SampleResult>& samples, size_t offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offs = Json::array();
  for (const auto& s : samples) {
    const std::string t(tok.token_bytes(s.token));
    tokens.push_back(t);
    if (std::isnan(s.logprob)) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      lps.push_back(s.logprob);
      Json top = Json::object();
      for (const auto& a : s.top) top[std::string(tok.token_bytes(a.token))] = a.logprob;
      tops.push_back(std::move(top));
    }
    offs.push_back(offset);
    offset += t.size();
  }
  return Json{
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ counter.fetch_add(1));
  static const char* kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlphabet[rng() % 36];
  return s;
}

}  // namespace qwen35::server
