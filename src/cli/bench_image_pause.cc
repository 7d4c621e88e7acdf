// bench --image WxH --neighbour (cli/bench_image.h): what one image costs a text stream decoding
// beside it, through the engine's own step (runtime::Stepper, two slots, serve's step budget, no
// prefix cache). The time between two of the stream's tokens is one step: its decode row, and
// whatever else the step ran (the image's tower pieces, or a chunk of its prompt).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/bench_image.h"
#include "cli/commands.h"
#include "cli/sample_stats.h"
#include "kernels/cpu/matmul.h"
#include "runtime/stepper.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;
using OrderedJson = nlohmann::ordered_json;

constexpr int64_t kWarmTokens = 16;  // the stream's tokens before the image arrives

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A request the bench steps by hand: its stream, the tokens read from it, and how it ended.
struct Driven {
  std::shared_ptr<runtime::RequestStream> stream;
  int64_t tokens = 0;
  bool done = false;
  std::string error;
};

core::Status admit(runtime::Stepper& st, runtime::GenerationRequest req, Driven* d) {
  std::string why;
  if (!st.validate(req, &why)) return core::error("[bench] " + why);
  *d = Driven{};
  d->stream = std::make_shared<runtime::RequestStream>(int64_t(req.prompt.size()));
  std::deque<std::unique_ptr<runtime::Sequence>> waiting;
  waiting.push_back(std::make_unique<runtime::Sequence>(std::move(req), d->stream, st.options().spec));
  st.admit(&waiting);
  if (!waiting.empty()) return core::error("[bench] a request could not be admitted");
  return core::Status();
}

// The tokens that came to d since the last call.
int64_t drain(Driven* d) {
  int64_t n = 0;
  runtime::StreamEvent ev;
  while (d->stream->next(&ev, std::chrono::milliseconds(0))) {
    if (ev.kind == runtime::StreamEvent::kToken) ++n;
    if (ev.kind != runtime::StreamEvent::kDone) continue;
    d->done = true;
    if (ev.finish_reason == "error") d->error = ev.error;
  }
  d->tokens += n;
  return n;
}

// What one step of the image's run did, for the longest gap's account.
struct StepAccount {
  double gap_ms = 0;                    // since the stream's token before
  double tower_ms = 0, forward_ms = 0;  // the step's tower pieces and its forward call
  double tower_flops = 0, work_flops = 0;
  int64_t prompt_rows = 0;  // prompt tokens the step read
  int64_t index = 0;        // the step's number since the image arrived
};

struct PauseRun {
  std::vector<double> before, during;  // the stream's gaps (ms): before the image, while it goes through
  int64_t steps = 0, tower_steps = 0, steps_without_token = 0;
  double tower_ms = 0, most_tower = 0, most_work = 0, ttft_ms = 0;
  int64_t step_tokens = 0;  // the stepper's row count, normalized
  double budget = 0;        // a step's budget of work, in multiply-adds × 2 (Stepper::step_budget)
  StepAccount longest;      // the step of the longest gap while the image went through
};

