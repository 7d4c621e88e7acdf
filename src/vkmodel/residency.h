// The residency map of the Vulkan executor: the device twin of every host range the forward
// names (model/executor.h names operands by host address). Three kinds of twin:
//   - constants: the weights' float vectors (norms, conv taps, decay, dt_bias), uploaded once;
//   - mirrored: a state's buffers and its pool's KV memory, one twin per host buffer, the current
//     copy while the device is ahead (model/mirror.h); uploaded again when the host wrote them,
//     pulled when the host reads them;
//   - scratch: any other host range (activations, logits, the MTP rows): the executor's own
//     memory between steps, never copied to or from the host unless the forward says so
//     (send/receive). A range that overlaps scratch twins merges them into one, their bytes kept.
// A twin's device offsets keep the host addresses' alignment modulo the device's binding
// alignment, so that a host row aligned to it is a device binding aligned to it.
//
// Thread-safety: one caller at a time (the model's).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "model/mirror.h"
#include "model/state.h"
#include "vulkan/recorder.h"

namespace qwen35::vkmodel {

class Residency {
 public:
  explicit Residency(vulkan::Device& dev);
  ~Residency();  // detaches from every state and pool it mirrors
  Residency(const Residency&) = delete;
  Residency& operator=(const Residency&) = delete;

  // A constant range (a weight vector), uploaded now and kept.
  core::Status add_constant(const void* p, uint64_t bytes);

  // A step: the recorder that the map's own copies (uploads, merges) go on.
  void begin(vulkan::Recorder* rec);
  // After the step's submission (ok or not): buffers retired during it are freed.
  void end();
  // After a failed step, before end(): none of its commands ran (a recording error), or the
  // device is lost. The twins it made or refreshed hold undefined bytes, so the host's copy is
  // the current one again (uploaded at the next attach); scratch twins are dropped.
  void abort();

  // The state's buffers and its pool's are the step's from here: twins made for new buffers,
  // uploaded where the host wrote them since, and the device marked ahead.
  void attach(model::SequenceState& st);

  // The twin of [p, p + bytes) (a scratch twin made or grown for an address of no twin). The
  // binding's offset keeps p's alignment (above); `bytes` must not cross two kinds of twin.
  vulkan::Binding at(const void* p, uint64_t bytes);
  // The whole twin holding p (a state's or a pool's buffer), and the host address of its first
  // byte; an empty binding (the step failed) where p has no twin.
  vulkan::Binding whole(const void* p, uintptr_t* base);
  // The host's bytes of [p, p + bytes) into its twin, in order with the commands recorded.
  void send(const void* p, uint64_t bytes);
  // The twin's bytes to the host at p when the step's submission returns.
  void receive(const void* p, uint64_t bytes);
  // The host is done with [p, p + bytes): the scratch twins inside it are freed (a merged twin
  // that reaches past it stays: the rest of it may be another buffer's).
  void forget(const void* p, uint64_t bytes);

  // Copies runs between mirrored twins now, in a submission of its own (model/mirror.h
  // device_copy, between steps). False, copying nothing, where a run is not within mirrored
  // twins or is not in words, or inside a step; false after a device failure too (the next step
  // reports it).
  bool copy_now(const model::Mirror::Twin::Run* runs, size_t count);
  // Device copies made so far (the tests check that forks take them).
  uint64_t device_copies() const { return device_copies_; }
  // Between steps, for copies to and from memory outside the map (vkmodel/snapshots.h): the
  // binding of [p, p + bytes) in a mirrored twin (empty where it is not one's, or not whole
  // words); the copies, submitted now (false where they cannot be, or failed); whether a
  // state's or pool's twin holds its current bits, and whether it has ever been synced (so its
  // buffers exist); and, after copies rewrote all that matters of it, that its twin is current
  // and the host's copy stale.
  vulkan::Binding mirrored(const void* p, uint64_t bytes);
  bool submit_copies(const std::vector<std::pair<vulkan::Binding, vulkan::Binding>>& pairs);
  bool current(const model::Mirror& m) const;
  bool synced_once(const model::Mirror& m) const;
  void mark_current(model::Mirror& m);

  // Device bytes held by twins (constants, mirrored, scratch).
  uint64_t bytes() const;
  // The same by use; readable from any thread while the caller runs steps (/metrics).
  struct Usage {
    uint64_t constants = 0, states = 0, kv = 0, scratch = 0;
  };
  Usage usage() const;

 private:
  enum class Kind { kConstant, kMirrored, kScratch };
  struct Region {
    uintptr_t base = 0;  // host address of the first byte
    uint64_t bytes = 0;
    uint64_t pad = 0;  // device offset of the first byte (base mod alignment)
    Kind kind = Kind::kScratch;
    bool kv = false;  // a mirrored pool's KV memory (else a state's buffer)
    vulkan::Buffer buf;
  };
  class Twin;  // a mirrored state's or pool's (model::Mirror::Twin)
  Twin* twin_of(const model::Mirror& m) const;  // m's twin, where it is this map's

  // A new region's buffer (its pad set from base), or null after failing the step.
  Region* make(uintptr_t base, uint64_t bytes, Kind kind, bool kv = false);
  void drop(uintptr_t base);  // the region at base, its buffer retired until end()
  void evict(uintptr_t lo, uintptr_t hi);  // every scratch region overlapping [lo, hi)
  Region* find(uintptr_t p, uint64_t bytes);
  void mirror(model::Mirror& m, const std::vector<std::pair<uintptr_t, uint64_t>>& ranges, bool kv);
  std::atomic<uint64_t>& held(const Region& g);
  void fail(const std::string& what);

  vulkan::Device& dev_;
  vulkan::Recorder* rec_ = nullptr;
  uint64_t align_ = 4;
  std::map<uintptr_t, std::unique_ptr<Region>> map_;  // by base; regions never overlap
  std::vector<std::unique_ptr<Twin>> twins_;
  std::vector<Twin*> synced_;  // the twins the step made or refreshed
  std::vector<vulkan::Buffer> retired_;
  std::string pending_error_;  // a failure outside a step (a pull), reported by the next one
  std::unique_ptr<vulkan::Recorder> copier_;  // copy_now's, made at the first
  uint64_t device_copies_ = 0;
  std::atomic<uint64_t> held_[4] = {};  // bytes of the regions in map_ by use (Usage's order)
};

}  // namespace qwen35::vkmodel
