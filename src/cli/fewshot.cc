#include "cli/fewshot.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/sample_stats.h"
#include "cli/stream_tokens.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct FewshotSample {
  bool ok = false;
  std::string error;
  double ttft = 0;
  double all_started = 0;  // every choice has its first token
  StreamTally tally;       // usage and the generated chunks (cli/stream_tokens.h)
};

// One streamed completion: the time to its first token (of any choice) and its usage.
FewshotSample completion(const MultiTurnOptions& o, const Json& body) {
  FewshotSample s;
  std::vector<bool> started(size_t(body.value("n", 1)), false);
  size_t n_started = 0;
  auto c = loadtest_client(o);
  const auto t0 = Clock::now();
  std::string buf;
  bool done = false;
  auto on_data = [&](std::string_view d) {
    return feed_sse(buf, d, &done, &s.error, [&](const Json& j) {
      s.tally.add(j);
      for (const auto& ch : j.value("choices", Json::array())) {
        const bool ids = ch.contains("token_ids") && !ch["token_ids"].empty();
        const bool text = ch.contains("text") && ch["text"].is_string() && !ch["text"].empty();
        if (!ids && !text) continue;
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        if (s.ttft == 0) s.ttft = t;
        const size_t i = ch.value("index", size_t(0));
        if (i < started.size() && !started[i]) {
          started[i] = true;
          if (++n_started == started.size()) s.all_started = t;
        }
      }
      return true;
    });
  };
  const auto res = c.send("POST", "/v1/completions", body.dump(), on_data);
  if (!s.error.empty()) return s;
  if (res.status != 200 || !res.error.empty())
    s.error = "HTTP " + std::to_string(res.status) + " " + res.error + res.body.substr(0, 200);
  else if (!done)
    s.error = "no [DONE]";
  else
    s.ok = true;
  return s;
}

// A counter of the server's /metrics; -1 when it has none (or no answer).
double metric(const MultiTurnOptions& o, const std::string& name) {
  const auto r = loadtest_client(o).get("/metrics");
  if (r.status != 200) return -1;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

struct Rows {
  double received = -1, computed = -1;
};
Rows rows(const MultiTurnOptions& o) {
  return {metric(o, "qwen35_prompt_rows_received_total"), metric(o, "qwen35_prefill_rows_total")};
}

// Runs `bodies` on `clients` threads; the part's report.
Json run_part(const MultiTurnOptions& o, const std::vector<Json>& bodies, int clients,
              std::string* first_error) {
  const Rows before = rows(o);
  std::vector<FewshotSample> samples(bodies.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < bodies.size(); i = next.fetch_add(1))
        samples[i] = completion(o, bodies[i]);
    });
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const Rows after = rows(o);
  std::vector<double> ttft, all;
  int64_t errors = 0, prompt = 0, cached = 0, reported = 0, generated = 0, answered = 0;
  SourceCount sources;
  for (const auto& s : samples) {
    if (!s.ok) {
      if (errors++ == 0 && first_error->empty()) *first_error = s.error;
      continue;
    }
    generated += s.tally.tokens();
    if (s.tally.tokens() > 0) sources.add(s.tally.source());
    if (s.tally.chunks == 0) continue;
    ++answered;
    ttft.push_back(s.ttft);
    all.push_back(s.all_started);
    if (s.tally.cached_tokens < 0) continue;  // the server reports no cache figure
    ++reported;
    prompt += std::max<int64_t>(0, s.tally.prompt_tokens);
    cached += s.tally.cached_tokens;
  }
  double mean = 0;
  for (double t : ttft) mean += t / double(ttft.size());
  const bool counted = before.computed >= 0 && after.computed >= 0;
  return {{"requests", bodies.size()},
          {"errors", errors},
          {"seconds", wall},
          {"ttft_p50_ms", pct(ttft, 0.5) * 1e3},
          {"ttft_p99_ms", pct(ttft, 0.99) * 1e3},
          {"ttft_mean_ms", mean * 1e3},
          {"all_choices_started_p50_ms", pct(all, 0.5) * 1e3},
          {"cached_share", reported && prompt ? Json(double(cached) / double(prompt)) : Json(nullptr)},
          {"generated_tokens", generated},
          {"answered", answered},
          {"token_source", sources.describe()},
          {"prompt_rows_received", counted ? after.received - before.received : -1.0},
          {"prefill_rows_computed", counted ? after.computed - before.computed : -1.0}};
}

