#include "cli/soak.h"

#include "cli/multiturn.h"
#include "cli/sample_stats.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "server/http_client.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Kind { kStream, kPlain, kChat, kHangup, kSlowUpload, kSlowRead, kBad, kHealth };
constexpr Kind kKinds[] = {Kind::kStream,     Kind::kPlain,    Kind::kHealth, Kind::kHangup,
                           Kind::kSlowUpload, Kind::kChat,     Kind::kBad,    Kind::kSlowRead};

const char* name(Kind k) {
  switch (k) {
    case Kind::kStream: return "stream";
    case Kind::kPlain: return "plain";
    case Kind::kChat: return "chat";
    case Kind::kHangup: return "hangup";
    case Kind::kSlowUpload: return "slow_upload";
    case Kind::kSlowRead: return "slow_read";
    case Kind::kBad: return "bad_request";
    case Kind::kHealth: return "health";
  }
  return "?";
}

struct Outcome {
  bool ok = false, busy = false;  // busy: a 429 with Retry-After (a full queue, not an error)
  std::string error;
  double seconds = 0;
};

class Soak {
 public:
  explicit Soak(const SoakOptions& o) : o_(o) {}

  server::HttpClient client(double timeout_s = 120) const {
    server::HttpClient c(o_.host, o_.port, timeout_s);
    if (!o_.api_key.empty()) c.set_bearer_token(o_.api_key);
    return c;
  }

  Json completion(bool stream) const {
    Json b = {{"prompt", o_.prompt}, {"max_tokens", o_.max_tokens}, {"ignore_eos", true},
              {"temperature", 0},    {"return_token_ids", true}};
    if (stream) b["stream"] = true;
    if (!o_.kv_type.empty()) b["kv_type"] = o_.kv_type;
    return b;
  }

  // An SSE stream of a completion: counts the generated tokens, checks the [DONE] end.
  // `hang_up`: hang up after two tokens; `read_delay`: sleep this long per piece (a slow reader).
  Outcome stream(bool hang_up, std::chrono::milliseconds read_delay) const {
    Outcome out;
    auto c = client();
    std::string buf;
    int64_t tokens = 0;
    bool done = false;
    auto on_data = [&](std::string_view d) {
      if (read_delay.count() > 0) std::this_thread::sleep_for(read_delay);
      return feed_sse(buf, d, &done, &out.error, [&](const Json& j) {
        for (const auto& ch : j.value("choices", Json::array()))
          if (ch.contains("token_ids")) tokens += int64_t(ch["token_ids"].size());
        return !(hang_up && tokens >= 2);
      });
    };
    const auto res = c.send("POST", "/v1/completions", completion(true).dump(), on_data);
    if (!out.error.empty()) return out;
    if (hang_up && tokens >= 2) {
      out.ok = true;
      return out;
    }
    if (res.status == 429 && !res.header("Retry-After").empty()) {
      out.busy = true;
      return out;
    }
    if (!res.error.empty() || res.status != 200)
      out.error = "stream: HTTP " + std::to_string(res.status) + " " + res.error + res.body;
    else if (!done)
      out.error = "stream: no [DONE]";
    else if (tokens != o_.max_tokens)
      out.error = "stream: " + std::to_string(tokens) + " tokens, not " +
                  std::to_string(o_.max_tokens);
    else
      out.ok = true;
    return out;
  }

  // A non-streaming answer with the expected status; a 200 must carry choices and usage.
  Outcome plain(server::HttpClient c, const std::string& path, const std::string& body,
                int want, const char* what) const {
    Outcome out;
    const auto res = path == "/health" ? c.get(path) : c.post(path, body);
    if (res.status == 429 && !res.header("Retry-After").empty()) {
      out.busy = true;
      return out;
    }
    if (res.status != want) {
      out.error = std::string(what) + ": HTTP " + std::to_string(res.status) + " (wanted " +
                  std::to_string(want) + ") " + res.error + res.body.substr(0, 200);
      return out;
    }
    if (want == 200 && path != "/health") {
      const Json j = Json::parse(res.body, nullptr, false);
      const int64_t n = j.is_object() && j.contains("usage")
                            ? j["usage"].value("completion_tokens", int64_t(-1))
                            : -1;
      if (j.is_discarded() || !j.contains("choices") || n < 1 || n > o_.max_tokens) {
        out.error = std::string(what) + ": unexpected answer " + res.body.substr(0, 200);
        return out;
      }
    }
    out.ok = true;
    return out;
  }

