#include "vulkan/probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "vulkan/recorder.h"

namespace qwen35::vulkan {

namespace {

constexpr uint32_t kMaxGroups = 8192;         // per buffer: enough lanes to fill a large GPU
constexpr uint64_t kFillChunk = 16ull << 20;  // host bytes written per upload
constexpr uint64_t kVector = 16;              // the shader reads uvec4s

struct ProbePush {
  uint32_t base, n, groups, out0;
};

// A timestamp query pool of two queries, destroyed with the object.
class QueryPool {
 public:
  explicit QueryPool(Device& dev) : dev_(dev) {}
  ~QueryPool() {
    if (pool_ != VK_NULL_HANDLE) dev_.api().vkDestroyQueryPool(dev_.handle(), pool_, nullptr);
  }
  QueryPool(const QueryPool&) = delete;
  QueryPool& operator=(const QueryPool&) = delete;
  core::Status create() {
    VkQueryPoolCreateInfo qi{};
    qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = 2;
    return dev_.note(dev_.api().vkCreateQueryPool(dev_.handle(), &qi, nullptr, &pool_),
                     "vkCreateQueryPool");
  }
  VkQueryPool handle() const { return pool_; }

 private:
  Device& dev_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
};

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

core::Result<BandwidthReport> measure_bandwidth(Device& dev, uint64_t bytes,
                                                const BandwidthOptions& options) {
  QWEN35_RETURN_IF_ERROR(dev.healthy());
  if (bytes == 0)
    return core::error("[vulkan] the bandwidth probe needs at least one byte to read");
  if (options.runs < 1) return core::error("[vulkan] the bandwidth probe needs at least one run");
  const uint64_t total = (bytes + kVector - 1) / kVector * kVector;
  const uint64_t per_buffer = dev.binding_limit() / kVector * kVector;
  if (per_buffer == 0) return core::error("[vulkan] a binding too small for the bandwidth probe");

  // The buffers, filled with probe_word(i) for word i of the whole range; the host's sum on the
  // way.
  std::vector<Buffer> parts;
  std::vector<uint32_t> chunk;
  uint32_t host_sum = 0;
  uint64_t word = 0;
  for (uint64_t at = 0; at < total; at += per_buffer) {
    const uint64_t n = std::min(per_buffer, total - at);
    QWEN35_ASSIGN_OR_RETURN(Buffer b, dev.buffer(n, MemoryKind::kDevice));
    for (uint64_t off = 0; off < n; off += kFillChunk) {
      const uint64_t m = std::min(kFillChunk, n - off);
      chunk.resize(m / 4);
      for (uint32_t& w : chunk) {
        w = probe_word(word++);
        host_sum += w;
      }
      QWEN35_RETURN_IF_ERROR(dev.upload(b, off, chunk.data(), m));
    }
    parts.push_back(std::move(b));
  }
  std::vector<uint32_t> groups;  // per buffer
  uint64_t n_partials = 0;
  for (const Buffer& b : parts) {
    const uint64_t vectors = b.bytes() / kVector;
    groups.push_back(uint32_t(std::min<uint64_t>(kMaxGroups, (vectors + 63) / 64)));
    n_partials += groups.back();
  }
  QWEN35_ASSIGN_OR_RETURN(Buffer out, dev.buffer(n_partials * 4, MemoryKind::kDevice));
  std::vector<uint32_t> partials(n_partials);

  const DeviceInfo& info = dev.info();
  const bool device_clock =
      options.timestamps && info.timestamp_bits > 0 && info.timestamp_period > 0;
  QueryPool queries(dev);
  if (device_clock) QWEN35_RETURN_IF_ERROR(queries.create());
  const uint64_t tick_mask =
      info.timestamp_bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << info.timestamp_bits) - 1;

  BandwidthReport rep;
  rep.bytes = total;
  rep.buffers = int(parts.size());
  rep.device_clock = device_clock;
  double best = 0;  // seconds of the fastest timed run
  Recorder rec(dev);
  for (int run = 0; run <= options.runs; ++run) {  // run 0: the warm-up
    QWEN35_RETURN_IF_ERROR(rec.begin());
    if (device_clock) {
      rec.reset_queries(queries.handle(), 0, 2);
      rec.timestamp(queries.handle(), 0);
    }
    uint32_t out0 = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const ProbePush pc{0, uint32_t(parts[i].bytes() / kVector), groups[i], out0};
      rec.dispatch("bandwidth", {{&parts[i]}, {&out}}, &pc, sizeof pc, groups[i]);
      out0 += groups[i];
    }
    if (device_clock) rec.timestamp(queries.handle(), 1);
    rec.stage_out({&out}, n_partials * 4, partials.data());
    const auto t0 = std::chrono::steady_clock::now();
    QWEN35_RETURN_IF_ERROR(rec.submit());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (device_clock) {
      uint64_t stamps[2] = {0, 0};
      QWEN35_RETURN_IF_ERROR(dev.note(
          dev.api().vkGetQueryPoolResults(dev.handle(), queries.handle(), 0, 2, sizeof stamps,
                                          stamps, sizeof(uint64_t),
                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults"));
      seconds = double((stamps[1] - stamps[0]) & tick_mask) * double(info.timestamp_period) * 1e-9;
    }
    uint32_t sum = 0;
    for (uint32_t p : partials) sum += p;
    if (sum != host_sum)
      return core::error("[vulkan] the bandwidth probe's sum on " + info.name + " is " + hex(sum) +
                         ", the host's " + hex(host_sum) + ": the device read the buffer wrong");
    rep.sum = sum;
    if (run > 0 && seconds > 0 && (best == 0 || seconds < best)) best = seconds;
  }
  if (!(best > 0))
    return core::error(
        "[vulkan] the bandwidth probe's runs took no measurable time; probe more "
        "than " +
        std::to_string(total) + " bytes");
  rep.bytes_per_s = double(total) / best;
  return rep;
}

core::Result<double> probe_bandwidth(Device& dev, uint64_t bytes) {
  QWEN35_ASSIGN_OR_RETURN(BandwidthReport r, measure_bandwidth(dev, bytes));
  return r.bytes_per_s;
}

}  // namespace qwen35::vulkan
