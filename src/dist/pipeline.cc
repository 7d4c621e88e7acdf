#include "dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include "dist/wire.h"

namespace qwen35::dist {
namespace {

constexpr int kStepTag = 10;    // rank r -> r+1: a step, a drop or the end
constexpr int kLogitsTag = 11;  // the last rank -> rank 0: a step's logits
constexpr int kDraftsTag = 12;  // the last rank -> rank 0: a draft message's tokens
enum Op : uint32_t { kStep = 1, kDrop = 2, kFinish = 3, kDraft = 4 };

// One sequence's record as it travels.
struct Record {
  uint64_t id = 0;
  int64_t capacity = 0, n = 0, pos0 = 0, rope_delta = 0;
  uint8_t all_logits = 0, verify = 0, has_positions = 0;
  int32_t top_k = 0;  // > 0: the last rank returns the top k of each logits row
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int64_t> captures;  // grid lines where the prefill copies the state
};

// The failure tests' hook (tests/dist/pipeline_test.sh): QWEN35_PIPELINE_TEST_DELAY=S makes rank 0
// wait S seconds before each step after the first, so that a rank can be killed or stopped while
// the others are mid-stream. Unset: no wait.
void test_delay(uint64_t steps) {
  static const double delay = [] {
    const char* s = std::getenv("QWEN35_PIPELINE_TEST_DELAY");
    return s ? std::atof(s) : 0.0;
  }();
  if (delay <= 0 || steps == 0) return;
  if (steps == 1) std::fprintf(stderr, "pipeline: rank 0 waits %.0f s before each step (QWEN35_PIPELINE_TEST_DELAY)\n", delay);
  std::this_thread::sleep_for(std::chrono::duration<double>(delay));
}

// The logits message (the last rank -> rank 0): per logits row, in Model::forward's order, an
// int32 k, then the row: k = 0, vocab f32 logits; k > 0, its k largest logits (ranked by
// value, then id, as the sampler ranks them) as k f32 values and their k int32 ids.
void pack_logits(const float* logits, const std::vector<Record>& recs, int64_t vocab, std::vector<uint8_t>* out) {
  const float* row = logits;
  std::vector<int32_t> ids;
  for (const Record& r : recs)
    for (int64_t i = 0, n = r.all_logits || r.verify ? r.n : 1; i < n; ++i, row += vocab) {
      const int32_t k = int32_t(std::min<int64_t>(r.top_k, vocab));
      put(*out, k);
      if (k == 0) {
        put(*out, row, size_t(vocab) * sizeof(float));
        continue;
      }
      ids.resize(size_t(vocab));
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int32_t j = 0; j < k; ++j) put(*out, row[ids[size_t(j)]]);
      put(*out, ids.data(), size_t(k) * sizeof(int32_t));
    }
}

// Into out [rows, vocab], which holds -inf.
bool unpack_logits(const std::vector<uint8_t>& msg, int64_t rows, int64_t vocab, float* out) {
  Reader rd{msg};
  for (int64_t i = 0; i < rows; ++i) {
    float* row = out + i * vocab;
    const int32_t k = rd.get<int32_t>();
    if (!rd.ok || k < 0 || k > vocab) return false;
    if (k == 0) {
      rd.read(row, size_t(vocab) * sizeof(float));
      continue;
    }
    std::vector<float> values(static_cast<size_t>(k));
    std::vector<int32_t> ids(static_cast<size_t>(k));
    rd.read(values.data(), values.size() * sizeof(float));
    rd.read(ids.data(), ids.size() * sizeof(int32_t));
    for (int32_t j = 0; j < k && rd.ok; ++j) {
      if (ids[size_t(j)] < 0 || ids[size_t(j)] >= vocab) return false;
      row[ids[size_t(j)]] = values[size_t(j)];
    }
  }
  return rd.ok && rd.at == msg.size();
}

}  // namespace

PipelineStage::PipelineStage(Comm& comm, model::Model& model, const model::PipelinePlan& plan)
    : comm_(comm), model_(model), plan_(plan) {}

