#include "cli/bench_image.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/bench_steps.h"
#include "cli/commands.h"
#include "cli/image_prompt.h"
#include "cli/model_assets.h"
#include "cli/sample_stats.h"
#include "image/processor.h"
#include "kernels/cpu/matmul.h"
#include "runtime/image_encoder.h"
#include "runtime/stepper.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;
using OrderedJson = nlohmann::ordered_json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What one image costs: the processor, then the tower.
struct Encoded {
  runtime::PromptImage image;
  int64_t tokens = 0;
  double preprocess_ms = 0, tower_ms = 0;
};

core::Result<Encoded> encode(model::Model& m, const image::ProcessorConfig& pc, core::ThreadPool* pool,
                             const image::Image& im) {
  Encoded e;
  auto t0 = Clock::now();
  QWEN35_ASSIGN_OR_RETURN(image::Patches p, image::preprocess(im, pc, pool));
  e.preprocess_ms = ms_since(t0);
  const int64_t merge = m.config().vision.merge;
  e.tokens = p.grid_t * (p.grid_h / merge) * (p.grid_w / merge);
  auto rows = std::make_shared<std::vector<float>>(size_t(e.tokens * m.config().hidden));
  t0 = Clock::now();
  QWEN35_RETURN_IF_ERROR(m.encode_image(p.rows.data(), p.grid_t, p.grid_h, p.grid_w, rows->data()));
  e.tower_ms = ms_since(t0);
  e.image.grid = {p.grid_t, p.grid_h, p.grid_w};
  e.image.hash = uint64_t(im.width) << 32 | uint64_t(im.height);  // the prefix cache is off
  e.image.rows = std::move(rows);
  return e;
}

// The repetitions' times and what the last one encoded.
struct ImageMeasured {
  std::vector<double> pre, tower, prefill, ttft;  // ms per repetition
  Encoded last;
  int64_t prompt_tokens = 0;
};

// A warm-up pass of the whole path at the processor's smallest image (the code paths and the
// engine's scratch, without a second run of a large image: the tower's scratch still grows on
// the first repetition), then `o.reps` passes at W×H.
core::Result<ImageMeasured> measure(model::Model& m, const image::ProcessorConfig& proc, core::ThreadPool* pool,
                               const tokenizer::Tokenizer& tok, const tmpl::ChatTemplate& t,
                               const ImageBenchOptions& o) {
  const int64_t side = std::max<int64_t>(proc.factor(), 1);
  const image::Image small = synthetic_image(side, side), im = synthetic_image(o.width, o.height);
  ImageMeasured r;
  std::unique_ptr<runtime::Stepper> stepper;
  for (int rep = -1; rep < o.reps; ++rep) {
    QWEN35_ASSIGN_OR_RETURN(Encoded e, encode(m, proc, pool, rep < 0 ? small : im));
    QWEN35_ASSIGN_OR_RETURN(runtime::GenerationRequest req, image_request(tok, t, m, o.question, e.image, e.tokens));
    if (!stepper || rep == 0) {  // sized for the prompt: the warm-up's, then the measured one
      runtime::EngineOptions eo;  // serve's defaults, one slot, no prefix cache
      eo.parallel = 1;
      eo.max_queue = 0;
      eo.ctx = int64_t(req.prompt.size()) + 64;
      stepper = std::make_unique<runtime::Stepper>(m, eo);
    }
    r.prompt_tokens = int64_t(req.prompt.size());
    QWEN35_ASSIGN_OR_RETURN(double s, first_token_seconds(*stepper, std::move(req)));
    if (rep < 0) continue;
    r.pre.push_back(e.preprocess_ms);
    r.tower.push_back(e.tower_ms);
    r.prefill.push_back(s * 1e3);
    r.ttft.push_back(e.preprocess_ms + e.tower_ms + s * 1e3);
    r.last = std::move(e);
  }
  return r;
}

