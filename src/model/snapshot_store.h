// Prefix-cache snapshots kept in a device's memory (serve --cache-device-mb, issue 49 item 2):
// a copy of a sequence's recurrent state (conv and recurrent state and the MTP row, in
// SequenceState::save_recurrent's layout) made and restored on the device, so that a turn that
// resumes moves nothing over the bus. A device executor offers one (Executor::snapshot_store);
// the CPU has none, and its snapshots are host memory as before.
//
// keep, restore and read run at once, between steps, in a submission of its own; make gives an
// empty snapshot that a step fills (model::StateCapture::device: the prefill's copies at grid
// lines, the prefix cache's provisional snapshots, copied on the device inside the step). A
// snapshot holds device memory until it is dropped (the last reference goes); it must not
// outlive the store.
#pragma once

#include <cstdint>
#include <memory>

#include "core/result.h"
#include "model/state.h"

namespace qwen35::model {

class SnapshotStore {
 public:
  class Snapshot {
   public:
    virtual ~Snapshot() = default;
    virtual uint64_t bytes() const = 0;  // the state's recurrent_bytes()
  };

  virtual ~SnapshotStore() = default;
  // A device copy of `state`'s recurrent state (no verification pending); null where it cannot
  // be made on the device (the state's twin does not hold its current bits, or memory): the
  // caller keeps a host copy instead.
  virtual std::shared_ptr<const Snapshot> keep(const SequenceState& state) = 0;
  // An empty snapshot of `bytes` (a state's recurrent_bytes()) for a step to fill
  // (Executor::copy_to_snapshot); null where the device has no memory for it. Its bytes are
  // defined once that step has finished well.
  virtual std::shared_ptr<Snapshot> make(uint64_t bytes) = 0;
  // load_recurrent(s) on the device: false where it cannot (the state has no twin yet, or the
  // device failed); the caller then loads read(s) on the host.
  virtual bool restore(const Snapshot& s, SequenceState& state) = 0;
  // The snapshot's bytes into host memory (save_recurrent's layout): a spill, a cache file.
  virtual core::Status read(const Snapshot& s, float* out) = 0;
  // Device bytes held by live snapshots (made or kept, filled or not).
  virtual uint64_t bytes() const = 0;
};

}  // namespace qwen35::model
