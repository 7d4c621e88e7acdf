// Server counters and latency histograms, rendered as Prometheus text. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace qwen35::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of metric `name`.
  void render(const std::string& name, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void add_tokens(int64_t prompt, int64_t generated);
  Histogram ttft, itl, e2e;
  // `connections`: open HTTP connections (-1: not known).
  std::string render(const runtime::EngineStats* engine, int connections = -1) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0};
};

}  // namespace qwen35::server
