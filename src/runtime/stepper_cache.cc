// Stepper::load_cache / save_cache (stepper.h): --cache-dir, and under a model split over MPI
// ranks the other ranks' parts of the same snapshot files (docs/design.md "Past one machine:
// ranks over MPI").
//
// Under a split, rank 0 loads its own files first, with the cache's observer off: what loading
// builds (and what it evicts on the way) is told to the other ranks afterwards as a whole, the
// tree's nodes with their ids, rather than op by op. Each other rank reads its part of every
// snapshot the tree holds from its own files; a snapshot that one rank lacks, or whose part is
// damaged, is dropped here (the observer on: the drop rides with the next step as state ops, so
// every rank drops it). Saving, rank 0 writes its files, then the others theirs, after the state
// changes of the last steps not yet sent.
#include "runtime/stepper.h"

namespace qwen35::runtime {

int64_t Stepper::load_cache(std::vector<std::string>* log) {
  if (!cache_ || opts_.cache_dir.empty()) return 0;
  const bool split = bool(opts_.cache_parts);
  if (split) {
    cache_->set_file_part(model::snapshot_file::layers_part(model_.config(), *states_[0], *pool_, 0,
                                                            opts_.cache_layers_end, false));
    cache_->set_observer(nullptr);
  }
  int64_t n = cache_->load(opts_.cache_dir, opts_.cache_fingerprint, recurrent_floats(), log);
  if (!split) return n;
  cache_->set_observer(
      [this](const model::StateOp& op, const model::SequenceState* st) { record(op, st); });
  const std::vector<model::CacheEntry> entries = cache_->entries();
  auto verdicts = opts_.cache_parts(state_ops_, entries, /*save=*/false);
  state_ops_.clear();  // sent with the entries, ahead of them
  if (!verdicts.ok()) {
    // The other ranks' parts are unknown: nothing loaded is used (the job is ending anyway).
    log->push_back("the other ranks did not load their parts of the prefix cache (" +
                   verdicts.message() + "); the cache starts empty");
    cache_->clear();
    return 0;
  }
  for (const model::CacheVerdict& v : *verdicts) {
    log->push_back("prefix-cache snapshot " + std::to_string(v.node) + ": " + v.why +
                   "; dropped on every rank");
    cache_->drop_snapshot(v.node);
  }
  return cache_->stats().snapshots;
}

core::Result<int64_t> Stepper::save_cache() {
  if (!cache_ || opts_.cache_dir.empty()) return int64_t(0);
  QWEN35_RETURN_IF_ERROR(cache_->save(opts_.cache_dir, opts_.cache_fingerprint));
  const PrefixCacheStats s = cache_->stats();
  if (!opts_.cache_parts) return s.snapshots - s.provisional;
  const std::vector<model::CacheEntry> entries = cache_->entries();
  QWEN35_ASSIGN_OR_RETURN(const std::vector<model::CacheVerdict> verdicts,
                          opts_.cache_parts(state_ops_, entries, /*save=*/true));
  state_ops_.clear();
  if (!verdicts.empty()) return core::error("[prefix cache] " + verdicts[0].why);
  return s.snapshots - s.provisional;
}

}  // namespace qwen35::runtime