void report(const model::Model& m, const LoadOptions& lo, int threads, const ImageBenchOptions& o,
            const ImageMeasured& r) {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const Stats ps = stats(r.pre), ts = stats(r.tower), fs = stats(r.prefill), tt = stats(r.ttft);
  const model::VisionConfig& vc = m.config().vision;
  const std::string isa = lo.backend == "ref" ? "scalar-reference" : kernels::cpu::simd_target();
  const Encoded& last = r.last;
  const int64_t prompt_tokens = r.prompt_tokens;
  const int64_t rh = last.image.grid[1] * vc.patch, rw = last.image.grid[2] * vc.patch;
  OrderedJson j = {{"model", lo.model_dir},
            {"threads", threads},
            {"isa", isa},
            {"mode", lo.fast ? "fast-int8" : "exact"},
            {"repetitions", o.reps},
            {"image_width", o.width},
            {"image_height", o.height},
            {"resized_width", rw},
            {"resized_height", rh},
            {"patches", last.image.grid[1] * last.image.grid[2]},
            {"image_tokens", last.tokens},
            {"tower_depth", vc.depth},
            {"tower_hidden", vc.hidden},
            {"preprocess_ms", ps.median},
            {"preprocess_ms_min", ps.min},
            {"preprocess_ms_max", ps.max},
            {"tower_ms", ts.median},
            {"tower_ms_min", ts.min},
            {"tower_ms_max", ts.max},
            {"prompt_tokens", prompt_tokens},
            {"prefill_ms", fs.median},
            {"prefill_tok_s", fs.median > 0 ? 1e3 * double(prompt_tokens) / fs.median : 0.0},
            {"ttft_ms", tt.median},
            {"ttft_ms_min", tt.min},
            {"ttft_ms_max", tt.max},
            {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0}};
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("model: %s  threads: %d  isa: %s  mode: %s\n", lo.model_dir.c_str(), threads, isa.c_str(),
              lo.fast ? "fast-int8" : "exact");
  std::printf("tower: %lld blocks, width %lld\n", (long long)vc.depth, (long long)vc.hidden);
  std::printf("image %lldx%lld -> %lldx%lld: %lld patches, %lld tokens\n", (long long)o.width,
              (long long)o.height, (long long)rw, (long long)rh, (long long)(last.image.grid[1] * last.image.grid[2]),
              (long long)last.tokens);
  std::printf("preprocess: %10.1f ms (min %.1f, max %.1f over %d)\n", ps.median, ps.min, ps.max, o.reps);
  std::printf("tower:      %10.1f ms (min %.1f, max %.1f over %d)\n", ts.median, ts.min, ts.max, o.reps);
  std::printf("prefill of the image + question (%lld tokens): %.1f ms (%.1f tok/s)\n", (long long)prompt_tokens,
              fs.median, fs.median > 0 ? 1e3 * double(prompt_tokens) / fs.median : 0.0);
  std::printf("time to first token (preprocess + tower + prefill): %.1f ms (min %.1f, max %.1f)\n", tt.median,
              tt.min, tt.max);
  std::printf("peak RSS: %.1f MB\n", double(ru.ru_maxrss) / 1024.0);
}

}  // namespace

// The pixels do not change the time, but a flat image would hide nothing either way.
image::Image synthetic_image(int64_t w, int64_t h) {
  image::Image im{w, h, std::vector<uint8_t>(size_t(w * h * 3))};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const uint64_t s = uint64_t(y * w + x) * 0x9e3779b97f4a7c15ull;
      uint8_t* p = &im.rgb[size_t((y * w + x) * 3)];
      p[0] = uint8_t(x * 255 / std::max<int64_t>(1, w - 1));
      p[1] = uint8_t(y * 255 / std::max<int64_t>(1, h - 1));
      p[2] = uint8_t(s >> 56);
    }
  return im;
}

core::Result<runtime::GenerationRequest> image_request(const tokenizer::Tokenizer& tok, const tmpl::ChatTemplate& t,
                                                       const model::Model& m, const std::string& question,
                                                       const runtime::PromptImage& image, int64_t tokens) {
  OrderedJson messages = OrderedJson::array({{{"role", "user"}, {"content", user_content(1, question)}}});
  QWEN35_ASSIGN_OR_RETURN(std::string text, t.render(messages, nullptr, true, OrderedJson::object()));
  QWEN35_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(text));
  runtime::GenerationRequest req;
  req.image_token = image_token_id(m.config(), tok);
  const int64_t n[1] = {tokens};
  QWEN35_ASSIGN_OR_RETURN(req.prompt, expand_image_tokens(ids, req.image_token, n));
  req.images = {image};
  req.sampling.temperature = 0;
  return req;
}

bool parse_image_size(const std::string& s, int64_t* width, int64_t* height) {
  long long w = 0, h = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "%lldx%lld%n", &w, &h, &used) != 2 || size_t(used) != s.size()) return false;
  if (w <= 0 || h <= 0 || w > 100000 || h > 100000) return false;
  *width = w;
  *height = h;
  return true;
}

int bench_image(model::Model& m, const LoadOptions& lo, core::ThreadPool* pool, const ImageBenchOptions& o) {
  if (!m.has_vision()) {
    fail("bench", "--image: " + m.weights().vision_problem);
    return 2;
  }
  // The processor settings as serve takes them: the checkpoint's file, checked by the encoder.
  auto pc = runtime::read_processor_config(lo.model_dir);
  if (!pc.ok()) return fail("bench", pc.message());
  runtime::ImageEncoderOptions eopts;
  eopts.processor = *pc;
  const runtime::ImageEncoder encoder(m, eopts);
  if (!encoder.available()) {
    fail("bench", "--image: " + encoder.why_not());
    return 2;
  }
  auto tok = load_tokenizer(lo.model_dir);
  if (!tok.ok()) return fail("bench", tok.message());
  auto tmpl = load_chat_template(lo.model_dir);
  if (!tmpl.ok()) return fail("bench", tmpl.message());
  if (o.neighbour) return bench_image_neighbour(m, lo, pool, encoder.processor(), *tok, *tmpl, o);
  auto r = measure(m, encoder.processor(), pool, *tok, *tmpl, o);
  if (!r.ok()) return fail("bench", r.message());
  report(m, lo, pool->size(), o, *r);
  return 0;
}

}  // namespace qwen35::cli
