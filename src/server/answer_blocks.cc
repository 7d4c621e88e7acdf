#include "server/answer_blocks.h"

namespace qwen35::server {
namespace {

bool blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') return false;
  return true;
}

void emit(std::vector<BlockEvent>* ev, BlockEvent::Op op, size_t index, std::string text = {}) {
  if (ev) ev->push_back(BlockEvent{op, index, std::move(text)});
}

}  // namespace

AnswerBlocks::AnswerBlocks(bool in_reasoning, int max_calls, int32_t think_end)
    : reasoning_seen_(in_reasoning), max_calls_(max_calls), think_end_(think_end) {}

int64_t AnswerBlocks::reasoning_tokens() const { return reasoning_seen_ ? before_answer_ : 0; }

void AnswerBlocks::close_open(std::vector<BlockEvent>* ev) {
  if (!open_) return;
  open_ = false;
  emit(ev, BlockEvent::kClose, blocks_.size() - 1);
}

void AnswerBlocks::piece(AnswerBlock::Kind kind, std::string_view text,
                         std::vector<BlockEvent>* ev) {
  if (text.empty()) return;
  if (open_ && blocks_.back().kind == kind) {
    if (pending_kind_ != kind) pending_.clear();  // whitespace of another kind in between
    blocks_.back().text += text;
    emit(ev, BlockEvent::kAppend, blocks_.size() - 1, std::string(text));
    return;
  }
  if (blank(text)) {
    if (pending_kind_ != kind) pending_.clear();
    pending_kind_ = kind;
    pending_ += text;
    return;
  }
  close_open(ev);
  std::string all = pending_kind_ == kind ? pending_ : std::string();
  pending_.clear();
  all += text;
  blocks_.push_back(AnswerBlock{kind, all, {}});
  open_ = true;
  emit(ev, BlockEvent::kOpen, blocks_.size() - 1);
  emit(ev, BlockEvent::kAppend, blocks_.size() - 1, std::move(all));
}

void AnswerBlocks::push(const Delta& d, std::vector<BlockEvent>* ev) {
  if (finished_) return;
  if (!d.reasoning.empty() && !answered_) reasoning_seen_ = true;  // the model opened <think>
  if (think_end_ >= 0) {
    for (const auto& s : d.samples) {
      if (think_closed_) break;
      ++before_answer_;
      think_closed_ = s.token == think_end_;
    }
  }
  if (!answered_ && (!d.text.empty() || !d.calls.empty())) answered_ = true;
  if (!answered_ && think_end_ < 0) before_answer_ += int64_t(d.samples.size());
  piece(AnswerBlock::kReasoning, d.reasoning, ev);
  piece(AnswerBlock::kText, d.text, ev);
  for (const auto& call : d.calls) {
    close_open(ev);
    pending_.clear();
    if (max_calls_ >= 0 && n_calls_ >= max_calls_) continue;
    ++n_calls_;
    blocks_.push_back(AnswerBlock{AnswerBlock::kCall, "", call});
    emit(ev, BlockEvent::kOpen, blocks_.size() - 1);
    emit(ev, BlockEvent::kClose, blocks_.size() - 1);
  }
}

void AnswerBlocks::finish(std::vector<BlockEvent>* ev) {
  if (finished_) return;
  finished_ = true;
  close_open(ev);
  if (blocks_.empty()) {
    blocks_.push_back(
        AnswerBlock{AnswerBlock::kText, pending_kind_ == AnswerBlock::kText ? pending_ : "", {}});
    emit(ev, BlockEvent::kOpen, 0);
    if (!blocks_[0].text.empty()) emit(ev, BlockEvent::kAppend, 0, blocks_[0].text);
    emit(ev, BlockEvent::kClose, 0);
  }
  pending_.clear();
}

std::string AnswerBlocks::joined(AnswerBlock::Kind kind) const {
  std::string out;
  for (const auto& b : blocks_)
    if (b.kind == kind) out += b.text;
  return out;
}

}  // namespace qwen35::server
