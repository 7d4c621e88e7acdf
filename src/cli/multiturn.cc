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

#include "server/http_client.h"

namespace qwen35::cli {

server::HttpClient loadtest_client(const MultiTurnOptions& o) {
  server::HttpClient c(o.host, o.port, 600);
  if (!o.api_key.empty()) c.set_bearer_token(o.api_key);
  return c;
}

// The server's token count of `text` (its /tokenize), or -1.
int64_t count_tokens(const MultiTurnOptions& o, const std::string& text) {
  auto r = loadtest_client(o).post("/tokenize", nlohmann::json{{"prompt", text}}.dump());
  if (r.status != 200) return -1;
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  return j.is_object() ? j.value("count", int64_t(-1)) : -1;
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

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

struct TurnSample {
  bool ok = false;
  std::string error;
  std::string replica;  // X-Qwen35-Replica of the answer ("" when the server names none)
  double ttft = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0;
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
      read_usage(j, &t.prompt_tokens, &t.cached_tokens);
      for (const auto& ch : j.value("choices", Json::array())) {
        const Json delta = ch.value("delta", Json::object());
        const std::string content = delta.value("content", std::string());
        if (first && (!content.empty() || delta.contains("reasoning_content"))) {
          t.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
          first = false;
        }
        t.content += content;
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

void read_usage(const Json& j, int64_t* prompt_tokens, int64_t* cached_tokens) {
  if (!j.contains("usage") || !j["usage"].is_object()) return;
  *prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
  if (j["usage"].contains("prompt_tokens_details"))
    *cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t(0));
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
  int64_t errors = 0, later = 0, later_cached = 0, later_prompt = 0, later_cached_tokens = 0;
  Json turns = Json::array();
  for (int turn = 0; turn < o.turns; ++turn) {
    std::vector<double> ttft;
    int64_t prompt = 0, cached = 0, ok = 0;
    for (const auto& s : by_turn[size_t(turn)]) {
      if (!s.ok) {
        ++errors;
        continue;
      }
      ++ok;
      if (turn > 0) {
        ++later;
        later_cached += s.cached_tokens > 0;
        later_prompt += s.prompt_tokens;
        later_cached_tokens += s.cached_tokens;
      }
      ttft.push_back(s.ttft);
      prompt += s.prompt_tokens;
      cached += s.cached_tokens;
    }
    turns.push_back({{"turn", turn + 1},
                     {"ok", ok},
                     {"prompt_tokens_mean", ok ? double(prompt) / double(ok) : 0.0},
                     {"cached_share", prompt ? double(cached) / double(prompt) : 0.0},
                     {"ttft_p50_ms", pct(ttft, 0.5) * 1e3},
                     {"ttft_p99_ms", pct(ttft, 0.99) * 1e3}});
  }
  const double hit_share = later ? double(later_cached) / double(later) : 0.0;
  Json r = {{"conversations", o.conversations}, {"turns", turns}, {"errors", errors},
            {"seconds", wall}, {"later_turns_cached_share", hit_share},
            {"later_tokens_cached_share",
             later_prompt ? double(later_cached_tokens) / double(later_prompt) : 0.0},
            {"replicas", tally.requests}, {"conversations_on_one_replica", tally.kept}};
  if (!first_error.empty()) r["first_error"] = first_error;
  if (o.json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("multi-turn: %d conversations x %d turns, %d at once, %lld errors, %.1f s\n",
                o.conversations, o.turns, o.clients, (long long)errors, wall);
    for (const auto& t : turns)
      std::printf("  turn %2d  prompt %7.0f tokens  cached %5.1f %%  TTFT p50 %8.1f ms  p99 %8.1f ms\n",
                  t["turn"].get<int>(), t["prompt_tokens_mean"].get<double>(),
                  100 * t["cached_share"].get<double>(), t["ttft_p50_ms"].get<double>(),
                  t["ttft_p99_ms"].get<double>());
    std::printf("turns 2+: %.1f %% resumed from the prefix cache, %.1f %% of their prompt tokens\n",
                100 * hit_share, 100 * r["later_tokens_cached_share"].get<double>());
    if (tally.named > 0) {
      std::printf("replicas:");
      for (const auto& [name, n] : tally.requests) std::printf(" %s %lld", name.c_str(), (long long)n);
      std::printf("; %lld of %lld conversations on one replica\n", (long long)tally.kept,
                  (long long)tally.named);
    }
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace qwen35::cli
