#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>

namespace qwen35::server {
namespace {

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void gauge(std::string* out, const std::string& name, const std::string& help, double v,
           const char* type = "gauge") {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  *out += name + " " + num(v) + "\n";
}

// The resident set size from /proc/self/statm (Linux), or -1.
double resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? double(resident) * double(sysconf(_SC_PAGESIZE)) : -1;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard lk(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(const std::string& name, std::string* out) const {
  std::lock_guard lk(mu_);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  *out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(n_) + "\n";
}

Metrics::Metrics()
    : ttft({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      e2e({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

std::string Metrics::render(const runtime::EngineStats* e, int connections) const {
  std::string out;
  if (connections >= 0)
    gauge(&out, "qwen35_http_connections", "open HTTP connections", double(connections));
  if (const double rss = resident_bytes(); rss >= 0)
    gauge(&out, "process_resident_memory_bytes", "resident set size of the process", rss);
  out += "# HELP qwen35_requests_total HTTP requests by endpoint and status\n";
  out += "# TYPE qwen35_requests_total counter\n";
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, v] : requests_)
      out += "qwen35_requests_total{endpoint=\"" + k.first + "\",status=\"" +
             std::to_string(k.second) + "\"} " + std::to_string(v) + "\n";
  }
  gauge(&out, "qwen35_prompt_tokens_total", "prompt tokens of finished requests",
        double(prompt_tokens_.load()), "counter");
  gauge(&out, "qwen35_generation_tokens_total", "generated tokens of finished requests",
        double(generated_tokens_.load()), "counter");
  if (e) {
    gauge(&out, "qwen35_queue_depth", "requests waiting for a slot", double(e->queued));
    gauge(&out, "qwen35_running_sequences", "sequences in the running batch", double(e->running));
    gauge(&out, "qwen35_slots_total", "sequence slots (KV + recurrent state)", double(e->slots));
    gauge(&out, "qwen35_slots_used", "sequence slots in use", double(e->slots_busy));
    gauge(&out, "qwen35_kv_tokens_used", "KV positions held by running sequences",
          double(e->kv_tokens_used));
    gauge(&out, "qwen35_kv_tokens_total", "KV positions the pool holds", double(e->kv_tokens_total));
    gauge(&out, "qwen35_kv_blocks_used", "KV pool blocks (64 positions each) held",
          double(e->kv_blocks_used));
    gauge(&out, "qwen35_kv_blocks_total", "KV pool blocks", double(e->kv_blocks_total));
    gauge(&out, "qwen35_kv_blocks_free", "KV pool blocks neither held nor cached",
          double(e->kv_blocks_total - e->kv_blocks_used));
    gauge(&out, "qwen35_kv_block_bytes",
          "bytes of one KV block (K + V, every attention layer) in the pool's --kv-type",
          double(e->kv_block_bytes));
    gauge(&out, "qwen35_kv_bytes_used", "bytes of the KV pool blocks held",
          double(e->kv_blocks_used) * double(e->kv_block_bytes));
    gauge(&out, "qwen35_kv_bytes_total", "bytes of the KV pool when full",
          double(e->kv_blocks_total) * double(e->kv_block_bytes));
    gauge(&out, "qwen35_kv_usage_ratio", "kv_tokens_used / kv_tokens_total",
          e->kv_tokens_total ? double(e->kv_tokens_used) / double(e->kv_tokens_total) : 0.0);
    gauge(&out, "qwen35_state_bytes", "recurrent state of all slots + the KV pool when full",
          double(e->state_bytes));
    const auto& pc = e->cache;
    gauge(&out, "qwen35_prefix_cache_hits_total", "requests resumed from the prefix cache",
          double(pc.hits), "counter");
    gauge(&out, "qwen35_prefix_cache_misses_total", "requests the prefix cache had nothing for",
          double(pc.misses), "counter");
    gauge(&out, "qwen35_prefix_cache_hit_tokens_total", "prompt tokens resumed, not computed",
          double(pc.hit_tokens), "counter");
    gauge(&out, "qwen35_prefix_cache_evictions_total", "prefix cache entries evicted",
          double(pc.evictions), "counter");
    gauge(&out, "qwen35_prefix_cache_hit_ratio",
          "hits / (hits + misses): the share of requests resumed from the prefix cache",
          pc.hits + pc.misses ? double(pc.hits) / double(pc.hits + pc.misses) : 0.0);
    gauge(&out, "qwen35_prefix_cache_bytes", "prefix cache memory (snapshots + KV blocks)",
          double(pc.bytes));
    gauge(&out, "qwen35_prefix_cache_snapshots", "state snapshots held (provisional ones included)",
          double(pc.snapshots));
    gauge(&out, "qwen35_prefix_cache_provisional_snapshots",
          "snapshots a prefill copied at a grid line, kept while there is room",
          double(pc.provisional));
    gauge(&out, "qwen35_prefix_cache_device_snapshots",
          "of the snapshots, those held in device memory (serve --cache-device-mb)",
          double(pc.device_snapshots));
    gauge(&out, "qwen35_prefix_cache_promoted_total",
          "provisional snapshots a later prompt resumed from (branch points)", double(pc.promoted),
          "counter");
    gauge(&out, "qwen35_prefix_cache_blocks", "KV blocks the prefix cache holds",
          double(pc.blocks));
    gauge(&out, "qwen35_spec_drafted_tokens_total", "tokens drafted for speculative decoding",
          double(e->drafted_tokens), "counter");
    gauge(&out, "qwen35_spec_accepted_tokens_total",
          "drafted tokens verified as what plain decoding samples", double(e->accepted_tokens),
          "counter");
    gauge(&out, "qwen35_prompt_rows_received_total", "prompt tokens of the admitted requests",
          double(e->prompt_received), "counter");
    gauge(&out, "qwen35_prefill_rows_total",
          "prompt rows computed (the rest came from the prefix cache or a fork of the prompt)",
          double(e->prompt_tokens), "counter");
    gauge(&out, "qwen35_engine_steps_total", "forward steps", double(e->steps), "counter");
    gauge(&out, "qwen35_engine_cancelled_total", "requests cancelled", double(e->cancelled),
          "counter");
    gauge(&out, "qwen35_engine_preemptions_total",
          "times a running request gave its slot and KV blocks back when the pool ran dry "
          "(it resumes later with the same tokens)",
          double(e->preemptions), "counter");
  }
  out += "# HELP qwen35_time_to_first_token_seconds time from arrival to the first token\n";
  out += "# TYPE qwen35_time_to_first_token_seconds histogram\n";
  ttft.render("qwen35_time_to_first_token_seconds", &out);
  out += "# HELP qwen35_inter_token_latency_seconds time between tokens of a stream\n";
  out += "# TYPE qwen35_inter_token_latency_seconds histogram\n";
  itl.render("qwen35_inter_token_latency_seconds", &out);
  out += "# HELP qwen35_request_duration_seconds time from arrival to the last token\n";
  out += "# TYPE qwen35_request_duration_seconds histogram\n";
  e2e.render("qwen35_request_duration_seconds", &out);
  return out;
}

}  // namespace qwen35::server
