// Which side holds the current bits of memory that a device executor keeps a twin of: a
// sequence's conv and recurrent state (model/state.h) and a pool's KV blocks (model/kv_pool.h).
//
// On the CPU the host memory is the only copy and everything here is a no-op. Under a device
// executor (docs/design.md "Vulkan backend") the twin on the device is the current copy once a
// step has run on it, and the host's is stale until pulled. So the host code of the state and
// the pool, the one place that reads or writes that memory outside a step, brackets each access:
//   - host_read() before reading it: the device's bits are brought back first (a download, only
//     when the device is ahead: a snapshot, a fork, a cache file);
//   - host_wrote() after writing it: the twin is stale, and the executor uploads the host's bits
//     before the next step that names it (a reset, a restore, a fork's copies).
// A write that does not cover the whole memory pulls first (host_read), so that the host holds
// every current bit when it is uploaded again. (A state's verification records are scratch,
// written by a verification before commit reads them: a reset or a restore, which rewrite the
// rest, need not pull them.)
//
// Copies between mirrored memory (a fork: the partial KV block's rows within the pool, and the
// source state's buffers into the new state's) run on the device where the source's twin holds
// the current bits (device_copy below): nothing crosses the bus, and the destination's host
// copy is stale until pulled. Where the host holds them, the copy runs there as before.
//
// Swapping two of the state's buffers (SequenceState::keep_verified) is neither: the executor
// names its twins by host address, so the twins swap with the buffers.
//
// Thread-safety: as the state or pool it belongs to (one user at a time, between steps).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qwen35::model {

class Mirror {
 public:
  // The device side of one mirrored object: brings the twin's bits into the host memory.
  class Twin {
   public:
    virtual void pull() = 0;
    // The object is going away: its twin is dropped.
    virtual void forget() = 0;
    // Whether the twin holds the current bits of all of the memory (the device is ahead, or it
    // was synced at the host's latest write).
    virtual bool current() const = 0;
    // Copies, on the device and now, each run [src, src + bytes) of `from`'s memory onto
    // [dst, dst + bytes) of this twin's (`from` may be this twin). With `whole`, the runs cover
    // every byte of this memory that matters, so this twin is current afterwards whatever it
    // held. False (nothing copied, or the device failed) where it cannot: the caller copies on
    // the host.
    struct Run {
      const void* src;
      void* dst;
      uint64_t bytes;
    };
    virtual bool copy(const Twin& from, const Run* runs, size_t count, bool whole) = 0;

   protected:
    ~Twin() = default;
  };

  Mirror() = default;
  ~Mirror() {
    if (twin_) twin_->forget();
  }
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // The host side (the state's and the pool's own code).
  void host_read() const {
    if (twin_ && device_ahead_) {
      twin_->pull();
      device_ahead_ = false;
    }
  }
  void host_wrote() {
    ++host_epoch_;
    device_ahead_ = false;
  }

  // Copies `runs` of `from`'s memory (this mirror's own for a copy within it) onto this memory
  // on the device, when `from`'s twin holds the current bits and this memory has a twin of the
  // same executor that will hold them afterwards: its own current bits (a copy within), or
  // `whole` (the runs rewrite all that matters of it). True when done: the host's copy of this
  // memory is stale from then on. False: nothing was copied; the caller copies on the host
  // (host_read, copy, host_wrote).
  bool device_copy(const Mirror& from, const Twin::Run* runs, size_t count, bool whole) {
    if (!twin_ || !from.twin_ || !from.twin_->current()) return false;
    if (!whole && !twin_->current()) return false;
    if (!twin_->copy(*from.twin_, runs, count, whole)) return false;
    device_ahead_ = true;
    return true;
  }

  // The device side (the executor): attach a twin, or detach it (null).
  void set_twin(Twin* t) {
    twin_ = t;
    device_ahead_ = false;
  }
  Twin* twin() const { return twin_; }
  // Bumped by every host write: a twin synced at another epoch is stale.
  uint64_t host_epoch() const { return host_epoch_; }
  // A step is about to change the twin: the host's copy is stale from now on.
  void device_wrote() { device_ahead_ = true; }
  bool device_ahead() const { return device_ahead_; }

 private:
  Twin* twin_ = nullptr;
  uint64_t host_epoch_ = 0;
  mutable bool device_ahead_ = false;
};

}  // namespace qwen35::model
