#include "cli/multiturn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli/sample_stats.h"
#include "cli/stream_tokens.h"
#include "server/http_client.h"

namespace qwen35::cli {

server::HttpClient loadtest_client(const MultiTurnOptions& o) {
  server::HttpClient c(o.host, o.port, 600);
  if (!o.api_key.empty()) c.set_bearer_token(o.api_key);
  return c;
}

// The server's token count of `text` (its /tokenize), or -1. The body names the text both ways
// servers read it ("prompt": ours and vLLM's; "content": llama-server's, which answers only
// {"tokens": [...]}); each ignores the other's field.
int64_t count_tokens(const MultiTurnOptions& o, const std::string& text) {
  auto r = loadtest_client(o).post("/tokenize", nlohmann::json{{"prompt", text}, {"content", text}}.dump());
  if (r.status != 200) return -1;
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object()) return -1;
  if (auto c = j.find("count"); c != j.end() && c->is_number_integer()) return c->get<int64_t>();
  if (auto t = j.find("tokens"); t != j.end() && t->is_array()) return int64_t(t->size());
  return -1;
}

// Text of about `tokens` tokens (by the server's tokenizer, at most one sentence over):
// numbered sentences, so that no two stretches of it are alike.
std::string text_of(const MultiTurnOptions& o, int64_t tokens, const std::string& what) {
  auto sentence = [&](int i) {
    return what + " rule " + std::to_string(i) + ": answer plainly, cite the source of claim " +
           std::to_string(i * 7 + 3) + ", and keep it short. ";
  };
  const int64_t per = std::max<int64_t>(1, count_tokens(o, sentence(0)));
  std::string text;
  int i = 0;
  for (int64_t have = 0; have >= 0 && have < tokens; have = count_tokens(o, text))
    for (int64_t k = std::max<int64_t>(1, (tokens - have) / per); k > 0; --k) text += sentence(i++);
  return text;
}

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct TurnSample {
  bool ok = false;
  std::string error;
  std::string replica;  // X-Qwen35-Replica of the answer ("" when the server names none)
  double ttft = 0;
  StreamTally tally;  // usage (prompt, cached, completion tokens) and the generated chunks
  std::string content;
};

TurnSample chat_turn(const MultiTurnOptions& o, const Json& body, const std::string& key) {
  TurnSample t;
  auto c = loadtest_client(o);
  if (!key.empty()) c.set_header("X-Session-Id", key);
  const auto t0 = Clock::now();
  std::string buf;
  bool first = true, done = false;
  auto on_data = [&](std::string_view d) {
    return feed_sse(buf, d, &done, &t.error, [&](const Json& j) {
      if (t.tally.add(j) > 0 && first) {
        t.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
        first = false;
      }
      for (const auto& ch : j.value("choices", Json::array())) {
        const Json delta = ch.value("delta", Json::object());
        if (delta.contains("content") && delta["content"].is_string())
          t.content += delta["content"].get<std::string>();
      }
      return true;
    });
  };
  const auto res = c.send("POST", "/v1/chat/completions", body.dump(), on_data);
  t.replica = res.header("X-Qwen35-Replica");
  if (!t.error.empty()) return t;
  if (res.status != 200 || !res.error.empty())
    t.error = "HTTP " + std::to_string(res.status) + " " + res.error + res.body.substr(0, 200);
  else if (!done)
    t.error = "no [DONE]";
  else
    t.ok = true;
  return t;
}

// Which replicas answered: requests per replica, and conversations whose turns all went to one.
struct ReplicaTally {
  std::map<std::string, int64_t> requests;
  int64_t kept = 0, named = 0;  // conversations on one replica, of those whose answers named one
  void add(const std::vector<std::string>& conversation) {
    std::set<std::string> seen;
    for (const auto& r : conversation)
      if (!r.empty()) ++requests[r], seen.insert(r);
    if (seen.empty()) return;
    ++named;
    if (seen.size() == 1) ++kept;
  }
};

}  // namespace

