// The device's memory read bandwidth, the roofline of decode on it, measured as `qwen35 bench`
// measures the CPU's (a buffer far larger than the caches, summed): shaders/bandwidth.comp reads
// a device buffer of the caller's size (e.g. 256 MiB on a GPU), split into buffers of at most one
// binding (Device::binding_limit), and writes one 32-bit sum per workgroup. Every run checks the
// sum against the host's, so the reads cannot have been optimized away or gone wrong.
//
// Timing: the device's own clock (timestamp queries around the dispatches) where the compute
// queue has one (DeviceInfo::timestamp_bits), else the host's clock around the one submission.
// One warm-up run, then the best of `runs`.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "vulkan/device.h"

namespace qwen35::vulkan {

struct BandwidthOptions {
  int runs = 5;            // timed runs after the warm-up; the fastest is kept
  bool timestamps = true;  // false: the host's clock even where the queue has timestamps
};

struct BandwidthReport {
  double bytes_per_s = 0;     // of the fastest run
  uint64_t bytes = 0;         // read per run: the request rounded up to 16 bytes
  int buffers = 0;            // how many buffers (one binding each) hold them
  bool device_clock = false;  // timed by timestamp queries (else the host's clock)
  uint32_t sum = 0;           // the shader's sum (mod 2^32) of every word, equal to the host's
};

// Word i of the probe's buffer. The words differ, so a read skipped or repeated changes the sum.
inline uint32_t probe_word(uint64_t i) { return uint32_t(i) * 0x9E3779B1u; }

// Fails in one line for an empty request, device memory that cannot be had, a lost device, or a
// sum that differs from the host's.
core::Result<BandwidthReport> measure_bandwidth(Device& dev, uint64_t bytes,
                                                const BandwidthOptions& options = {});

// The read bandwidth in bytes/s (measure_bandwidth's bytes_per_s).
core::Result<double> probe_bandwidth(Device& dev, uint64_t bytes);

}  // namespace qwen35::vulkan