std::vector<uint8_t> PipelineStage::step_header(std::span<const model::SequenceRows> batch,
                                                std::span<const StepSequence> seqs,
                                                std::span<const model::StateOp> ops) const {
  size_t bytes = 24 + ops.size() * 36;  // docs/design.md "Wire cost"; with the hidden rows after
  for (const model::SequenceRows& r : batch)
    bytes += 51 + r.tokens.size() * (4 + sizeof(float) * size_t(model_.config().hidden)) + r.positions.size_bytes() +
             r.captures.size() * 8;
  std::vector<uint8_t> msg;
  msg.reserve(bytes);
  put(msg, uint32_t(kStep));
  put_ops(msg, ops);
  put(msg, uint32_t(batch.size()));
  int64_t rows = 0;
  for (const model::SequenceRows& r : batch) rows += int64_t(r.tokens.size());
  put(msg, rows);
  for (size_t i = 0; i < batch.size(); ++i) {  // the states as they stand before the step
    const model::SequenceRows& r = batch[i];
    put(msg, seqs[i].id);
    put(msg, seqs[i].capacity);
    put(msg, int64_t(r.tokens.size()));
    put(msg, r.state ? r.state->pos() : int64_t(0));
    put(msg, r.state ? r.state->rope_delta() : int64_t(0));
    put(msg, uint8_t(r.all_logits));
    put(msg, uint8_t(r.verify));
    put(msg, uint8_t(!r.positions.empty()));
    put(msg, int32_t(whole_logits_ ? 0 : r.logits_top_k));
    put(msg, r.tokens.data(), r.tokens.size_bytes());
    put(msg, r.positions.data(), r.positions.size_bytes());
    put(msg, uint32_t(r.captures.size()));
    for (const model::StateCapture& c : r.captures) put(msg, c.pos);
  }
  return msg;
}

// Each micro-batch through rank 0's layers and posted on; then their logits, in order. A
// micro-batch that fails here (bad input, which the engine checks before) still has the ones
// sent before it answered, so that no logits are left for the next step to read.
core::Status PipelineStage::step(std::span<const model::SequenceRows> batch, std::span<const StepSequence> seqs,
                                 std::vector<float>* logits, std::span<const model::StateOp> ops) {
  if (seqs.size() != batch.size()) return core::error("[pipeline] a step names every sequence of its batch");
  std::vector<int64_t> rows(batch.size()), logits_rows(batch.size() + 1, 0);  // logits_rows: prefix sums
  for (size_t i = 0; i < batch.size(); ++i) {
    const model::SequenceRows& r = batch[i];
    rows[i] = int64_t(r.tokens.size());
    logits_rows[i + 1] = logits_rows[i] + (r.all_logits || r.verify ? rows[i] : 1);
  }
  const std::vector<size_t> starts = model::microbatch_starts(rows, microbatches_, microbatch_rows_);
  const auto group_end = [&](size_t k) { return k + 1 < starts.size() ? starts[k + 1] : batch.size(); };
  test_delay(steps_++);
  size_t sent = 0;
  core::Status failed;
  for (; sent < starts.size(); ++sent) {
    const size_t b = starts[sent], n = group_end(sent) - b;
    std::vector<uint8_t> msg =
        step_header(batch.subspan(b, n), seqs.subspan(b, n), sent == 0 ? ops : std::span<const model::StateOp>());
    failed = model_.forward_layers(batch.subspan(b, n), 0, share().end, &hidden_, nullptr);
    if (!failed.ok()) break;
    put(msg, hidden_.data(), hidden_.size() * sizeof(float));
    bytes_sent_ += msg.size();
    failed = comm_.post(1, kStepTag, std::move(msg));
    if (!failed.ok()) return failed;  // the ranks are out of step: the job ends (comm.h)
  }
  const int64_t vocab = model_.config().vocab;
  const int64_t answered = sent == 0 ? 0 : logits_rows[group_end(sent - 1)];  // the rows of the groups sent
  logits->assign(size_t(answered * vocab), -INFINITY);
  for (size_t k = 0; k < sent; ++k) {
    QWEN35_ASSIGN_OR_RETURN(std::vector<uint8_t> back, comm_.recv(comm_.size() - 1, kLogitsTag));
    logits_received_ += back.size();
    const int64_t first = logits_rows[starts[k]], end = logits_rows[group_end(k)];
    if (!unpack_logits(back, end - first, vocab, logits->data() + first * vocab))
      comm_.abort("a malformed logits message from rank " + std::to_string(comm_.size() - 1));
  }
  return failed;
}

