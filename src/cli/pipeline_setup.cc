#include "cli/pipeline_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/resident.h"

namespace qwen35::cli {
namespace {

uint64_t fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// This process's executable, hashed whole: ranks must run the same build.
uint64_t binary_fingerprint() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  std::vector<char> buf(1 << 20);
  uint64_t h = 1469598103934665603ull;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    h = fnv(buf.data(), size_t(in.gcount()), h);
  }
  return h;
}

core::Result<std::vector<int64_t>> parse_starts(const std::string& s) {
  std::vector<int64_t> starts;
  for (size_t at = 0; at < s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string part = s.substr(at, comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0') return core::error("--pipeline-split: '" + part + "' is not a layer index");
    starts.push_back(v);
    at = comma + 1;
  }
  return starts;
}

// The first rank whose value differs from rank 0's, or -1.
int first_differing(const std::vector<uint64_t>& v) {
  for (size_t r = 1; r < v.size(); ++r)
    if (v[r] != v[0]) return int(r);
  return -1;
}

// The identity checks: the same binary and the same checkpoint on every rank.
core::Status check_fingerprints(dist::Comm& comm, const LoadOptions& o) {
  const auto bins = comm.allgather(binary_fingerprint());
  if (int r = first_differing(bins); r > 0)
    return core::error("rank " + std::to_string(r) + " runs a different qwen35 binary than rank 0: every rank "
                       "must run the same build");
  const auto ckpts = comm.allgather(checkpoint_fingerprint(o));
  if (int r = first_differing(ckpts); r > 0)
    return core::error("rank " + std::to_string(r) + "'s checkpoint differs from rank 0's (config.json and the "
                       "weight files: names, sizes, first and last MiB; and the mode): every rank must load "
                       "the same checkpoint");
  return core::Status();
}

// With --pipeline-plan each rank says what of its weights is in memory, measured (its mappings'
// Rss in /proc/self/smaps) beside the copies made at load, against the plan's share.
void report_resident(const model::ModelWeights& w, const model::HeldBytes& held, const model::RankShare& share,
                     int rank) {
  const size_t resident = model::mapped_resident_bytes(w);
  const auto mb = [](size_t b) { return double(b) / double(1 << 20); };
  std::fprintf(stderr, "pipeline: rank %d resident weights %.1f MiB: %zu bytes of the checkpoint's mapped pages "
               "+ %zu bytes of copies made at load (fp32 vectors); planned %zu bytes (%.1f MiB)\n", rank,
               mb(resident + held.copies), resident, held.copies, share.weights, mb(share.weights));
  std::fflush(stderr);
}

}  // namespace

void add_pipeline_flags(flags::App& app, PipelineFlags& f) {
  app.add_option("--pipeline-split", f.split, "under mpirun: the layers where ranks 1.. begin (comma-separated, "
                 "increasing) instead of the split balanced by bytes");
  app.add_flag("--pipeline-plan", f.print_plan, "under mpirun: print the split (rank 0, to stderr)");
  app.add_option("--rank-budget-mb", f.budget_mb, "under mpirun: a plan with a rank over this many MiB "
                 "(weights + state + KV) is an error");
  app.add_flag("--pipeline-whole-logits", f.whole_logits, "under mpirun: the last rank returns every logits row "
               "whole, also where sampling reads only the top k (to measure what the top-k return saves)");
  app.add_option("--pipeline-timeout", f.timeout_s, "under mpirun: seconds a rank may be silent (dead or "
                 "stalled) before every rank stops (default 5)");
  app.add_option("--pipeline-microbatches", f.microbatches, "under mpirun: cut each step's sequences (each "
                 "whole) into up to this many micro-batches that follow each other down the ranks, so that "
                 "the ranks compute at once (default 2; 1: every step whole)");
  app.add_option("--pipeline-microbatch-rows", f.microbatch_rows, "under mpirun: the fewest rows a "
                 "micro-batch may have: a step is cut into fewer (or none) rather than smaller ones, as a "
                 "micro-batch of a few rows costs a rank nearly a whole step (default 32)");
}

void Pipeline::finish() {
  if (finished || !stage || comm->rank() != 0) return;
  finished = true;
  if (report_bytes) {
    const double steps = double(std::max<uint64_t>(1, stage->steps()));
    std::fprintf(stderr, "pipeline: rank 0 sent %llu steps: %llu bytes of step messages to rank 1 (%.0f a step), "
                 "%llu bytes of logits back (%.0f a step)\n", (unsigned long long)stage->steps(),
                 (unsigned long long)stage->bytes_sent(), double(stage->bytes_sent()) / steps,
                 (unsigned long long)stage->logits_received(), double(stage->logits_received()) / steps);
    std::fflush(stderr);
  }
  if (auto st = stage->finish(); !st.ok()) comm->abort(st.message());
}

int Pipeline::follow() {
  if (auto st = stage->serve(); !st.ok()) comm->abort(st.message());
  return 0;
}

Pipeline::EngineForward Pipeline::engine_forward(int64_t capacity) {
  return [this, capacity, seqs = std::vector<dist::StepSequence>()](
             std::span<const model::StateOp> ops, std::span<const model::SequenceRows> rows,
             std::span<const int> slots, std::vector<float>* logits) mutable {
    seqs.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) seqs[i] = {uint64_t(slots[i]), capacity};
    return stage->step(rows, seqs, logits, ops);
  };
}