bool feed_sse(std::string& buf, std::string_view d, bool* done, std::string* error,
              const std::function<bool(const Json&)>& on_event) {
  buf.append(d);
  for (size_t e; (e = buf.find("\n\n")) != std::string::npos; buf.erase(0, e + 2)) {
    const std::string ev = buf.substr(0, e);
    if (ev.rfind("data: ", 0) != 0) continue;
    if (ev == "data: [DONE]") {
      *done = true;
      continue;
    }
    const Json j = Json::parse(ev.substr(6), nullptr, false);
    if (j.is_discarded() || j.contains("error")) {
      *error = "bad stream event: " + ev.substr(0, 200);
      return false;
    }
    if (!on_event(j)) return false;
  }
  return true;
}

std::string parse_base_url(const std::string& url, std::string* host, int* port) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return "only http:// URLs are supported";
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return "a base URL has no path";
  size_t colon = rest.rfind(':');
  std::string h;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      return "expected http://[ADDRESS]:PORT";
    h = rest.substr(1, close - 1);
    colon = close + 1;
  } else {
    if (colon == std::string::npos) return "no port (http://HOST:PORT)";
    h = rest.substr(0, colon);
  }
  const std::string p = rest.substr(colon + 1);
  if (h.empty() || p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    return "expected http://HOST:PORT";
  const int n = std::stoi(p);
  if (n < 1 || n > 65535) return "the port must be 1 to 65535";
  *host = h;
  *port = n;
  return "";
}