core::Status PipelineStage::draft(std::span<const model::DraftRequest> reqs, std::span<const StepSequence> seqs,
                                  int64_t draft_vocab, std::span<const model::StateOp> ops) {
  if (seqs.size() != reqs.size()) return core::error("[pipeline] a draft names every sequence of its requests");
  int64_t most = 0;
  for (const model::DraftRequest& r : reqs) {  // Model::draft's checks, but for the head's cache
    if (r.state == nullptr || r.out == nullptr) return core::error("[draft] a request without a state or output");
    if (r.state->verify_pending()) return core::error("[draft] the state has a verification pending");
    if (r.token < 0 || r.token >= model_.config().vocab)
      return core::error("[draft] token id " + std::to_string(r.token) + " out of range");
    if (r.k < 0 || r.k >= model::kMaxVerifyRows)
      return core::error("[draft] k must be in [0, " + std::to_string(model::kMaxVerifyRows - 1) + "]");
    r.out->clear();
    most = std::max(most, r.k);
  }
  // How far Model::draft would go for each: its stops, and its blocks taken in its order (by
  // draft position, then request), so that rank 0's pool runs out where one process's does.
  std::vector<int64_t> k(reqs.size(), 0);
  for (int64_t d = 0; d < most; ++d)
    for (size_t i = 0; i < reqs.size(); ++i) {
      model::SequenceState* st = reqs[i].state;
      const int64_t slot = st->pos() + d;
      const bool going = d == 0 ? st->pos() >= 1 : k[i] == d;
      if (going && d < reqs[i].k && slot < st->capacity() && st->reserve(slot + 1)) k[i] = d + 1;
    }
  std::vector<uint8_t> msg;
  put(msg, uint32_t(kDraft));
  put_ops(msg, ops);
  put(msg, draft_vocab);
  put(msg, uint32_t(std::count_if(k.begin(), k.end(), [](int64_t n) { return n > 0; })));
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (k[i] == 0) continue;
    put(msg, seqs[i].id);
    put(msg, reqs[i].state->pos());
    put(msg, reqs[i].state->rope_delta());
    put(msg, reqs[i].token);
    put(msg, k[i]);
  }
  QWEN35_RETURN_IF_ERROR(comm_.send(1, kStepTag, msg));
  bytes_sent_ += msg.size();
  QWEN35_ASSIGN_OR_RETURN(std::vector<uint8_t> back, comm_.recv(comm_.size() - 1, kDraftsTag));
  Reader rd{back};
  for (size_t i = 0; i < reqs.size(); ++i) {  // per request sent: a count, then the tokens
    if (k[i] == 0) continue;
    const uint32_t n = rd.get<uint32_t>();
    if (!rd.ok || n > uint64_t(k[i])) comm_.abort("a malformed drafts message");
    reqs[i].out->resize(n);
    if (n > 0) rd.read(reqs[i].out->data(), n * sizeof(int32_t));
  }
  if (!rd.ok || rd.at != back.size()) comm_.abort("a malformed drafts message");
  return core::Status();
}

core::Status PipelineStage::drop(std::span<const uint64_t> ids) {
  std::vector<uint8_t> msg;
  put(msg, uint32_t(kDrop));
  put(msg, uint32_t(ids.size()));
  put(msg, ids.data(), ids.size_bytes());
  bytes_sent_ += msg.size();
  return comm_.send(1, kStepTag, msg);
}

core::Status PipelineStage::finish() {
  std::vector<uint8_t> msg;
  put(msg, uint32_t(kFinish));
  return comm_.send(1, kStepTag, msg);
}

core::Status PipelineStage::forward_to_next(std::vector<uint8_t> msg) {
  if (last()) return core::Status();
  bytes_sent_ += msg.size();
  return comm_.post(comm_.rank() + 1, kStepTag, std::move(msg));
}

