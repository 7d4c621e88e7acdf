// bench --spec lookup|mtp: single-stream decode through the engine, plain and speculative, on
// one prompt, greedy. Runs: plain; speculative on the prompt as it is; and for lookup,
// speculative with the plain answer as the request's prediction (GenerationRequest::prediction),
// which stands for an answer that repeats its context (an edit, a quote): lookup then drafts
// almost every token.
// For each: generation tokens/s, tokens per step, acceptance per draft position, and whether the
// tokens equal plain decoding's (they must: drafted == plain).
#include "cli/bench_spec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct SpecRun {
  std::vector<int32_t> tokens;
  double gen_s = 0;  // from the first token to the last
  runtime::EngineStats stats;
  std::string error;
};

SpecRun run_once(model::Model& m, const runtime::SpecOptions& spec,
                 const std::vector<int32_t>& prompt, int64_t n_gen,
                 const std::vector<int32_t>& prediction,
                 const std::function<void(runtime::EngineOptions*)>& split) {
  runtime::EngineOptions eo;
  eo.parallel = 1;
  eo.ctx = int64_t(prompt.size()) + n_gen + 1;
  eo.step_tokens = 512;
  eo.spec = spec;
  if (split) split(&eo);
  runtime::Engine engine(m, eo);
  runtime::GenerationRequest g;
  g.prompt = prompt;
  g.max_tokens = n_gen;
  g.sampling.temperature = 0;
  g.prediction = prediction;
  runtime::SubmitError err;
  SpecRun r;
  auto stream = engine.submit(std::move(g), &err, &r.error);
  if (!stream) return r;
  runtime::StreamEvent ev;
  Clock::time_point first, last;
  while (stream->next(&ev, std::chrono::seconds(600))) {
    if (ev.kind == runtime::StreamEvent::kDone) {
      if (ev.finish_reason == "error") r.error = ev.error;
      break;
    }
    if (ev.kind != runtime::StreamEvent::kToken) continue;
    last = Clock::now();
    if (r.tokens.empty()) first = last;
    r.tokens.push_back(ev.sample.token);
  }
  r.gen_s = std::chrono::duration<double>(last - first).count();
  r.stats = engine.stats();
  return r;
}

}  // namespace

int bench_speculative(model::Model& m, const runtime::SpecOptions& spec,
                      const std::vector<int32_t>& prompt, int64_t n_gen, bool json,
                      const std::function<void(runtime::EngineOptions*)>& split) {
  run_once(m, runtime::SpecOptions{}, prompt, std::min<int64_t>(n_gen, 8), {}, split);  // warm-up
  const SpecRun plain = run_once(m, runtime::SpecOptions{}, prompt, n_gen, {}, split);
  if (!plain.error.empty()) return std::fprintf(stderr, "qwen35 bench: %s\n", plain.error.c_str()), 1;
  const bool lookup = spec.method == runtime::SpecMethod::kLookup;
  const SpecRun as_is = run_once(m, spec, prompt, n_gen, {}, split);
  const SpecRun predicted = lookup ? run_once(m, spec, prompt, n_gen, plain.tokens, split) : SpecRun{};
  for (const SpecRun* r : {&as_is, &predicted})
    if (!r->error.empty()) return std::fprintf(stderr, "qwen35 bench: %s\n", r->error.c_str()), 1;
  auto rate = [](const SpecRun& r) {
    return r.gen_s > 0 ? double(r.tokens.size() - 1) / r.gen_s : 0.0;
  };
  const double base = rate(plain);
  const char* names[2] = {lookup ? "lookup" : "mtp", "lookup + prediction"};
  const SpecRun* runs[2] = {&as_is, &predicted};
  const int n_runs = lookup ? 2 : 1;
  if (json) std::printf("{\"draft_tokens\": %d, \"n_gen\": %lld, \"plain_tok_s\": %.3f, \"runs\": [",
                        spec.draft_tokens, (long long)n_gen, base);
  else std::printf("plain: %.2f tok/s (%zu tokens)\n", base, plain.tokens.size());
  for (int i = 0; i < n_runs; ++i) {
    const SpecRun& r = *runs[i];
    const auto& st = r.stats;
    const bool same = r.tokens == plain.tokens;
    // Tokens per verification step: after the prompt's first token, every step emits its
    // accepted drafts plus one sampled token.
    const int64_t steps = int64_t(r.tokens.size()) - 1 - st.accepted_tokens;
    const double per_step = steps > 0 ? double(r.tokens.size() - 1) / double(steps) : 0;
    std::string acc;
    for (int p = 0; p < spec.draft_tokens; ++p) {
      const double a = st.drafted_at[size_t(p)] > 0
                           ? double(st.accepted_at[size_t(p)]) / double(st.drafted_at[size_t(p)])
                           : 0.0;
      char buf[32];
      std::snprintf(buf, sizeof buf, json ? "%s%.4f" : "%s%.2f", p ? (json ? ", " : " ") : "", a);
      acc += buf;
    }
    if (json) {
      std::printf("%s{\"name\": \"%s\", \"tok_s\": %.3f, \"speedup\": %.4f, \"drafted\": %lld, "
                  "\"accepted\": %lld, \"tokens_per_step\": %.4f, \"accepted_at\": [%s], "
                  "\"same_as_plain\": %s}",
                  i ? ", " : "", names[i], rate(r), base > 0 ? rate(r) / base : 0.0,
                  (long long)st.drafted_tokens, (long long)st.accepted_tokens, per_step,
                  acc.c_str(), same ? "true" : "false");
    } else {
      std::printf("%s (K=%d): %.2f tok/s = %.2fx plain | drafted %lld, accepted %lld (%.0f%%), "
                  "%.2f tokens per step | acceptance by draft position: %s | tokens %s plain\n",
                  names[i], spec.draft_tokens, rate(r), base > 0 ? rate(r) / base : 0.0,
                  (long long)st.drafted_tokens, (long long)st.accepted_tokens,
                  st.drafted_tokens ? 100.0 * double(st.accepted_tokens) / double(st.drafted_tokens) : 0.0,
                  per_step, acc.c_str(), same ? "==" : "DIFFER FROM");
    }
    if (!same) {
      if (json) std::printf("]}\n");
      std::fprintf(stderr, "qwen35 bench: speculative tokens differ from plain decoding\n");
      return 1;
    }
  }
  if (json) std::printf("]}\n");
  return 0;
}

}  // namespace qwen35::cli