  Outcome run(Kind k, int round) const {
    using std::chrono::milliseconds;
    switch (k) {
      case Kind::kStream: return stream(false, milliseconds(0));
      case Kind::kHangup: return stream(true, milliseconds(0));
      case Kind::kSlowRead: return stream(false, milliseconds(30));
      case Kind::kPlain:
        return plain(client(), "/v1/completions", completion(false).dump(), 200, "plain");
      case Kind::kChat: {
        Json b = {{"messages", {{{"role", "user"}, {"content", o_.prompt}}}},
                  {"max_tokens", o_.max_tokens},
                  {"temperature", 0}};
        if (!o_.kv_type.empty()) b["kv_type"] = o_.kv_type;
        return plain(client(), "/v1/chat/completions", b.dump(), 200, "chat");
      }
      case Kind::kSlowUpload: {
        auto c = client();
        c.set_pacing(24, milliseconds(20));
        return plain(std::move(c), "/v1/completions", completion(false).dump(), 200,
                     "slow upload");
      }
      case Kind::kBad: {
        static const char* const kBodies[] = {"{\"prompt\": [", "{\"prompt\":\"x\",\"max_tokens\":\"x\"}",
                                              "[1,2,3]"};
        std::string body = kBodies[round % 3];
        if (round % 4 == 3) body = "{\"prompt\":" + std::string(100, '[') + std::string(100, ']') + "}";
        return plain(client(), "/v1/completions", body, 400, "bad request");
      }
      case Kind::kHealth: return plain(client(10), "/health", "", 200, "health");
    }
    return {};
  }

  // One /metrics value, or NaN.
  double metric(const std::string& text, const std::string& key) const {
    for (size_t p = text.find(key + " "); p != std::string::npos; p = text.find(key + " ", p + 1))
      if (p == 0 || text[p - 1] == '\n') return std::atof(text.c_str() + p + key.size() + 1);
    return std::nan("");
  }
  std::string metrics() const {
    auto c = client(10);
    auto r = c.get("/metrics");
    return r.status == 200 ? r.body : "";
  }

  bool chat_available() const {
    const Json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}};
    return client().post("/v1/chat/completions", b.dump()).status == 200;
  }

 private:
  const SoakOptions& o_;
};

struct KindStats {
  int64_t n = 0, ok = 0, busy = 0, errors = 0;
  std::vector<double> seconds;
};

}  // namespace