core::Status PipelineStage::serve() {
  for (;;) {
    QWEN35_ASSIGN_OR_RETURN(std::vector<uint8_t> msg, comm_.recv(comm_.rank() - 1, kStepTag));
    Reader rd{msg};
    const uint32_t op = rd.get<uint32_t>();
    if (!rd.ok) comm_.abort("an empty pipeline message");
    if (op == kFinish) {
      QWEN35_RETURN_IF_ERROR(forward_to_next(std::move(msg)));
      return comm_.flush();
    }
    if (op == kDrop) {
      const uint32_t n = rd.get<uint32_t>();
      for (uint32_t i = 0; i < n && rd.ok; ++i) states_.erase(rd.get<uint64_t>());
      if (!rd.ok) comm_.abort("a malformed drop message");
      QWEN35_RETURN_IF_ERROR(forward_to_next(std::move(msg)));
      continue;
    }
    if (cache_message(op)) {  // --cache-dir: dist/pipeline_cache.cc
      QWEN35_RETURN_IF_ERROR(forward_to_next(msg));
      if (auto st = serve_cache(msg); !st.ok()) comm_.abort("prefix-cache files: " + st.message());
      continue;
    }
    if (op == kDraft) {
      if (auto st = apply_draft(msg); !st.ok()) comm_.abort("drafting failed: " + st.message());
      continue;
    }
    if (op != kStep) comm_.abort("an unknown pipeline message (op " + std::to_string(op) + ")");
    if (auto st = apply(msg); !st.ok()) comm_.abort("step failed: " + st.message());
  }
}

namespace {
core::Status op_error(const model::StateOp& op, const std::string& why) {
  return core::error("state op " + std::to_string(op.kind) + " (sequence " + std::to_string(op.seq) + ", node " +
                     std::to_string(op.a) + "): " + why);
}
}  // namespace

model::SequenceState* PipelineStage::state(int64_t id, int64_t capacity) {
  auto& st = states_[uint64_t(id)];
  if (!st)
    st = pool_ && uint64_t(id) < pool_states_ ? model_.new_state(pool_capacity_, pool_.get()) : model_.new_state(capacity);
  return st.get();
}

// kCaptured: rank 0's copy from the step's prefill, or (a chunk that ended on the line, a model
// with no recurrent state) the state as it stands: this rank takes its part the same way.
core::Status PipelineStage::take_copy(const model::StateOp& op) {
  model::SequenceState* st = state(op.seq, 0);
  std::vector<float>& snap = snapshots_[op.a];
  snap.assign(st->recurrent_bytes() / sizeof(float), 0.0f);
  auto seq = captured_.find(uint64_t(op.seq));
  if (seq != captured_.end())
    if (auto copy = seq->second.find(op.c); copy != seq->second.end()) {
      std::copy_n(copy->second.begin(), snap.size(), snap.begin());
      seq->second.erase(copy);
      return core::Status();
    }
  if (snap.empty()) return core::Status();
  if (st->pos() != op.c) return op_error(op, "no state copy at position " + std::to_string(op.c));
  st->save_recurrent(snap.data());
  return core::Status();
}

// kResume: the state adopts the blocks of the node's path and loads its snapshot.
core::Status PipelineStage::resume(const model::StateOp& op) {
  model::SequenceState* st = state(op.seq, 0);
  auto snap = snapshots_.find(op.a);
  if (snap == snapshots_.end() || op.c <= 0) return op_error(op, "no snapshot to resume from");
  std::vector<int32_t> blocks;
  for (uint64_t n = op.a; n != 0;) {
    auto it = nodes_.find(n);
    if (it == nodes_.end() || it->second.block < 0) return op_error(op, "a resume path through an unknown node");
    blocks.push_back(it->second.block);
    n = it->second.parent;
  }
  std::reverse(blocks.begin(), blocks.end());
  if (int64_t(blocks.size()) * kernels::kKvBlock != op.c) return op_error(op, "a resume path of the wrong depth");
  st->reset();
  st->adopt(blocks, op.c);
  if (!snap->second.empty()) st->load_recurrent(snap->second.data());
  return core::Status();
}

