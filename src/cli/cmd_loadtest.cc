// qwen35 loadtest --port P [--clients N] [--requests M] [--max-tokens T] [--disconnect K]
// N concurrent streaming clients share M requests against a running `qwen35 serve` (or any
// OpenAI-compatible server: --url); reports requests/s, generated tokens/s (and where the count
// came from: cli/stream_tokens.h), time to first token and inter-token latency (p50/p99) and
// errors. Requests use /v1/completions with ignore_eos so each generates exactly T tokens;
// --disconnect K makes the first K requests hang up after their first tokens.
// --soak SECONDS instead runs mixed traffic for that long (cli/soak.h); --multi-turn runs
// conversations that resend their history (cli/multiturn.h); --few-shot runs prompts that
// branch from a shared prefix and requests with n > 1 (cli/fewshot.h).
#include "cli/flags.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/fewshot.h"
#include "cli/multiturn.h"
#include "cli/sample_stats.h"
#include "cli/soak.h"
#include "cli/stream_tokens.h"
#include "server/http_client.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Sample {
  bool ok = false, disconnected = false;
  std::string error;
  double ttft = 0, total = 0;
  StreamTally tally;
  std::vector<double> itl;
};

// One streamed completion. TTFT is the first chunk with generated text (or token ids); each
// later such chunk adds its gap from the one before, divided by the tokens it brought (its
// token_ids where the server sends them, else one).
Sample one_request(const std::string& host, int port, const std::string& key, const Json& body,
                   bool disconnect) {
  Sample s;
  server::HttpClient cli(host, port, 300);
  if (!key.empty()) cli.set_bearer_token(key);
  const auto t0 = Clock::now();
  auto last = t0;
  std::string buf;
  bool saw_done = false, first = true;
  auto on_data = [&](std::string_view data) {
    buf.append(data);
    size_t e;
    while ((e = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, e);
      buf.erase(0, e + 2);
      if (ev.rfind("data:", 0) != 0) continue;  // "data: x" and "data:x" are both SSE
      std::string payload = ev.substr(5);
      if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
      if (payload == "[DONE]") {
        saw_done = true;
        continue;
      }
      const Json j = Json::parse(payload, nullptr, false);
      if (j.is_discarded()) {
        s.error = "bad SSE payload: " + payload.substr(0, 200);
        return false;
      }
      if (j.contains("error")) {
        s.error = j["error"].is_object() ? j["error"].value("message", "error event") : "error event";
        return false;
      }
      const int64_t k = s.tally.add(j);
      if (k == 0) continue;
      const auto now = Clock::now();
      if (first)
        s.ttft = std::chrono::duration<double>(now - t0).count();
      else
        s.itl.push_back(std::chrono::duration<double>(now - last).count() / double(k));
      first = false;
      last = now;
      if (disconnect && s.tally.tokens() >= 2) {
        s.disconnected = true;
        return false;  // hang up mid-stream
      }
    }
    return true;
  };
  const server::ClientResponse res = cli.send("POST", "/v1/completions", body.dump(), on_data);
  const bool sent = bool(res);
  s.total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (s.disconnected) return s;
  if (!s.error.empty()) return s;
  if (!sent || !res.error.empty())
    s.error = "HTTP error: " + res.error;
  else if (res.status != 200)
    s.error = "HTTP " + std::to_string(res.status) + ": " + res.body.substr(0, 300);
  else if (!saw_done)
    s.error = "stream ended without [DONE]";
  else
    s.ok = true;
  return s;
}

}  // namespace

