#include "cli/turn.h"

#include <chrono>

#include "tokenizer/stop_matcher.h"

namespace qwen35::cli {
namespace {

using Clock = runtime::RequestTiming::Clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

core::Result<TurnStats> run_turn(runtime::Engine& engine, runtime::GenerationRequest req,
                                 const tokenizer::Tokenizer& tok,
                                 const std::vector<std::string>& stops,
                                 const std::atomic<bool>& interrupt,
                                 const std::function<void(const std::string&)>& emit) {
  const int64_t n_prompt = int64_t(req.prompt.size());
  runtime::SubmitError err;
  std::string message;
  const runtime::EngineStats before = engine.stats();  // the engine runs this turn alone
  auto stream = engine.submit(std::move(req), &err, &message);
  if (!stream) return core::error(message);
  tokenizer::StreamDecoder dec(tok, /*skip_special=*/false);
  tokenizer::StopMatcher stop(stops);
  TurnStats st;
  bool showing = true;  // false once a stop string or an interrupt ended what is shown
  Clock::time_point end;
  runtime::StreamEvent ev;
  for (;;) {
    if (showing && interrupt.load()) {
      stream->cancel();  // the engine closes the stream at its next step
      showing = false;
      st.finish_reason = "interrupted";
      end = Clock::now();
    }
    if (!stream->next(&ev, std::chrono::milliseconds(50))) continue;
    if (ev.kind == runtime::StreamEvent::kDone) break;
    if (ev.kind != runtime::StreamEvent::kToken || !showing) continue;
    ++st.generated_tokens;
    bool stopped = false;
    const std::string text = stop.push(dec.push(ev.sample.token), &stopped);
    if (!text.empty()) emit(text);
    if (stopped) {
      stream->cancel();
      showing = false;
      st.finish_reason = "stop";
      end = Clock::now();
    }
  }
  if (showing) {
    end = Clock::now();
    if (ev.finish_reason == "error") return core::error(ev.error);
    st.finish_reason = ev.finish_reason == "cancelled" ? "interrupted" : ev.finish_reason;
  }
  bool stopped = false;
  const std::string tail = stop.push(dec.flush(), &stopped);
  if (!tail.empty()) emit(tail);
  if (!stop.stopped()) {
    const std::string rest = stop.flush();
    if (!rest.empty()) emit(rest);
  }
  const runtime::EngineStats after = engine.stats();
  st.drafted = after.drafted_tokens - before.drafted_tokens;
  st.accepted = after.accepted_tokens - before.accepted_tokens;
  const runtime::RequestTiming t = stream->timing();
  st.prompt_tokens = n_prompt - t.prompt_reused;
  if (t.prompt_done) {
    st.prompt_seconds = seconds(t.admitted, t.prompt_read);
    st.generation_seconds = seconds(t.prompt_read, end);
  }
  return st;
}

}  // namespace qwen35::cli