std::string Pipeline::cache_folder(const std::string& dir, int r) const {
  const model::RankShare& s = plan.ranks[size_t(r)];
  return dir + "/np" + std::to_string(plan.ranks.size()) + "-r" + std::to_string(r) + "-L" + std::to_string(s.first) +
         "-" + std::to_string(s.end);
}

uint64_t Pipeline::cache_fingerprint(uint64_t base, int r) const {
  const std::string name = cache_folder("", r);
  return fnv(name.data(), name.size(), base);
}

Pipeline::CacheParts Pipeline::cache_parts() {
  return [this](std::span<const model::StateOp> ops, std::span<const model::CacheEntry> entries, bool save) {
    return stage->cache_parts(ops, entries, save);
  };
}

std::vector<std::string> foreign_cache_folders(const std::string& dir, const Pipeline& pipe) {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int world = 0, rank = 0, read = 0;
    long long first = 0, end = 0;
    const bool named = std::sscanf(name.c_str(), "np%d-r%d-L%lld-%lld%n", &world, &rank, &first, &end, &read) == 4 &&
                       size_t(read) == name.size();
    if (!named || !it->is_directory(ec)) continue;
    bool ours = false;
    for (size_t r = 0; pipe.split() && r < pipe.plan.ranks.size(); ++r)
      ours = ours || pipe.cache_folder("", int(r)) == "/" + name;
    if (!ours) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Pipeline::EngineDraft Pipeline::engine_draft(int64_t capacity, int64_t draft_vocab) {
  return [this, capacity, draft_vocab, seqs = std::vector<dist::StepSequence>()](
             std::span<const model::StateOp> ops, std::span<const model::DraftRequest> reqs,
             std::span<const int> slots) mutable {
    seqs.resize(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) seqs[i] = {uint64_t(slots[i]), capacity};
    return stage->draft(reqs, seqs, draft_vocab, ops);
  };
}

Pipeline::~Pipeline() {
  finish();
  stage.reset();
}

core::Result<LoadedModel> load_pipelined(LoadOptions o, const PipelineFlags& f, int64_t context, int64_t slots,
                                         Pipeline* pipe) {
  const int world = dist::launched_world_size();
  if (world <= 1) return load_model(o);
  pipe->report = dist::launched_rank() == 0;  // every rank finds a bad flag: one line for the job
  if (f.timeout_s <= 0) return core::error("--pipeline-timeout must be > 0");
  if (f.microbatches < 1 || f.microbatches > 256) return core::error("--pipeline-microbatches must be in 1..256");
  if (f.microbatch_rows < 1) return core::error("--pipeline-microbatch-rows must be >= 1");
  QWEN35_ASSIGN_OR_RETURN(pipe->comm, dist::Comm::start(f.timeout_s));
  dist::Comm& comm = *pipe->comm;
  const int rank = comm.rank();
  pipe->report = rank == 0;
  QWEN35_RETURN_IF_ERROR(check_fingerprints(comm, o));
  // Lazily mapped: the pages of the tensors this rank lets go are never read.
  o.load_mode = "mmap";
  std::string described;
  model::HeldBytes held;
  o.prepare = [&](model::ModelWeights& w) -> core::Status {
    QWEN35_ASSIGN_OR_RETURN(const std::vector<int64_t> starts, parse_starts(f.split));
    const model::PipelineCosts costs = model::pipeline_costs(w, context, slots);
    QWEN35_ASSIGN_OR_RETURN(pipe->plan, model::plan_pipeline(costs, world, starts,
                                                             size_t(f.budget_mb * double(1 << 20))));
    described = model::describe(pipe->plan, costs);
    pipe->mtp_problem = model::mtp_unusable(w);  // before rank 0 lets the head go
    model::keep_share(w, pipe->plan.ranks[size_t(rank)]);
    // Binding read the vectors of every layer (and the headers): every page goes, and those of
    // the tensors this rank holds are read back, once, as one process prefaults the whole model.
    model::drop_mapped_pages(w);
    held = model::fault_in_held(w);
    return core::Status();
  };
  auto lm = load_model(o);
  // Every rank learns which failed, so that none waits on one that stopped.
  const auto oks = comm.allgather(lm.ok() ? 1 : 0);
  if (!oks[0]) return lm.ok() ? core::error("rank 0 failed") : lm.status();
  for (int r = 1; r < world; ++r)
    if (!oks[size_t(r)]) {
      pipe->report = rank == r;
      return core::error(lm.ok() ? "rank " + std::to_string(r) + " failed"
                                 : "rank " + std::to_string(r) + ": " + lm.message());
    }
  const auto plans = comm.allgather(std::hash<std::string>{}(described));
  if (int r = first_differing(plans); r > 0)
    return core::error("rank " + std::to_string(r) + "'s plan differs from rank 0's (its options differ)");
  if (f.print_plan && rank == 0)
    std::fprintf(stderr, "pipeline plan: %d ranks over %zu layers (state and KV for %lld sequence%s of %lld "
                 "positions, f32)\n%s", world, lm->model->weights().layers.size(), (long long)slots,
                 slots == 1 ? "" : "s", (long long)context, described.c_str());
  if (f.print_plan) report_resident(lm->model->weights(), held, pipe->plan.ranks[size_t(rank)], rank);
  pipe->stage = std::make_unique<dist::PipelineStage>(comm, *lm->model, pipe->plan);
  pipe->stage->set_whole_logits(f.whole_logits);
  pipe->report_bytes = f.print_plan && rank == 0;
  pipe->stage->set_microbatches(f.microbatches, f.microbatch_rows);
  return lm;
}

}  // namespace qwen35::cli
