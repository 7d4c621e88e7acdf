#include "cli/generation.h"

#include <algorithm>
#include <chrono>

#include "tokenizer/stop_matcher.h"

namespace qwen35::cli {

using Clock = std::chrono::steady_clock;

Generation::Generation(model::Model& model, const tokenizer::Tokenizer& tok, int64_t ctx)
    : model_(model), tok_(tok), state_(model.new_state(ctx)) {}

void Generation::reset() {
  state_->reset();
  history_.clear();
}

core::Result<GenerationStats> Generation::run(std::span<const int32_t> prompt, const runtime::SamplingParams& sp,
                                              const std::vector<int32_t>& eos_ids,
                                              const std::vector<std::string>& stops, int64_t max_tokens,
                                              const std::atomic<bool>* interrupt,
                                              const std::function<void(const std::string&)>& emit) {
  GenerationStats st;
  if (prompt.empty()) return core::error("the prompt is empty");
  if (state_->pos() + int64_t(prompt.size()) >= state_->capacity())
    return core::error("the prompt (" + std::to_string(state_->pos() + int64_t(prompt.size())) +
                       " tokens) does not fit the context of " + std::to_string(state_->capacity()) + " tokens");
  auto t0 = Clock::now();
  // Prefill in pieces on the 64-token grid so a long prompt's workspace stays bounded.
  constexpr size_t kPiece = 512;
  for (size_t p = 0; p < prompt.size(); p += kPiece) {
    const size_t len = std::min(kPiece, prompt.size() - p);
    model::SequenceRows rows{state_.get(), prompt.subspan(p, len), false};
    QWEN35_RETURN_IF_ERROR(model_.forward(std::span<const model::SequenceRows>(&rows, 1), &logits_));
  }
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  st.prompt_tokens = int64_t(prompt.size());
  st.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  runtime::Sampler sampler(sp, model_.config().vocab);
  sampler.add_prompt(history_);
  tokenizer::StreamDecoder dec(tok_, /*skip_special=*/false);
  tokenizer::StopMatcher stop(stops);
  auto t1 = Clock::now();
  st.finish_reason = "length";
  for (int64_t i = 0; max_tokens < 0 || i < max_tokens; ++i) {
    if (interrupt && interrupt->load()) {
      st.finish_reason = "interrupted";
      break;
    }
    const int32_t tok = sampler.sample(logits_.data()).token;
    if (std::find(eos_ids.begin(), eos_ids.end(), tok) != eos_ids.end()) {
      st.finish_reason = "stop";
      break;
    }
    if (state_->pos() + 1 > state_->capacity()) break;  // context full: "length"
    // The state always holds every token shown, so a chat can continue from it.
    history_.push_back(tok);
    model::SequenceRows rows{state_.get(), std::span<const int32_t>(&history_.back(), 1), false};
    QWEN35_RETURN_IF_ERROR(model_.forward(std::span<const model::SequenceRows>(&rows, 1), &logits_));
    ++st.generated_tokens;
    bool stopped = false;
    const std::string text = stop.push(dec.push(tok), &stopped);
    if (!text.empty()) emit(text);
    if (stopped) {
      st.finish_reason = "stop";
      break;
    }
  }
  bool stopped = false;
  const std::string tail = stop.push(dec.flush(), &stopped);
  if (!tail.empty()) emit(tail);
  if (!stopped) {
    const std::string rest = stop.flush();
    if (!rest.empty()) emit(rest);
  }
  st.generation_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

}  // namespace qwen35::cli