core::Result<PauseRun> pause_run(model::Model& m, const runtime::EngineOptions& eo,
                                 const runtime::GenerationRequest& text, const runtime::GenerationRequest& image) {
  runtime::Stepper st(m, eo);
  PauseRun r;
  r.step_tokens = st.options().step_tokens;
  r.budget = st.step_budget();
  Driven stream, im;
  QWEN35_RETURN_IF_ERROR(admit(st, text, &stream));
  bool image_in = false, skip_gap = true;  // no gap before the stream's first token
  auto last = Clock::now(), t0 = last;
  while (!im.done) {
    if (!image_in && stream.tokens >= kWarmTokens) {
      QWEN35_RETURN_IF_ERROR(admit(st, image, &im));
      image_in = true;
      t0 = Clock::now();
    }
    runtime::StepOutput out;
    const auto t_step = Clock::now();
    st.step(&out);
    const double step_ms = ms(Clock::now() - t_step);
    if (out.steps == 0) st.wait_for_sample();
    for (auto& [s, ev] : out.finished) s->push(std::move(ev));
    const auto now = Clock::now();
    const int64_t got = drain(&stream);
    if (image_in) {
      drain(&im);
      ++r.steps;
      r.tower_ms += out.tower_s * 1e3;
      if (out.tower_flops > 0) ++r.tower_steps;
      r.most_tower = std::max(r.most_tower, out.tower_flops);
      r.most_work = std::max(r.most_work, out.work_flops);
      if (got == 0 && !stream.done) ++r.steps_without_token;
    }
    if (got > 0) {
      const double gap = ms(now - last);
      if (!skip_gap && image_in && gap > r.longest.gap_ms)
        r.longest = {gap, out.tower_s * 1e3, step_ms - out.tower_s * 1e3, out.tower_flops, out.work_flops,
                     out.prompt, r.steps};
      if (!skip_gap) (image_in ? r.during : r.before).push_back(gap);
      skip_gap = false;
      last = now;
    }
    if (!im.error.empty()) return core::error("[bench] the image request: " + im.error);
    if (!stream.error.empty()) return core::error("[bench] the text request: " + stream.error);
    if (stream.done && !im.done) {  // out of context: a new stream (its first gap is its prefill)
      QWEN35_RETURN_IF_ERROR(admit(st, text, &stream));
      skip_gap = true;
    }
  }
  r.ttft_ms = ms(Clock::now() - t0);
  return r;
}

}  // namespace