int run_soak(const SoakOptions& o) {
  Soak soak(o);
  {
    auto h = soak.client(10).get("/health");
    if (h.status != 200) {
      std::fprintf(stderr, "qwen35 loadtest: the server at %s:%d is not healthy (%d %s)\n",
                   o.host.c_str(), o.port, h.status, h.error.c_str());
      return 1;
    }
  }
  const bool chat = soak.chat_available();
  std::vector<Kind> kinds;
  for (Kind k : kKinds)
    if (k != Kind::kChat || chat) kinds.push_back(k);

  std::mutex mu;
  std::map<Kind, KindStats> stats;
  std::string first_error;
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  const double warmup = std::min(10.0, 0.2 * o.seconds);

  // Memory: sampled every second; the baseline is the first sample after the warm-up.
  double rss_baseline = -1, rss_peak = -1;
  std::thread monitor([&] {
    while (!stop.load()) {
      const double rss = soak.metric(soak.metrics(), "process_resident_memory_bytes");
      if (!std::isnan(rss) && since(t0) >= warmup) {
        if (rss_baseline < 0) rss_baseline = rss;
        rss_peak = std::max(rss_peak, rss);
      }
      for (int i = 0; i < 10 && !stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      for (int round = 0; since(t0) < o.seconds; ++round) {
        const Kind k = kinds[size_t(c + round) % kinds.size()];
        const auto s0 = Clock::now();
        Outcome r = soak.run(k, round);
        r.seconds = since(s0);
        std::lock_guard lk(mu);
        KindStats& st = stats[k];
        ++st.n;
        if (r.ok) {
          ++st.ok;
          st.seconds.push_back(r.seconds);
        } else if (r.busy) {
          ++st.busy;
        } else {
          ++st.errors;
          if (first_error.empty()) first_error = r.error;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double traffic_s = since(t0);
  stop.store(true);
  monitor.join();

  // Back to idle: every gauge of held work at zero, no KV block held but the prefix cache's, no
  // connection left but the scrape's own.
  bool idle = false;
  std::string m;
  for (int i = 0; i < 150 && !idle; ++i) {
    m = soak.metrics();
    idle = soak.metric(m, "qwen35_slots_used") == 0 && soak.metric(m, "qwen35_queue_depth") == 0 &&
           soak.metric(m, "qwen35_running_sequences") == 0 &&
           soak.metric(m, "qwen35_kv_tokens_used") == 0 &&
           soak.metric(m, "qwen35_kv_blocks_used") == soak.metric(m, "qwen35_prefix_cache_blocks") &&
           soak.metric(m, "qwen35_http_connections") <= 1;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double rss_final = soak.metric(m, "process_resident_memory_bytes");
  const double mb = 1.0 / (1 << 20);
  const double drift = rss_baseline >= 0 && !std::isnan(rss_final) ? rss_final - rss_baseline : 0;

  int64_t total = 0, errors = 0;
  Json kj = Json::object();
  for (Kind k : kinds) {
    const KindStats& st = stats[k];
    total += st.n;
    errors += st.errors;
    kj[name(k)] = {{"requests", st.n},
                   {"ok", st.ok},
                   {"busy_429", st.busy},
                   {"errors", st.errors},
                   {"p50_ms", pct(st.seconds, 0.5) * 1e3},
                   {"p99_ms", pct(st.seconds, 0.99) * 1e3}};
    if (st.ok == 0 && st.errors == 0 && first_error.empty())
      first_error = std::string(name(k)) + ": no answer in the whole run";
  }
  const bool drift_ok = o.max_rss_drift_mb <= 0 || drift * mb <= o.max_rss_drift_mb;
  Json r = {{"seconds", traffic_s},
            {"clients", o.clients},
            {"requests", total},
            {"errors", errors},
            {"idle_after", idle},
            {"kinds", kj},
            {"rss_mb",
             {{"baseline", rss_baseline * mb},
              {"peak", rss_peak * mb},
              {"final", rss_final * mb},
              {"drift", drift * mb}}}};
  if (!first_error.empty()) r["first_error"] = first_error;
  if (o.json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("soak: %.0f s, %d clients, %lld requests, %lld errors, idle after: %s\n", traffic_s,
                o.clients, (long long)total, (long long)errors, idle ? "yes" : "NO");
    for (Kind k : kinds) {
      const KindStats& st = stats[k];
      std::printf("  %-12s %6lld ok %6lld busy %4lld errors  p50 %8.1f ms  p99 %8.1f ms\n", name(k),
                  (long long)st.ok, (long long)st.busy, (long long)st.errors,
                  pct(st.seconds, 0.5) * 1e3, pct(st.seconds, 0.99) * 1e3);
    }
    std::printf("RSS: %.1f MiB after warm-up, peak %.1f, after %.1f (drift %+.1f MiB)\n",
                rss_baseline * mb, rss_peak * mb, rss_final * mb, drift * mb);
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  const bool every_kind = std::all_of(kinds.begin(), kinds.end(),
                                      [&](Kind k) { return stats[k].ok > 0; });
  return errors == 0 && idle && drift_ok && every_kind ? 0 : 1;
}

}  // namespace qwen35::cli