int cmd_loadtest(int argc, char** argv) {
  flags::App app{"Concurrent streaming clients against a running qwen35 serve or another OpenAI-compatible server", "qwen35 loadtest"};
  std::string host = "127.0.0.1", key, prompt = "The quick brown fox jumps over the lazy dog.";
  int port = 8080, clients = 8, requests = 64, disconnect = 0;
  int64_t max_tokens = 32;
  bool json = false;
  std::string kv_type;
  double soak_s = 0, max_drift_mb = 0;
  app.add_option("--host", host, "server address");
  app.add_option("--port", port, "server port");
  std::string url;
  app.add_option("--url", url,
                 "base URL instead of --host/--port: http://HOST:PORT (a server, or a load "
                 "balancer in front of replicas)");
  app.add_option("--api-key", key, "API key");
  app.add_option("-c,--clients", clients, "concurrent streaming clients");
  app.add_option("-n,--requests", requests, "requests in all (shared by the clients)");
  app.add_option("--max-tokens", max_tokens, "tokens generated per request (ignore_eos)");
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("--disconnect", disconnect, "the first K requests hang up after 2 tokens");
  app.add_flag("--json", json, "one JSON object instead of text");
  app.add_option("--kv-type", kv_type,
                 "send each request's \"kv_type\" (K[,V], as serve --kv-type): the server "
                 "answers 400 unless its KV cache is of that type");
  app.add_option("--soak", soak_s,
                 "run mixed traffic for SECONDS instead (streaming, non-streaming, chat, hang-ups, "
                 "slow uploads and readers, bad requests, health probes); -c clients, "
                 "--max-tokens per request");
  MultiTurnOptions mt;
  bool multi_turn = false;
  app.add_flag("--multi-turn", multi_turn,
               "run chat conversations instead: --conversations x --turns, sharing a system "
               "prompt (and tools); reports TTFT and the prefix-cache share per turn");
  app.add_option("--conversations", mt.conversations, "with --multi-turn: conversations in all");
  app.add_option("--turns", mt.turns, "with --multi-turn: turns per conversation");
  app.add_option("--system-tokens", mt.system_tokens,
                 "with --multi-turn: length of the shared system prompt");
  app.add_option("--tool-tokens", mt.tool_tokens,
                 "with --multi-turn: length of the shared tool definitions (0: none)");
  app.add_flag("--thinking", mt.thinking, "with --multi-turn: enable_thinking");
  FewShotOptions fs;
  bool few_shot = false;
  app.add_flag("--few-shot", few_shot,
               "run prompts that branch instead: --requests completions sharing a prefix of "
               "--prefix-tokens and ending in different questions, then --fork-requests with "
               "n = --fork-n; reports TTFT, the cached share and the prefill rows computed");
  app.add_option("--prefix-tokens", fs.prefix_tokens, "with --few-shot: the shared prefix's length");
  app.add_option("--fork-requests", fs.fork_requests, "with --few-shot: requests with n > 1");
  app.add_option("--fork-n", fs.fork_n, "with --few-shot: their n");
  bool no_key = false;
  app.add_flag("--no-affinity-key", no_key,
               "with --multi-turn: send no affinity key (by default each conversation sends its "
               "own as prompt_cache_key and X-Session-Id, for a balancer to route by)");
  app.add_option("--max-rss-drift-mb", max_drift_mb,
                 "with --soak: fail when the server's RSS grows more than this from the warm-up "
                 "to after the run");
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  if (clients < 1 || (requests < 1 && !few_shot))
    return fail("loadtest", "--clients and --requests must be >= 1");
  if (!url.empty()) {
    const std::string why = parse_base_url(url, &host, &port);
    if (!why.empty()) return fail("loadtest", "--url " + url + ": " + why);
  }
  if (soak_s < 0 || max_drift_mb < 0)
    return fail("loadtest", "--soak and --max-rss-drift-mb must be >= 0");
  if (few_shot) {
    if (fs.prefix_tokens < 1 || fs.fork_requests < 0 || fs.fork_n < 1 || requests < 0)
      return fail("loadtest", "--prefix-tokens and --fork-n must be >= 1, --fork-requests and "
                              "--requests >= 0");
    if (app.count("--requests")) fs.requests = requests;  // else the mode's own default (20)
    fs.server.host = host;
    fs.server.port = port;
    fs.server.api_key = key;
    fs.server.clients = clients;
    fs.server.max_tokens = max_tokens;
    fs.server.json = json;
    fs.server.kv_type = kv_type;
    return run_few_shot(fs);
  }
  if (multi_turn) {
    if (mt.conversations < 1 || mt.turns < 1 || mt.system_tokens < 0 || mt.tool_tokens < 0)
      return fail("loadtest", "--conversations and --turns must be >= 1, token lengths >= 0");
    mt.host = host;
    mt.port = port;
    mt.api_key = key;
    mt.clients = clients;
    mt.max_tokens = max_tokens;
    mt.json = json;
    mt.kv_type = kv_type;
    mt.affinity_key = !no_key;
    return run_multi_turn(mt);
  }
  if (soak_s > 0) {
    SoakOptions so;
    so.host = host;
    so.port = port;
    so.api_key = key;
    so.prompt = prompt;
    so.clients = clients;
    so.seconds = soak_s;
    so.max_tokens = max_tokens;
    so.max_rss_drift_mb = max_drift_mb;
    so.json = json;
    so.kv_type = kv_type;
    return run_soak(so);
  }
  Json body = {{"prompt", prompt},
               {"max_tokens", max_tokens},
               {"stream", true},
               {"ignore_eos", true},
               {"temperature", 0},
               {"return_token_ids", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!kv_type.empty()) body["kv_type"] = kv_type;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<Sample> samples;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      for (int i = next.fetch_add(1); i < requests; i = next.fetch_add(1)) {
        Sample s = one_request(host, port, key, body, i < disconnect);
        std::lock_guard lk(mu);
        samples.push_back(std::move(s));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t ok = 0, errors = 0, hung_up = 0, tokens = 0;
  std::vector<double> ttft, itl;
  std::string first_error;
  SourceCount sources;
  for (const auto& s : samples) {
    tokens += s.tally.tokens();
    if (s.tally.tokens() > 0) sources.add(s.tally.source());
    if (s.disconnected)
      ++hung_up;
    else if (s.ok)
      ++ok;
    else {
      ++errors;
      if (first_error.empty()) first_error = s.error;
    }
    if (s.tally.chunks > 0) ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
  }
  // Every request answered 200 with [DONE] and yet nothing was counted: not a fast server but
  // a stream this client cannot read (or one that generated nothing). Never a silent zero.
  std::string silent;
  if (ok > 0 && errors == 0 && tokens == 0)
    silent = "every request succeeded but no generated token was seen (choices[].token_ids, "
             "usage.completion_tokens and the chunks' text all absent or empty): is this an "
             "OpenAI-compatible /v1/completions stream?";
  Json r = {{"clients", clients},
            {"requests", requests},
            {"ok", ok},
            {"errors", errors},
            {"disconnected", hung_up},
            {"seconds", wall},
            {"requests_per_s", double(ok + hung_up) / wall},
            {"generated_tokens", tokens},
            {"token_source", sources.describe()},
            {"tokens_per_s", double(tokens) / wall},
            {"ttft_p50_ms", pct(ttft, 0.5) * 1e3},
            {"ttft_p99_ms", pct(ttft, 0.99) * 1e3},
            {"itl_p50_ms", pct(itl, 0.5) * 1e3},
            {"itl_p99_ms", pct(itl, 0.99) * 1e3}};
  if (!first_error.empty()) r["first_error"] = first_error;
  if (!silent.empty()) r["error"] = silent;
  if (json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("clients %d  requests %d  ok %lld  errors %lld  disconnected %lld  in %.2f s\n",
                clients, requests, (long long)ok, (long long)errors, (long long)hung_up, wall);
    std::printf("requests/s %.2f  generated tokens/s %.1f (%lld tokens, counted from %s)\n",
                double(ok + hung_up) / wall, double(tokens) / wall, (long long)tokens,
                sources.describe().c_str());
    std::printf("TTFT p50 %.1f ms  p99 %.1f ms   inter-token p50 %.2f ms  p99 %.2f ms%s\n",
                pct(ttft, 0.5) * 1e3, pct(ttft, 0.99) * 1e3, pct(itl, 0.5) * 1e3,
                pct(itl, 0.99) * 1e3, sources.any_estimated() ? " (per chunk)" : "");
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  if (!silent.empty()) std::fprintf(stderr, "qwen35 loadtest: %s\n", silent.c_str());
  return errors == 0 && silent.empty() ? 0 : 1;
}

}  // namespace qwen35::cli