int bench_image_neighbour(model::Model& m, const LoadOptions& lo, core::ThreadPool* pool,
                          const image::ProcessorConfig& pc, const tokenizer::Tokenizer& tok,
                          const tmpl::ChatTemplate& t, const ImageBenchOptions& o) {
  auto patches = image::preprocess(synthetic_image(o.width, o.height), pc, pool);
  if (!patches.ok()) return fail("bench", patches.message());
  const model::VisionConfig& vc = m.config().vision;
  const int64_t tokens = patches->grid_t * (patches->grid_h / vc.merge) * (patches->grid_w / vc.merge);
  runtime::PromptImage pi;
  pi.grid = {patches->grid_t, patches->grid_h, patches->grid_w};
  pi.hash = uint64_t(o.width) << 32 | uint64_t(o.height);
  // Each run gets the patch rows afresh (the tower's PendingImage keeps its rows once encoded).
  const std::vector<float> rows = std::move(patches->rows);
  auto image = image_request(tok, t, m, o.question, pi, tokens);
  if (!image.ok()) return fail("bench", image.message());
  image->max_tokens = 1;
  auto words = tok.encode("And it came to pass, when the image was sent, that the text went on.");
  if (!words.ok()) return fail("bench", words.message());
  runtime::EngineOptions eo;  // serve's defaults, two slots, no prefix cache
  eo.parallel = 2;
  eo.max_queue = 0;
  eo.step_tokens = o.step_tokens;
  eo.ctx = std::max<int64_t>(int64_t(image->prompt.size()) + 64, 4096);
  runtime::GenerationRequest text;
  text.prompt = *words;
  text.sampling.temperature = 0;
  text.max_tokens = eo.ctx - int64_t(text.prompt.size()) - 1;
  OrderedJson runs = OrderedJson::array();
  int64_t step_tokens = 0;
  double budget = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    image->images[0].pending = std::make_shared<runtime::PendingImage>(rows);
    auto r = pause_run(m, eo, text, *image);
    if (!r.ok()) return fail("bench", r.message());
    step_tokens = r->step_tokens;
    budget = r->budget;
    const double before = median(r->before), during = median(r->during);
    const double longest = r->during.empty() ? 0 : *std::max_element(r->during.begin(), r->during.end());
    runs.push_back({{"gap_ms_median_before", before},
                    {"gap_ms_median_during", during},
                    {"gap_ms_max_during", longest},
                    {"max_over_median_during", during > 0 ? longest / during : 0.0},
                    {"max_over_median_before", before > 0 ? longest / before : 0.0},
                    {"steps", r->steps},
                    {"steps_without_token", r->steps_without_token},
                    {"tower_steps", r->tower_steps},
                    {"tower_ms", r->tower_ms},
                    {"tower_flops_max_over_budget", r->most_tower / r->budget},
                    {"work_max_over_budget", r->most_work / r->budget},
                    {"longest_step",
                     {{"index", r->longest.index},
                      {"gap_ms", r->longest.gap_ms},
                      {"tower_ms", r->longest.tower_ms},
                      {"rest_ms", r->longest.forward_ms},
                      {"prompt_rows", r->longest.prompt_rows},
                      {"tower_over_budget", r->longest.tower_flops / r->budget},
                      {"work_over_budget", r->longest.work_flops / r->budget}}},
                    {"ttft_ms", r->ttft_ms}});
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const std::string isa = lo.backend == "ref" ? "scalar-reference" : kernels::cpu::simd_target();
  OrderedJson j = {{"model", lo.model_dir},
            {"threads", pool->size()},
            {"isa", isa},
            {"mode", lo.fast ? "fast-int8" : "exact"},
            {"image_width", o.width},
            {"image_height", o.height},
            {"patches", pi.grid[1] * pi.grid[2]},
            {"image_tokens", tokens},
            {"tower_depth", vc.depth},
            {"tower_hidden", vc.hidden},
            {"step_tokens", step_tokens},
            {"step_budget_flops", budget},
            {"runs", runs},
            {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0}};
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model: %s  threads: %d  isa: %s  mode: %s\n", lo.model_dir.c_str(), pool->size(), isa.c_str(),
              lo.fast ? "fast-int8" : "exact");
  std::printf("tower: %lld blocks, width %lld; image %lldx%lld: %lld patches, %lld tokens; step budget %lld tokens\n",
              (long long)vc.depth, (long long)vc.hidden, (long long)o.width, (long long)o.height,
              (long long)(pi.grid[1] * pi.grid[2]), (long long)tokens, (long long)step_tokens);
  for (const OrderedJson& r : runs) {
    std::printf("text stream's gap: median %.1f ms before the image; while it goes through: median %.1f ms, "
                "longest %.1f ms (%.1fx the median, %.1fx before); %lld steps (%lld with tower work, at most "
                "%.2f of the budget; any step's work at most %.2f; %lld without a token), tower %.0f ms, image's "
                "first token %.0f ms\n",
                r["gap_ms_median_before"].get<double>(), r["gap_ms_median_during"].get<double>(),
                r["gap_ms_max_during"].get<double>(), r["max_over_median_during"].get<double>(),
                r["max_over_median_before"].get<double>(), (long long)r["steps"].get<int64_t>(),
                (long long)r["tower_steps"].get<int64_t>(), r["tower_flops_max_over_budget"].get<double>(),
                r["work_max_over_budget"].get<double>(), (long long)r["steps_without_token"].get<int64_t>(),
                r["tower_ms"].get<double>(), r["ttft_ms"].get<double>());
    const OrderedJson& l = r["longest_step"];
    std::printf("  the longest gap: step %lld, tower %.1f ms (%.2f of the budget), the rest of the step %.1f ms "
                "(%lld prompt rows; the step's work %.2f of the budget)\n",
                (long long)l["index"].get<int64_t>(), l["tower_ms"].get<double>(),
                l["tower_over_budget"].get<double>(), l["rest_ms"].get<double>(),
                (long long)l["prompt_rows"].get<int64_t>(), l["work_over_budget"].get<double>());
  }
  return 0;
}

}  // namespace qwen35::cli
