// Loading a model split by layers over the ranks mpirun started (docs/design.md "Past one
// machine"): the flags, the start-up checks and this rank's share of the weights.
//
// Start-up, before any compute, every check a collective decision (each rank reaches the same
// verdict, so none is left waiting): the ranks compare fingerprints of the binary, of the
// checkpoint (checkpoint_fingerprint) and of the plan; each loads and plans; a rank that cannot
// (a plan with more ranks than layers, a rank over its memory budget, a load error) makes every
// rank stop with one line from rank 0.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/model_loader.h"
#include "dist/comm.h"
#include "dist/pipeline.h"
#include "model/pipeline_plan.h"
#include "model/state_op.h"

namespace qwen35::cli {

struct PipelineFlags {
  std::string split;       // --pipeline-split: where ranks 1.. begin
  bool print_plan = false;  // --pipeline-plan
  double budget_mb = 0;    // --rank-budget-mb (0: none)
  double timeout_s = 5;    // --pipeline-timeout: a rank silent this long ends the job
  bool whole_logits = false;  // --pipeline-whole-logits: no top-k return of the logits
  // --pipeline-microbatches, --pipeline-microbatch-rows: a step's sequences cut into up to this
  // many groups of at least this many rows (dist/pipeline.h). The defaults follow the
  // measurements in docs/benchmarks.md: decode steps (a few rows a sequence) stay whole, prompts
  // prefilled together are cut.
  int microbatches = 2;
  int64_t microbatch_rows = 32;
};

void add_pipeline_flags(flags::App& app, PipelineFlags& f);

// The ranks' shared state for one command; empty (no comm) in a process of one rank.
struct Pipeline {
  std::unique_ptr<dist::Comm> comm;
  model::PipelinePlan plan;
  std::unique_ptr<dist::PipelineStage> stage;
  bool finished = false;
  bool report = true;  // whether this rank prints load_pipelined's error (one rank does)
  bool report_bytes = false;  // rank 0 prints the bytes of the steps at finish (--pipeline-plan)

  bool split() const { return comm != nullptr; }
  bool leader() const { return !comm || comm->rank() == 0; }
  // Rank 0: ends the other ranks' loops (once; the destructor does it otherwise).
  void finish();
  // Ranks after 0: this rank's part of every step until rank 0 is done; the exit code.
  int follow();
  // Rank 0: runtime::EngineOptions::forward for an engine whose states hold `capacity`
  // positions (a slot's index names its state on every rank).
  using EngineForward = std::function<core::Status(std::span<const model::StateOp>, std::span<const model::SequenceRows>,
                                                   std::span<const int>, std::vector<float>*)>;
  EngineForward engine_forward(int64_t capacity);
  // serve --cache-dir under the split (dist/pipeline_cache.cc): rank r's folder under `dir`,
  // "np<world>-r<r>-L<first>-<end>", and its files' fingerprint (`base` mixed with that name),
  // so that a restart under another split or world size never reads them.
  std::string cache_folder(const std::string& dir, int r) const;
  uint64_t cache_fingerprint(uint64_t base, int r) const;
  // Rank 0: runtime::EngineOptions::cache_parts.
  using CacheParts = std::function<core::Result<std::vector<model::CacheVerdict>>(
      std::span<const model::StateOp>, std::span<const model::CacheEntry>, bool)>;
  CacheParts cache_parts();
  // Rank 0: runtime::EngineOptions::draft for the same engine: the last rank's MTP head drafts
  // among token ids below `draft_vocab` (0: all).
  using EngineDraft = std::function<core::Status(std::span<const model::StateOp>,
                                                 std::span<const model::DraftRequest>, std::span<const int>)>;
  EngineDraft engine_draft(int64_t capacity, int64_t draft_vocab);
  // Why the last rank's MTP head cannot draft, or "" (every rank learns it at load).
  std::string mtp_problem;
  ~Pipeline();
};

// The folders under a --cache-dir that hold other splits' files ("np..." folders not of this
// run's ranks; every one in a process of one rank), for a warning each: they are not read.
std::vector<std::string> foreign_cache_folders(const std::string& dir, const Pipeline& pipe);

// Loads the model: whole in a process of one rank; else this rank's share of the plan for
// sequences of `context` positions, `slots` at a time, with `pipe` set up. Every rank returns an
// error when one fails; the one line to print is rank 0's, or the failing rank's when rank 0 did
// not fail (pipe->report says which).
core::Result<LoadedModel> load_pipelined(LoadOptions o, const PipelineFlags& f, int64_t context, int64_t slots,
                                         Pipeline* pipe);

}  // namespace qwen35::cli