Json body(const std::string& prompt, const FewShotOptions& o, int n) {
  Json b = {{"prompt", prompt},
            {"max_tokens", o.server.max_tokens},
            {"n", n},
            {"stream", true},
            {"ignore_eos", true},
            {"temperature", n > 1 ? 0.8 : 0.0},
            {"seed", 1},
            {"return_token_ids", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!o.server.kv_type.empty()) b["kv_type"] = o.server.kv_type;
  return b;
}

// A question of some 80 tokens: longer than a 64-token block, so a prompt's own last grid
// boundary (where the cache snapshots it) lies past the point where the prompts part, as with
// real few-shot questions; what later prompts resume from is the branch point.
std::string question(int k) {
  std::string q = "Question " + std::to_string(k) + ": which rule speaks of claim " +
                  std::to_string(k * 13 + 5) + ", what does it ask of an answer";
  for (int i = 0; i < 3; ++i)
    q += ", and how would you apply it to report " + std::to_string(k * 3 + i) +
         " about the harvest of year " + std::to_string(1900 + k + i);
  return q + "?\nAnswer:";
}

// Figures the server does not report (cached tokens, our /metrics) print as n/a, never as 0.
void print_part(const char* name, const Json& p) {
  char cached[32] = "  n/a", rows[64] = "prompt rows n/a (no qwen35 /metrics)";
  if (!p["cached_share"].is_null())
    std::snprintf(cached, sizeof cached, "%5.1f %%", 100 * p["cached_share"].get<double>());
  if (p["prompt_rows_received"].get<double>() >= 0)
    std::snprintf(rows, sizeof rows, "prompt rows %7.0f  computed %7.0f",
                  p["prompt_rows_received"].get<double>(), p["prefill_rows_computed"].get<double>());
  std::printf("  %-8s %3d requests  TTFT p50 %8.1f ms  p99 %8.1f ms  mean %8.1f ms  every choice "
              "started p50 %8.1f ms  cached %s  %s  generated %lld tokens (%s)\n",
              name, p["requests"].get<int>(), p["ttft_p50_ms"].get<double>(),
              p["ttft_p99_ms"].get<double>(), p["ttft_mean_ms"].get<double>(),
              p["all_choices_started_p50_ms"].get<double>(), cached, rows,
              (long long)p["generated_tokens"].get<int64_t>(),
              p["token_source"].get<std::string>().c_str());
}

}  // namespace

int run_few_shot(const FewShotOptions& o) {
  const MultiTurnOptions& s = o.server;
  if (count_tokens(s, "hello") < 0) {
    std::fprintf(stderr, "qwen35 loadtest: no /tokenize answer from %s:%d\n", s.host.c_str(), s.port);
    return 1;
  }
  const std::string prefix = text_of(s, o.prefix_tokens, "Example");
  std::vector<Json> branches, forks;
  for (int k = 0; k < o.requests; ++k) branches.push_back(body(prefix + question(k), o, 1));
  for (int k = 0; k < o.fork_requests; ++k)  // a prompt of its own: nothing of it is cached
    forks.push_back(body("Request " + std::to_string(k) + ". " + prefix + question(k), o, o.fork_n));
  std::string first_error;
  const Json r = {{"prefix_tokens", o.prefix_tokens},
                  {"fork_n", o.fork_n},
                  {"branches", run_part(s, branches, s.clients, &first_error)},
                  {"forks", run_part(s, forks, 1, &first_error)}};
  const int64_t errors = r["branches"]["errors"].get<int64_t>() + r["forks"]["errors"].get<int64_t>();
  // Every request answered and not one generated token seen: a stream this client cannot read.
  const int64_t sent = r["branches"]["requests"].get<int64_t>() + r["forks"]["requests"].get<int64_t>();
  const int64_t answered = r["branches"]["answered"].get<int64_t>() + r["forks"]["answered"].get<int64_t>();
  const std::string silent =
      errors == 0 && sent > 0 && answered == 0
          ? "every request succeeded but no generated text or token was seen in any stream"
          : "";
  if (s.json) {
    Json out = r;
    if (!first_error.empty()) out["first_error"] = first_error;
    if (!silent.empty()) out["error"] = silent;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("few-shot: a %lld-token prefix, %d branches (%d at once), %d requests with n = %d\n",
                (long long)o.prefix_tokens, o.requests, s.clients, o.fork_requests, o.fork_n);
    print_part("branches", r["branches"]);
    print_part("forks", r["forks"]);
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  if (!silent.empty()) std::fprintf(stderr, "qwen35 loadtest: %s\n", silent.c_str());
  return errors == 0 && silent.empty() ? 0 : 1;
}

}  // namespace qwen35::cli