// One of rank 0's state changes (model/state_op.h) on this rank's part of the states.
core::Status PipelineStage::apply_op(const model::StateOp& op) {
  using K = model::StateOp;
  const auto fail = [&](const std::string& why) { return op_error(op, why); };
  const bool needs_state = op.kind != K::kPool && op.kind != K::kNodeGone && op.kind != K::kSnapshotGone;
  if (needs_state && (op.seq < 0 || uint64_t(op.seq) >= pool_states_)) return fail("no state of the shared pool named");
  switch (op.kind) {
    case K::kPool:
      // A new engine on rank 0 (bench makes several): the last one's states and cache are gone.
      if (op.a == 0 || op.b == 0 || op.c <= 0) return fail("an empty pool");
      // MTP drafting (op.seq 1): the last rank's states keep the head's cache.
      if (op.seq == 1 && last())
        if (auto st = model_.enable_mtp(); !st.ok()) return fail(st.message());
      states_.erase(states_.begin(), states_.lower_bound(std::max<uint64_t>(op.b, pool_states_)));
      nodes_.clear();
      snapshots_.clear();
      captured_.clear();
      pool_ = model_.new_pool(int64_t(op.a), op.seq == 1 && last());
      pool_states_ = op.b;
      pool_capacity_ = op.c;
      return core::Status();
    case K::kReset:
      state(op.seq, 0)->reset();
      captured_.erase(uint64_t(op.seq));
      return core::Status();
    case K::kNode: {
      model::SequenceState* st = state(op.seq, 0);
      if (op.c < 0 || op.c >= st->blocks_held() || nodes_.count(op.a) || (op.b && !nodes_.count(op.b)))
        return fail("a node of a block the state does not hold, or of an unknown parent");
      const int32_t block = st->blocks()[size_t(op.c)];
      pool_->retain(block);
      nodes_[op.a] = {op.b, block};
      return core::Status();
    }
    case K::kNodeGone: {
      auto it = nodes_.find(op.a);
      if (it == nodes_.end()) return fail("no such node");
      if (it->second.block >= 0) pool_->release(it->second.block);  // -1: a part not loaded
      nodes_.erase(it);
      snapshots_.erase(op.a);
      return core::Status();
    }
    case K::kSnapshot: {
      model::SequenceState* st = state(op.seq, 0);
      std::vector<float>& snap = snapshots_[op.a];
      snap.resize(st->recurrent_bytes() / sizeof(float));
      st->save_recurrent(snap.data());
      return core::Status();
    }
    case K::kCaptured:
      return take_copy(op);
    case K::kSnapshotGone:
      snapshots_.erase(op.a);
      return core::Status();
    case K::kResume:
      return resume(op);
    case K::kFork: {
      auto src = states_.find(op.b);
      if (src == states_.end() || op.b == uint64_t(op.seq)) return fail("no state to fork from");
      model::SequenceState* st = state(op.seq, 0);
      st->reset();
      if (!st->fork_from(*src->second)) return fail("no KV block for the fork's copy");
      return core::Status();
    }
    default:
      return fail("an unknown state op");
  }
}

core::Status PipelineStage::catch_up(model::SequenceState* st, uint64_t id, int64_t pos0) {
  if (st->verify_pending()) {
    // Rank 0 committed the verification since: it stands after the rows it kept.
    const int64_t kept = pos0 - (st->pos() - st->verify_rows());
    if (kept < 1 || kept > st->verify_rows())
      return core::error("sequence " + std::to_string(id) + " keeps " + std::to_string(kept) + " of " +
                         std::to_string(st->verify_rows()) + " verified rows");
    model_.commit(st, kept);
  }
  if (st->pos() != pos0)
    return core::error("sequence " + std::to_string(id) + " stands at " + std::to_string(st->pos()) +
                       " here and at " + std::to_string(pos0) + " on rank 0");
  return core::Status();
}

// A draft message: its state ops here; the last rank drafts and sends the tokens to rank 0.
core::Status PipelineStage::apply_draft(const std::vector<uint8_t>& msg) {
  Reader rd{msg};
  rd.get<uint32_t>();
  for (const model::StateOp& op : read_ops(rd)) QWEN35_RETURN_IF_ERROR(apply_op(op));
  const int64_t draft_vocab = rd.get<int64_t>();
  const uint32_t n = rd.get<uint32_t>();
  constexpr size_t kRecord = 8 + 8 + 8 + 4 + 8;  // per sequence: id, position, rope delta, token, drafts
  if (!rd.ok || msg.size() - rd.at != n * kRecord) return core::error("a malformed draft message");
  if (!last()) return forward_to_next(msg);
  std::vector<model::DraftRequest> reqs(n);
  drafts_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t id = rd.get<uint64_t>();
    const int64_t pos0 = rd.get<int64_t>();
    const int64_t rope_delta = rd.get<int64_t>();
    const int32_t token = rd.get<int32_t>();
    const int64_t k = rd.get<int64_t>();
    if (!rd.ok) return core::error("a malformed draft message");
    auto st = states_.find(id);
    if (st == states_.end()) return core::error("drafts for sequence " + std::to_string(id) + ", unknown here");
    QWEN35_RETURN_IF_ERROR(catch_up(st->second.get(), id, pos0));
    st->second->set_rope_delta(rope_delta);  // the drafts turn as rank 0's state would
    reqs[i] = {st->second.get(), token, k, &drafts_[i]};
  }
  model_.set_draft_vocab(draft_vocab);
  QWEN35_RETURN_IF_ERROR(model_.draft(reqs));
  std::vector<uint8_t> back;
  for (const std::vector<int32_t>& d : drafts_) {
    put(back, uint32_t(d.size()));
    put(back, d.data(), d.size() * sizeof(int32_t));
  }
  bytes_sent_ += back.size();
  return comm_.send(0, kDraftsTag, back);
}

