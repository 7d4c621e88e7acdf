// `qwen35 loadtest --soak SECONDS`: a running server under mixed traffic for a while. Each
// client thread cycles through the kinds of client a public server meets: streaming and
// non-streaming generation, chat, clients that hang up mid-stream, clients that upload slowly or
// read slowly, malformed requests and health probes. It reports, per kind, the answers and their
// latency (p50/p99), every unexpected answer as an error, and the server's resident memory
// (process_resident_memory_bytes on /metrics) from the end of the warm-up to after the traffic,
// when the server must be idle again (no slots, queue or KV held, no connection left open).
#pragma once

#include <string>

namespace qwen35::cli {

struct SoakOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string prompt;
  int clients = 8;
  double seconds = 60;
  int64_t max_tokens = 16;
  double max_rss_drift_mb = 0;  // > 0: a larger drift fails the run
  bool json = false;
  std::string kv_type;  // non-empty: each request's "kv_type" (the server's must match)
};

// Returns the exit code: 0 when every answer was the expected one, the server went back to idle
// and the memory drift is within the bound.
int run_soak(const SoakOptions& o);

}  // namespace qwen35::cli
