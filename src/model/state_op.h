// What a model split over MPI ranks must repeat of rank 0's sequence-state changes that are not
// forward calls: the prefix cache's snapshots and KV blocks, resumes, forks and resets. Rank 0's
// engine records them as they happen (runtime/stepper.h) and the next step message carries them
// ahead of its rows (dist/pipeline.h), so each rank applies them to its own layers' part of the
// states, in rank 0's order, before the step: the snapshot a rank stores under a node id is its
// part of the one rank 0 stores under that id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwen35::model {

struct StateOp {
  enum Kind : uint32_t {
    kPool = 1,      // a new engine: states 0..b-1 share a new pool of `a` blocks, capacity `c` each;
                    // `seq` 1: MTP drafting, the states keep the MTP head's cache (where it is held)
    kReset,         // state `seq` back to position 0, its blocks given back
    kNode,          // tree node `a` (child of node `b`, 0: the root) holds block `c` of state `seq`
    kNodeGone,      // node `a` and its snapshot are gone; its block reference is given back
    kSnapshot,      // node `a` snapshots state `seq`'s recurrent state (it stands at the node)
    kCaptured,      // node `a` takes state `seq`'s copy at position `c` from its last step (a
                    // provisional snapshot), or the state itself when it stands at `c`
    kSnapshotGone,  // node `a` keeps its block but no longer its snapshot
    kResume,        // state `seq` (just reset) resumes from node `a`'s snapshot, at position `c`
    kFork,          // state `seq` (just reset) forks from state `b`
  };
  uint32_t kind = 0;
  int64_t seq = -1;  // a state: its slot's index, the same on every rank
  uint64_t a = 0, b = 0;
  int64_t c = 0;
};

// A node of rank 0's prefix-cache tree as the other ranks of a split see it when their parts of
// the snapshot files (serve --cache-dir) are loaded or saved (dist/pipeline.h). A list of them
// names parents before children.
struct CacheEntry {
  uint64_t node = 0, parent = 0;  // ids; parent 0: the root
  int64_t depth = 0;              // positions [0, depth · kKvBlock)
  bool snapshot = false;          // an ordinary snapshot: a file of its own on every rank
  std::vector<int32_t> key;       // the token ids of its kKvBlock positions
};

// What a rank could not do with its part of a snapshot file: the node (0: the whole save) and
// why, naming the rank.
struct CacheVerdict {
  uint64_t node = 0;
  std::string why;
};

}  // namespace qwen35::model