// One step on this rank's layers: the records to this rank's states, the rows through its
// layers, then on to the next rank, or (the last) the logits back to rank 0.
core::Status PipelineStage::apply(const std::vector<uint8_t>& msg) {
  Reader rd{msg};
  rd.get<uint32_t>();
  for (const model::StateOp& op : read_ops(rd)) QWEN35_RETURN_IF_ERROR(apply_op(op));
  const uint32_t n_seqs = rd.get<uint32_t>();
  const int64_t rows = rd.get<int64_t>();
  std::vector<Record> recs(n_seqs);
  for (Record& r : recs) {
    r.id = rd.get<uint64_t>();
    r.capacity = rd.get<int64_t>();
    r.n = rd.get<int64_t>();
    r.pos0 = rd.get<int64_t>();
    r.rope_delta = rd.get<int64_t>();
    r.all_logits = rd.get<uint8_t>();
    r.verify = rd.get<uint8_t>();
    r.has_positions = rd.get<uint8_t>();
    r.top_k = rd.get<int32_t>();
    if (!rd.ok || r.n < 1 || r.n > rows || r.top_k < 0) return core::error("a malformed step message");
    r.tokens.resize(size_t(r.n));
    rd.read(r.tokens.data(), r.tokens.size() * sizeof(int32_t));
    if (r.has_positions) {
      r.positions.resize(size_t(3 * r.n));
      rd.read(r.positions.data(), r.positions.size() * sizeof(int64_t));
    }
    const uint32_t n_captures = rd.get<uint32_t>();
    if (!rd.ok || n_captures > uint32_t(r.n)) return core::error("a malformed step message (its state copies)");
    r.captures.resize(n_captures);
    rd.read(r.captures.data(), r.captures.size() * sizeof(int64_t));
  }
  const size_t header = rd.at;
  const int64_t H = model_.config().hidden;
  if (!rd.ok || msg.size() - header != size_t(rows * H) * sizeof(float))
    return core::error("a malformed step message (its hidden rows)");
  std::vector<model::SequenceRows> batch(recs.size());
  std::vector<std::vector<model::StateCapture>> captures(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    Record& r = recs[i];
    model::SequenceState* st = state(int64_t(r.id), r.capacity);
    if (r.pos0 == 0) st->reset();  // a slot's next sequence (the engine reuses its states)
    QWEN35_RETURN_IF_ERROR(catch_up(st, r.id, r.pos0));
    st->set_rope_delta(r.rope_delta);
    // This step's copies replace the last step's, which rank 0 has taken (ops above) or not.
    auto& copies = captured_[r.id];
    copies.clear();
    const size_t floats = std::max<size_t>(1, st->recurrent_bytes() / sizeof(float));
    for (int64_t line : r.captures) {
      std::vector<float>& buf = copies[line];
      buf.assign(floats, 0.0f);
      captures[i].push_back({line, buf.data()});
    }
    batch[i] = model::SequenceRows{st, r.tokens, bool(r.all_logits), bool(r.verify), r.positions};
    batch[i].captures = captures[i];
  }
  hidden_.resize(size_t(rows * H));
  std::memcpy(hidden_.data(), msg.data() + header, hidden_.size() * sizeof(float));
  const model::RankShare& s = share();
  QWEN35_RETURN_IF_ERROR(model_.forward_layers(batch, s.first, s.end, &hidden_, &logits_));
  if (last()) {
    std::vector<uint8_t> back;
    pack_logits(logits_.data(), recs, model_.config().vocab, &back);
    bytes_sent_ += back.size();
    // Posted: this rank goes on to the step's next micro-batch while rank 0 computes.
    return comm_.post(0, kLogitsTag, std::move(back));
  }
  std::vector<uint8_t> out(msg.begin(), msg.begin() + std::ptrdiff_t(header));
  put(out, hidden_.data(), hidden_.size() * sizeof(float));
  return forward_to_next(std::move(out));
}

}  // namespace qwen35::dist