int run_multi_turn(const MultiTurnOptions& o) {
  if (count_tokens(o, "hello") < 0) {
    std::fprintf(stderr, "qwen35 loadtest: no /tokenize answer from %s:%d\n", o.host.c_str(), o.port);
    return 1;
  }
  const std::string system = text_of(o, o.system_tokens, "House");
  Json tools = Json::array();
  if (o.tool_tokens > 0) {
    const std::string desc = text_of(o, std::max<int64_t>(1, o.tool_tokens / 4), "Tool");
    for (int k = 0; k < 4; ++k) {
      Json params = {{"type", "object"},
                     {"properties", {{"query", {{"type", "string"}}}}},
                     {"required", Json::array({"query"})}};
      Json fn = {{"name", "tool_" + std::to_string(k)}, {"description", desc}, {"parameters", params}};
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
  }
  std::mutex mu;
  std::vector<std::vector<TurnSample>> by_turn(size_t(o.turns));
  ReplicaTally tally;
  // Keys unique to this run, so that a second run does not find the first one's routes.
  const std::string run = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count());
  std::atomic<int> next{0};
  std::string first_error;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&] {
      for (int conv = next.fetch_add(1); conv < o.conversations; conv = next.fetch_add(1)) {
        Json messages = Json::array({{{"role", "system"}, {"content", system}}});
        const std::string key = o.affinity_key ? "loadtest-" + run + "-" + std::to_string(conv) : "";
        std::vector<std::string> replicas;
        for (int turn = 0; turn < o.turns; ++turn) {
          messages.push_back({{"role", "user"},
                              {"content", "Conversation " + std::to_string(conv) + ", question " +
                                              std::to_string(turn) +
                                              ": what does the rule say about sources?"}});
          Json body = {{"messages", messages},
                       {"max_tokens", o.max_tokens},
                       {"temperature", 0},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"chat_template_kwargs", {{"enable_thinking", o.thinking}}}};
          if (!tools.empty()) body["tools"] = tools;
          if (!key.empty()) body["prompt_cache_key"] = key;
          if (!o.kv_type.empty()) body["kv_type"] = o.kv_type;
          TurnSample s = chat_turn(o, body, key);
          messages.push_back({{"role", "assistant"}, {"content", s.content}});
          replicas.push_back(s.replica);
          std::lock_guard lk(mu);
          if (!s.ok && first_error.empty()) first_error = s.error;
          by_turn[size_t(turn)].push_back(std::move(s));
        }
        std::lock_guard lk(mu);
        tally.add(replicas);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  // Cache figures only from answers whose usage has prompt_tokens_details.cached_tokens: a
  // server that reports none (llama-server) gets "not reported", never 0 %.
  int64_t errors = 0, later = 0, later_cached = 0, later_prompt = 0, later_cached_tokens = 0;
  int64_t reported = 0, generated = 0, answered = 0;
  SourceCount sources;
  auto number = [](const Json& v) { return v.is_number() ? v.get<double>() : 0.0; };
  auto share = [](int64_t part, int64_t whole, bool known) {
    return known && whole > 0 ? Json(double(part) / double(whole)) : Json(nullptr);
  };
  Json turns = Json::array();
  for (int turn = 0; turn < o.turns; ++turn) {
    std::vector<double> ttft;
    int64_t prompt = 0, cached = 0, ok = 0, with_cached = 0;
    for (const auto& s : by_turn[size_t(turn)]) {
      if (!s.ok) {
        ++errors;
        continue;
      }
      ++ok;
      generated += s.tally.tokens();
      if (s.tally.tokens() > 0) sources.add(s.tally.source());
      if (s.tally.chunks > 0) ++answered, ttft.push_back(s.ttft);
      if (s.tally.cached_tokens < 0) continue;
      ++with_cached;
      prompt += std::max<int64_t>(0, s.tally.prompt_tokens);
      cached += s.tally.cached_tokens;
      if (turn > 0) {
        ++later;
        later_cached += s.tally.cached_tokens > 0;
        later_prompt += std::max<int64_t>(0, s.tally.prompt_tokens);
        later_cached_tokens += s.tally.cached_tokens;
      }
    }
    reported += with_cached;
    turns.push_back({{"turn", turn + 1},
                     {"ok", ok},
                     {"prompt_tokens_mean", with_cached ? double(prompt) / double(with_cached) : 0.0},
                     {"cached_share", share(cached, prompt, with_cached > 0)},
                     {"ttft_p50_ms", pct(ttft, 0.5) * 1e3},
                     {"ttft_p99_ms", pct(ttft, 0.99) * 1e3}});
  }
  const bool known = reported > 0;
  Json r = {{"conversations", o.conversations}, {"turns", turns}, {"errors", errors},
            {"seconds", wall}, {"later_turns_cached_share", share(later_cached, later, known)},
            {"later_tokens_cached_share", share(later_cached_tokens, later_prompt, known)},
            {"cached_tokens_reported", known},
            {"generated_tokens", generated}, {"token_source", sources.describe()},
            {"replicas", tally.requests}, {"conversations_on_one_replica", tally.kept}};
  if (!first_error.empty()) r["first_error"] = first_error;
  // Every turn answered and not one generated token seen: a stream this client cannot read.
  std::string silent;
  if (errors == 0 && generated == 0 && answered == 0)
    silent = "every turn succeeded but no generated text or token was seen in any stream";
  if (!silent.empty()) r["error"] = silent;
  if (o.json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("multi-turn: %d conversations x %d turns, %d at once, %lld errors, %.1f s\n",
                o.conversations, o.turns, o.clients, (long long)errors, wall);
    for (const auto& t : turns) {
      char cached[32] = "  n/a";
      if (!t["cached_share"].is_null())
        std::snprintf(cached, sizeof cached, "%5.1f %%", 100 * t["cached_share"].get<double>());
      std::printf("  turn %2d  prompt %7.0f tokens  cached %s  TTFT p50 %8.1f ms  p99 %8.1f ms\n",
                  t["turn"].get<int>(), t["prompt_tokens_mean"].get<double>(), cached,
                  t["ttft_p50_ms"].get<double>(), t["ttft_p99_ms"].get<double>());
    }
    if (known)
      std::printf("turns 2+: %.1f %% resumed from the prefix cache, %.1f %% of their prompt tokens\n",
                  100 * number(r["later_turns_cached_share"]),
                  100 * number(r["later_tokens_cached_share"]));
    else
      std::printf("turns 2+: the server reports no usage.prompt_tokens_details.cached_tokens: "
                  "its prefix-cache reuse is not known\n");
    std::printf("generated %lld tokens (counted from %s)\n", (long long)generated,
                sources.describe().c_str());
    if (tally.named > 0) {
      std::printf("replicas:");
      for (const auto& [name, n] : tally.requests) std::printf(" %s %lld", name.c_str(), (long long)n);
      std::printf("; %lld of %lld conversations on one replica\n", (long long)tally.kept,
                  (long long)tally.named);
    }
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  if (!silent.empty()) std::fprintf(stderr, "qwen35 loadtest: %s\n", silent.c_str());
  return errors == 0 && silent.empty() ? 0 : 1;
}

}  // namespace qwen35::cli
