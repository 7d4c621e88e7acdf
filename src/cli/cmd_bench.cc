// qwen35 bench -m DIR [-p 512] [-n 128] [-t THREADS] [-r REPS] [--verify K] [--json]
// qwen35 bench -m DIR --image WxH [--neighbour] [-r REPS] [--json]: the image path (cli/bench_image.h)
// Prompt processing (pp) and generation (tg) tokens/s like llama-bench, plus the bytes of weights
// streamed per generated token, the achieved GB/s, the machine's memory read bandwidth measured in
// the same process, time to first token and peak RSS. Medians (and min/max) over the repetitions;
// a hash of the prompt's last logits so backends, modes and builds can be compared. Generation
// (tg, --verify, --spec mtp with --verify) runs through the engine's own step
// (cli/bench_steps.h), so what is timed is what serves.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/flags.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "cli/bench_image.h"
#include "cli/bench_spec.h"
#include "cli/bench_steps.h"
#include "cli/commands.h"
#include "cli/device_select.h"
#include "cli/model_assets.h"
#include "cli/model_loader.h"
#include "cli/pipeline_setup.h"
#include "cli/sample_stats.h"
#include "cli/spec_flags.h"
#include "grammar/json_schema.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "model/depth_fill.h"
#include "runtime/stepper.h"
#include "runtime/sampler.h"
#include "server/structured.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The seed of --depth-fill random's rows and state (any fixed value: the same bytes each run).
constexpr uint64_t kDepthFillSeed = 0x6465707468;  // "depth"

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// FNV-1a over the bytes of the floats.
uint64_t fnv1a(const float* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Read bandwidth (GB/s): every thread sums its share of a buffer far larger than the caches. The
// buffer sits on huge pages where the kernel offers them, as the weights do (--load anon), so the
// probe measures what the machine can stream rather than its page walks.
double measure_bandwidth(core::ThreadPool& pool) {
  const size_t n = size_t(512) << 20 >> 3;  // 512 MiB of uint64
  constexpr size_t kHuge = size_t(2) << 20;
  void* raw = nullptr;
  if (posix_memalign(&raw, kHuge, n * 8) != 0) return 0;
  std::unique_ptr<void, decltype(&std::free)> owner(raw, &std::free);
  madvise(raw, n * 8, MADV_HUGEPAGE);
  auto* buf = static_cast<uint64_t*>(raw);
  pool.parallel_for(n, [&](size_t b, size_t e, int) {
    for (size_t i = b; i < e; ++i) buf[i] = i;
  }, 1 << 16);
  std::vector<double> runs;
  std::vector<uint64_t> sums(size_t(pool.size()) * 8);
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    pool.parallel_for(n, [&](size_t b, size_t e, int t) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      for (; i < e; ++i) s0 += buf[i];
      sums[size_t(t) * 8] += s0 + s1 + s2 + s3;
    }, 1 << 16);
    runs.push_back(double(n * 8) / seconds_since(t0) / 1e9);
  }
  if (std::accumulate(sums.begin(), sums.end(), uint64_t(0)) == 42) std::fputs("", stderr);
  return median(runs);
}

// The bandwidth probe runs in a child process so its 512 MiB buffer does not count in this
// process's peak RSS (which the bench reports for the model). Call it while this process is still
// single-threaded: a fork taken while other threads hold allocator locks can deadlock the child.
double measure_bandwidth_in_child(int threads) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    core::ThreadPool pool(threads);
    const double bw = measure_bandwidth(pool);
    if (write(fds[1], &bw, sizeof bw) != sizeof bw) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double bw = 0;
  if (pid < 0 || read(fds[0], &bw, sizeof bw) != sizeof bw) bw = 0;
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return bw;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  flags::App app{"Prompt and generation throughput, with the memory bandwidth roofline", "qwen35 bench"};
  LoadOptions lo;
  int64_t n_prompt = 512, n_gen = 128, depth = 0;
  int reps = 3;
  int64_t batch = 1, verify = 0;
  bool json = false;
  app.add_option("-m,--model", lo.model_dir, "checkpoint directory or .gguf file")->required();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (pp test; 0 skips)");
  app.add_option("-n,--n-gen", n_gen, "generated tokens (tg test; 0 skips)");
  app.add_option("-d,--depth", depth, "tokens already in the context before each test (prefilled, not timed)");
  std::string depth_fill = "prefill";
  app.add_option("--depth-fill", depth_fill,
                 "how the -d context is made: prefill (computed from token ids) or random "
                 "(pseudo-random KV rows, encoded in the KV type as a prefill writes them, and "
                 "recurrent state, written straight into the state: the bytes decode reads at "
                 "that depth in seconds; -d a multiple of 64)");
  app.add_option("-t,--threads", lo.threads, "threads (0 = all cores)");
  app.add_option("-r,--repetitions", reps, "repetitions (medians are reported)");
  app.add_option("-b,--batch", batch, "sequences decoding together in the tg test (aggregate tokens/s)");
  app.add_option("--load", lo.load_mode, kLoadModeHelp);
  app.add_option("--device", lo.device, flags::kDeviceHelp);
  app.add_option("--isa", lo.isa, "cap run-time SIMD dispatch at this target (e.g. AVX2, SSE4) to measure older CPUs");
  app.add_flag("--fast", lo.fast, "int8 activations for quantized matmuls: MLX, and the GGUF block types (faster; not bit-identical to the exact mode)");
  app.add_flag("--no-amx", lo.no_amx, kNoAmxHelp);
  app.add_option("--kv-type", lo.kv_type, kKvTypeHelp);
  app.add_option("--verify", verify,
                 "also time speculative verification: K drafted tokens + 1 verified per step "
                 "(keeping all rows, and keeping one: the worst rollback), against one row; with "
                 "--spec mtp, also the MTP head drafting the K tokens and its cache kept");
  std::string spec_method = "off", prompt_file;
  int draft_tokens = 3;
  app.add_option("--spec", spec_method,
                 "without --verify, instead of pp/tg: speculative decoding end to end (lookup or "
                 "mtp), greedy, one stream: plain, speculative, and for lookup speculative with "
                 "the plain answer as prediction; tok/s, acceptance by draft position, tokens "
                 "checked equal to plain");
  app.add_option("--draft-tokens", draft_tokens, "with --spec: tokens drafted per step");
  int64_t draft_vocab = SpecFlags{}.draft_vocab;
  app.add_option("--draft-vocab", draft_vocab,
                 "with --spec mtp: the head drafts among token ids below N only (0: all; default " +
                     std::to_string(draft_vocab) + ")");
  app.add_option("--prompt-file", prompt_file,
                 "with --spec: the prompt, a text file (tokenized with the checkpoint's tokenizer; "
                 "default: -p synthetic token ids)");
  bool sample = false;
  std::string schema_file;
  app.add_flag("--sample", sample,
               "tg picks tokens with the sampler and the model's sampling defaults (seed 1) "
               "instead of greedy picks");
  app.add_option("--json-schema", schema_file,
                 "with --sample: under the grammar of the JSON Schema in FILE (a new value each "
                 "time one ends), to measure what the mask costs: the warm-up pass computes the "
                 "masks (a new schema), the repetitions mostly reuse them (a repeated one)");
  app.add_flag("--json", json, "one JSON object on stdout");
  std::string image_size;
  ImageBenchOptions io;
  app.add_option("--image", image_size,
                 "instead of pp/tg: one WxH image (synthetic pixels) through the image processor "
                 "and the vision tower (each timed), and time to first token of the image + "
                 "--question through the engine's step; -r repetitions after a warm-up at the "
                 "smallest image size");
  app.add_option("--question", io.question, "with --image: the question asked about the image");
  app.add_flag("--neighbour", io.neighbour,
               "with --image: instead, a text request decodes in a two-slot engine while the image "
               "arrives, and the gaps between its tokens are reported (the longest against the "
               "median), with each step's tower work against its budget");
  app.add_option("--step-tokens", io.step_tokens,
                 "with --image --neighbour: the engine's step budget in tokens (serve's --step-tokens)");
  app.add_option("--mmproj", lo.mmproj,
                 "GGUF models: the vision tower's mmproj file (default: the one mmproj*.gguf "
                 "beside the model, if any)");
  PipelineFlags pf;
  add_pipeline_flags(app, pf);
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  if (n_prompt < 0 || n_gen < 0 || depth < 0 || reps < 1 || batch < 1 || batch > 256)
    return fail("bench", "-p, -n, -d must be >= 0, -r >= 1 and -b in 1..256");
  if (depth_fill != "prefill" && depth_fill != "random")
    return fail("bench", "--depth-fill must be prefill or random (got '" + depth_fill + "')");
  const bool fill = depth_fill == "random" && depth > 0;
  if (fill && depth % kernels::kKvBlock != 0)
    return fail("bench", "--depth-fill random needs -d a multiple of " + std::to_string(kernels::kKvBlock) +
                             " (got " + std::to_string(depth) + ")");
  if (fill && (dist::launched_world_size() > 1 || !image_size.empty() || (spec_method != "off" && verify == 0)))
    return fail("bench", "--depth-fill random takes no --image, no --spec without --verify, and no model split over MPI ranks");
  if (verify < 0 || verify >= model::kMaxVerifyRows)
    return fail("bench", "--verify must be in 0.." + std::to_string(model::kMaxVerifyRows - 1));
  if (dist::launched_world_size() > 1 && (!image_size.empty() || verify > 0))
    return dist::launched_rank() == 0  // one line for the job
               ? fail("bench", "--image and --verify do not run on a model split over MPI ranks yet")
               : 1;
  if (!image_size.empty()) {
    if (!parse_image_size(image_size, &io.width, &io.height))
      return fail("bench", "--image takes WxH in pixels, e.g. 448x448 (got '" + image_size + "')");
    auto lm = load_model(lo);
    if (!lm.ok()) return fail("bench", lm.message());
    if (io.step_tokens < 2) return fail("bench", "--step-tokens must be at least 2");
    io.reps = reps;
    io.json = json;
    return bench_image(*lm->model, lo, lm->pool.get(), io);
  }
  // A later rank of a split reports nothing; --spec (without --verify) reports no bandwidth.
  // On a device, its own memory's bandwidth (the probe shader) is the roofline's.
  const bool on_device = lo.device != "cpu";
  std::string device_name = "cpu";
  double bw = 0;
  if (on_device) {
    auto probe = device_bandwidth(lo.device);
    if (!probe.ok()) return fail("bench", probe.message());
    device_name = probe->first;
    bw = probe->second;
  } else if (!(dist::launched_rank() > 0 || (spec_method != "off" && verify == 0))) {
    bw = measure_bandwidth_in_child(lo.threads > 0 ? lo.threads : core::ThreadPool::hardware_threads());
  }
  // Under mpirun -np N > 1 (cli/pipeline_setup.h): pp and tg through the ranks.
  Pipeline pipe;
  const int64_t capacity = depth + std::max<int64_t>(n_prompt, n_gen * (verify + 1)) + verify + 2;
  auto lm = load_pipelined(lo, pf, capacity, batch, &pipe);
  if (!lm.ok()) return pipe.report ? fail("bench", lm.message()) : 1;
  if (!pipe.leader()) return pipe.follow();
  model::Model& m = *lm->model;
  // The pp sequence's name on every rank, apart from the engine's slots.
  const dist::StepSequence pp_seq{uint64_t(1) << 32, capacity};
  auto forward = [&](const model::SequenceRows& rows, std::vector<float>* out) {
    const std::span<const model::SequenceRows> b(&rows, 1);
    return pipe.split() ? pipe.stage->step(b, std::span(&pp_seq, 1), out) : m.forward(b, out);
  };
  const int64_t V = m.config().vocab;

  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int64_t i = 0; i < n_prompt; ++i) prompt[size_t(i)] = int32_t((i * 2654435761u) % uint64_t(V));
  if (spec_method != "off" && verify == 0) {
    SpecFlags sf{spec_method, draft_tokens, draft_vocab};
    runtime::SpecOptions so;
    if (const std::string why = resolve_spec(sf, m, &so, pipe.split() ? &pipe.mtp_problem : nullptr); !why.empty())
      return fail("bench", why);
    if (!prompt_file.empty()) {
      std::ifstream in(prompt_file, std::ios::binary);
      if (!in) return fail("bench", "cannot read " + prompt_file);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto tok = load_tokenizer(lo.model_dir);
      if (!tok.ok()) return fail("bench", tok.message());
      auto ids = tok->encode(text);
      if (!ids.ok()) return fail("bench", ids.message());
      prompt = std::move(*ids);
    }
    if (prompt.empty() || n_gen < 2) return fail("bench", "--spec needs a prompt and -n >= 2");
    std::function<void(runtime::EngineOptions*)> split;
    if (pipe.split())
      split = [&](runtime::EngineOptions* eo) {  // the ranks' steps, the last rank's drafts
        eo->forward = pipe.engine_forward(eo->ctx);
        if (eo->spec.method == runtime::SpecMethod::kMtp) eo->draft = pipe.engine_draft(eo->ctx, draft_vocab);
      };
    return bench_speculative(m, so, prompt, n_gen, json, split);
  }
  // --sample / --json-schema: the sampler of each tg sequence, remade when a value ends.
  runtime::SamplingParams sp;
  std::vector<int32_t> ends;
  std::optional<grammar::Grammar> schema_grammar;
  std::shared_ptr<const grammar::Vocab> schema_vocab;
  if (!schema_file.empty() && !sample) return fail("bench", "--json-schema needs --sample");
  if (sample) {
    auto gen = load_generation_config(lo.model_dir);
    if (!gen.ok()) return fail("bench", gen.message());
    sp = runtime::sampling_defaults(*gen);
    sp.seed = 1;
    for (int64_t e : gen->eos_token_ids) ends.push_back(int32_t(e));
    for (int64_t e : m.config().eos_token_ids) ends.push_back(int32_t(e));
  }
  if (!schema_file.empty()) {
    auto tok = load_tokenizer(lo.model_dir);
    if (!tok.ok()) return fail("bench", tok.message());
    if (const int32_t im_end = tok->token_to_id("<|im_end|>"); im_end >= 0) ends.push_back(im_end);
    if (ends.empty()) return fail("bench", "--json-schema: the model has no end token");
    std::ifstream in(schema_file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const grammar::Json schema = grammar::Json::parse(text, nullptr, false);
    if (!in || schema.is_discarded()) return fail("bench", "--json-schema: cannot read JSON from " + schema_file);
    auto g = grammar::json_schema_grammar(schema);
    if (!g.ok()) return fail("bench", "--json-schema: " + g.message());
    schema_grammar = std::move(*g);
    schema_vocab = server::grammar_vocab(*tok, V);
  }
  // --verify K --spec mtp: steps that draft with the MTP head.
  const bool mtp = verify > 0 && spec_method != "off";
  if (mtp) {
    if (spec_method != "mtp") return fail("bench", "with --verify, --spec must be mtp (or off)");
    if (draft_vocab < 0) return fail("bench", "--draft-vocab must be >= 0");
    if (auto st = m.enable_mtp(); !st.ok()) return fail("bench", st.message());
    m.set_draft_vocab(draft_vocab);
  }
  std::vector<int32_t> context(static_cast<size_t>(depth));
  for (int64_t i = 0; i < depth; ++i) context[size_t(i)] = int32_t((i * 40503u + 7) % uint64_t(V));
  auto state = m.new_state(depth + std::max<int64_t>(n_prompt, n_gen * (verify + 1)) + 1);
  std::vector<float> logits;
  // Empties a sequence and fills its context with the -d tokens (untimed), or with
  // --depth-fill random the rows and state in their place (model/depth_fill.h).
  auto start = [&](model::SequenceState* st) -> core::Status {
    st->reset();
    if (depth == 0) return core::Status();
    if (fill) return model::fill_depth_random(m.config(), st, depth, kDepthFillSeed, lm->pool.get());
    model::SequenceRows rows{st, context, false};
    return forward(rows, &logits);
  };
  // Generation runs as the engine runs it (cli/bench_steps.h): each of `batch` requests reads
  // the -d context and one token of its own (untimed prefill), then decodes; greedy unless
  // --sample. The steps' positions reach at most depth + 1 + n_gen · (verify + 1) + verify.
  runtime::EngineOptions eo;
  eo.ctx = depth + 2 + n_gen * (verify + 1) + verify + 1;
  // Under a split, the bytes on the wire: of the decode steps (every sequence one row) and of
  // the timed prefill, rank 0's hop (every hop carries messages of the same size) and the
  // logits back from the last rank.
  struct Wire {
    uint64_t hop = 0, back = 0, units = 0;
  } tg_wire, pp_wire;
  if (pipe.split()) {
    dist::PipelineStage& stage = *pipe.stage;
    eo.forward = [&stage, &tg_wire, fwd = pipe.engine_forward(eo.ctx)](
                     std::span<const model::StateOp> ops, std::span<const model::SequenceRows> rows,
                     std::span<const int> slots, std::vector<float>* out) mutable {
      const uint64_t hop = stage.bytes_sent(), back = stage.logits_received();
      const core::Status st = fwd(ops, rows, slots, out);
      if (std::all_of(rows.begin(), rows.end(), [](const model::SequenceRows& r) { return r.tokens.size() == 1; })) {
        tg_wire.hop += stage.bytes_sent() - hop;
        tg_wire.back += stage.logits_received() - back;
        ++tg_wire.units;
      }
      return st;
    };
  }
  eo.step_tokens = (depth + 1) * batch;
  eo.max_queue = 0;
  // --depth-fill random: each Stepper's prefix cache holds the filled context, which every
  // request resumes from (sharing its blocks) and then computes its own last token. The pool
  // has room for that entry beside every slot's worst case, so admission never evicts it.
  std::function<core::Status(runtime::Stepper&)> prepare;
  if (fill) {
    eo.cache_bytes = int64_t(1) << 60;
    eo.kv_blocks = batch * ((eo.ctx + kernels::kKvBlock - 1) / kernels::kKvBlock) + depth / kernels::kKvBlock;
    prepare = [&](runtime::Stepper& s) -> core::Status {
      auto st = m.new_state(depth, s.pool());
      if (auto f = model::fill_depth_random(m.config(), st.get(), depth, kDepthFillSeed, lm->pool.get()); !f.ok())
        return f;
      s.cache()->insert(context, *st);
      if (s.cache()->stats().snapshots < 1) return core::error("the prefix cache did not take the filled context");
      return core::Status();
    };
  }
  auto requests = [&](int64_t n, const runtime::SamplingParams& s) {
    std::vector<runtime::GenerationRequest> reqs(static_cast<size_t>(n));
    for (int64_t b = 0; b < n; ++b) {
      reqs[size_t(b)].prompt = context;
      reqs[size_t(b)].prompt.push_back(int32_t(1 + b));
      reqs[size_t(b)].sampling = s;
      // A grammar's value ends with an end token, and the request starts again; without one
      // decoding goes on through whatever is sampled.
      if (s.grammar) reqs[size_t(b)].eos_ids = ends;
    }
    return reqs;
  };
  runtime::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<double> pp, tg, vf_all, vf_one;  // vf: ms per verification step
  std::vector<double> pick;                      // ms per generated token spent picking it
  double pick_cold = 0;                          // the same on the warm-up pass
  std::vector<double> mtp_draft, mtp_verify;     // ms per step: drafting, verifying
  double vf_rows = 0, mtp_rows = 0;              // verification rows per timed step
  std::vector<int32_t> plain;                    // the greedy answer, as --verify's prediction
  // The generation passes' prefill steps (every request's -d context + 1 token, batched): tok/s.
  std::vector<double> batch_pp;
  uint64_t hash = 0, tg_hash = 0;  // tg_hash: the warm-up generation's tokens (StepRun::tokens_hash)
  // One warm-up pass of each, then the measured repetitions.
  for (int r = 0; r <= reps; ++r) {
    if (n_prompt > 0) {
      if (auto s = start(state.get()); !s.ok()) return fail("bench", s.message());
      const uint64_t hop0 = pipe.split() ? pipe.stage->bytes_sent() : 0;
      const uint64_t back0 = pipe.split() ? pipe.stage->logits_received() : 0;
      auto t0 = Clock::now();
      model::SequenceRows rows{state.get(), prompt, false};
      if (auto s = forward(rows, &logits); !s.ok()) return fail("bench", s.message());
      if (r > 0) pp.push_back(double(n_prompt) / seconds_since(t0));
      if (r > 0 && pipe.split()) {
        pp_wire.hop += pipe.stage->bytes_sent() - hop0;
        pp_wire.back += pipe.stage->logits_received() - back0;
        pp_wire.units += uint64_t(n_prompt);
      }
      if (r == 0) hash = fnv1a(logits.data() + logits.size() - size_t(V), size_t(V));
    }
    if (n_gen > 0) {
      // One automaton for all repetitions: the warm-up pass computes its masks (a schema seen
      // first: pick_cold), the measured ones find most of them cached (a repeated schema).
      if (schema_grammar && !sp.grammar)
        sp.grammar = std::make_shared<grammar::Automaton>(*schema_grammar, schema_vocab, ends);
      eo.parallel = int(batch);
      eo.spec = {};
      auto run = run_steps(m, eo, requests(batch, sample ? sp : greedy), n_gen, prepare);
      if (!run.ok()) return fail("bench", run.message());
      const double per_token = run->advance_s * 1e3 / double(std::max<int64_t>(1, run->tokens));
      if (r > 0) {
        tg.push_back(double(run->tokens) / run->seconds);
        pick.push_back(per_token);
        if (run->prefill_s > 0) batch_pp.push_back(double(run->prefill_tokens) / run->prefill_s);
      } else {
        pick_cold = per_token;
        tg_hash = run->tokens_hash;
      }
    }
    if (n_gen > 0 && verify > 0) {
      // Verification steps as serve runs them: prompt lookup drafting `verify` tokens a step
      // from the greedy answer given as the prediction, so every draft is kept.
      eo.parallel = 1;
      if (plain.empty()) {
        eo.spec = {};
        auto run = run_steps(m, eo, requests(1, greedy), n_gen * (verify + 1) + verify, prepare);
        if (!run.ok()) return fail("bench", run.message());
        plain = {1};  // the prompt's own last token, then the answer
        plain.insert(plain.end(), run->first.begin(), run->first.end());
      }
      eo.spec = {runtime::SpecMethod::kLookup, int(verify)};
      auto reqs = requests(1, greedy);
      reqs[0].prediction = plain;
      auto run = run_steps(m, eo, reqs, n_gen, prepare);
      if (!run.ok()) return fail("bench", run.message());
      if (r > 0) vf_all.push_back(run->seconds * 1e3 / double(run->steps));
      vf_rows = double(run->rows) / double(run->steps);
      // The worst rollback, every draft rejected, which the engine never repeats (its draft
      // length falls): timed on Model::forward and Model::commit, the calls its verify step makes.
      std::vector<int32_t> toks(size_t(verify + 1));
      if (auto s = start(state.get()); !s.ok()) return fail("bench", s.message());
      auto t0 = Clock::now();
      for (int64_t i = 0; i < n_gen; ++i) {
        for (size_t j = 0; j < toks.size(); ++j) toks[j] = int32_t((i * 31 + int64_t(j) * 7 + 1) % V);
        model::SequenceRows rows{state.get(), toks, false, true};
        if (auto s = m.forward(std::span<const model::SequenceRows>(&rows, 1), &logits); !s.ok())
          return fail("bench", s.message());
        m.commit(state.get(), 1);
      }
      if (r > 0) vf_one.push_back(seconds_since(t0) * 1e3 / double(n_gen));
    }
    if (n_gen > 0 && mtp) {
      // Steps as --spec mtp runs them: the head drafts (as many as its acceptance pays for, at
      // most `verify`), then the rows are verified with the head's cache filled by the same call.
      eo.parallel = 1;
      eo.spec = {runtime::SpecMethod::kMtp, int(verify)};
      auto run = run_steps(m, eo, requests(1, greedy), n_gen, prepare);
      if (!run.ok()) return fail("bench", run.message());
      if (r > 0) {
        mtp_draft.push_back(run->plan_s * 1e3 / double(run->steps));
        mtp_verify.push_back((run->forward_s + run->advance_s) * 1e3 / double(run->steps));
      }
      mtp_rows = double(run->rows) / double(run->steps);
    }
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mb = double(ru.ru_maxrss) / 1024.0;
  const double stream = double(m.weights().stream_bytes);
  const Stats pps = stats(pp), tgs = stats(tg), vfa = stats(vf_all), vfo = stats(vf_one);
  const Stats mtd = stats(mtp_draft), mtv = stats(mtp_verify), picks = stats(pick);
  const double tg_ms = tgs.median > 0 ? 1e3 * double(batch) / tgs.median : 0;  // per step
  const double achieved = tgs.median * stream / 1e9;
  const double roofline = stream > 0 ? bw * 1e9 / stream : 0;
  const double roof_pct = roofline > 0 ? 100 * tgs.median / roofline : 0;
  const double ttft_ms = pps.median > 0 ? 1e3 * double(n_prompt) / pps.median : 0;
  const std::string isa = lo.backend == "ref" ? "scalar-reference" : kernels::cpu::simd_target();
  const char* mode = lo.fast ? "fast-int8" : "exact";
  const kernels::cpu::AmxStatus amx = kernels::cpu::amx_status();
  const char* picker = !sample ? "greedy" : sp.grammar ? "sampler+grammar" : "sampler";
  const int ranks = pipe.split() ? pipe.comm->size() : 1;
  const int microbatches = pipe.split() ? pipe.stage->microbatches() : 1;
  const int64_t microbatch_rows = pipe.split() ? pipe.stage->microbatch_rows() : 0;
  const auto per = [](uint64_t bytes, uint64_t units) { return units ? double(bytes) / double(units) : 0.0; };
  if (json) {
    std::printf("{\"model\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"mode\": \"%s\", \"tg_picks\": \"%s\", \"n_prompt\": %lld, "
                "\"n_gen\": %lld, \"n_depth\": %lld, \"batch\": %lld, \"repetitions\": %d, \"pp_tok_s\": %.3f, \"pp_tok_s_min\": %.3f, "
                "\"pp_tok_s_max\": %.3f, \"tg_tok_s\": %.3f, \"tg_tok_s_min\": %.3f, \"tg_tok_s_max\": %.3f, "
                "\"ttft_ms\": %.2f, \"weight_bytes_per_token\": %.0f, \"achieved_gbs\": %.3f, \"mem_bw_gbs\": %.3f, "
                "\"tg_roofline_tok_s\": %.3f, \"tg_roofline_pct\": %.2f, \"peak_rss_mb\": %.1f, "
                "\"weights_mb\": %.1f, \"verify_tokens\": %lld, \"verify_ms\": %.3f, "
                "\"verify_rollback_ms\": %.3f, \"verify_rows\": %.3f, \"mtp_draft_ms\": %.3f, \"mtp_verify_ms\": %.3f, \"mtp_rows\": %.3f, "
                "\"decode_step_ms\": %.3f, \"pick_ms\": %.4f, \"pick_cold_ms\": %.4f, \"logits_hash\": \"%016llx\", "
                "\"kv_type\": \"%s\", \"tg_hash\": \"%016llx\", \"ranks\": %d, \"microbatches\": %d, \"microbatch_rows\": %lld, "
                "\"pp_hop_bytes_per_token\": %.1f, \"pp_logits_bytes_per_token\": %.1f, "
                "\"tg_hop_bytes_per_step\": %.1f, \"tg_logits_bytes_per_step\": %.1f, \"batch_prefill_tok_s\": %.3f, "
                "\"depth_fill\": \"%s\", \"amx\": %s, \"amx_why_not\": \"%s\"}\n",
                lo.model_dir.c_str(), device_name.c_str(), lm->pool->size(), isa.c_str(), mode, picker, (long long)n_prompt, (long long)n_gen, (long long)depth, (long long)batch, reps,
                pps.median, pps.min, pps.max, tgs.median, tgs.min, tgs.max, ttft_ms, stream, achieved, bw, roofline,
                roof_pct, rss_mb, double(m.weights().weight_bytes) / 1e6, (long long)verify,
                vfa.median, vfo.median, vf_rows, mtd.median, mtv.median, mtp_rows, tg_ms, picks.median, pick_cold, (unsigned long long)hash,
                kernels::kv_types_name(m.kv_types()).c_str(), (unsigned long long)tg_hash, ranks, microbatches, (long long)microbatch_rows,
                per(pp_wire.hop, pp_wire.units), per(pp_wire.back, pp_wire.units), per(tg_wire.hop, tg_wire.units),
                per(tg_wire.back, tg_wire.units), stats(batch_pp).median, fill ? "random" : "prefill",
                amx.in_use ? "true" : "false", amx.why_not.c_str());
    return 0;
  }
  std::printf("model: %s  threads: %d  isa: %s  mode: %s  backend: %s\n", lo.model_dir.c_str(), lm->pool->size(),
              isa.c_str(), mode, lo.backend.c_str());
  std::printf("amx: %s\n", amx.in_use ? "in use (fast mode's prefill matmuls)" : ("not in use: " + amx.why_not).c_str());
  if (on_device) std::printf("device: %s (%s)\n", device_name.c_str(), lo.device.c_str());
  std::printf("memory read bandwidth: %.2f GB/s (measured%s)\n", bw, on_device ? " on the device" : "");
  if (depth > 0)
    std::printf("context depth: %lld tokens before each test (%s)\n", (long long)depth,
                fill ? "pseudo-random rows and state written in place, not prefilled" : "prefilled");
  std::printf("kv cache: %s\n", kernels::kv_types_name(m.kv_types()).c_str());
  if (n_prompt > 0)
    std::printf("pp%lld: %8.2f tok/s (min %.2f, max %.2f over %d)   time to first token: %.1f ms\n", (long long)n_prompt,
                pps.median, pps.min, pps.max, reps, ttft_ms);
  if (n_gen > 0) {
    std::printf("tg%lld: %8.2f tok/s (min %.2f, max %.2f over %d)   weights per token: %.1f MB   achieved: %.2f GB/s\n",
                (long long)n_gen, tgs.median, tgs.min, tgs.max, reps, stream / 1e6, achieved);
    std::printf("roofline: %.2f tok/s   fraction of roofline: %.1f%%\n", roofline, roof_pct);
    std::printf("picking a token (%s): %.3f ms of a %.2f ms step (%.1f%%); on the warm-up pass "
                "%.3f ms\n", picker, picks.median, tg_ms / double(batch),
                tg_ms > 0 ? 100 * picks.median * double(batch) / tg_ms : 0.0, pick_cold);
  }
  if (verify > 0 && tg_ms > 0)
    std::printf("verify %lld+1 rows (%.2f a step, every draft kept): %.2f ms per step (%.2fx one "
                "row), %.2f ms keeping one row (%.2fx); one row: %.2f ms\n",
                (long long)verify, vf_rows, vfa.median, vfa.median / tg_ms, vfo.median,
                vfo.median / tg_ms, tg_ms);
  if (mtp && tg_ms > 0)
    std::printf("mtp (at most %lld drafts): %.2f rows a step; drafting %.2f ms (%.2fx one row), "
                "verifying with the head's cache %.2f ms (%.2fx): a step %.2fx one row\n",
                (long long)verify, mtp_rows, mtd.median, mtd.median / tg_ms, mtv.median,
                mtv.median / tg_ms, (mtd.median + mtv.median) / tg_ms);
  if (pipe.split())
    std::printf("pipeline: %d ranks, up to %d micro-batches of %lld rows or more a step; a hop carries %.0f bytes per prefill token "
                "and %.0f per decode step (%.0f and %.0f bytes of logits back)\n", ranks, microbatches,
                (long long)microbatch_rows,
                per(pp_wire.hop, pp_wire.units), per(tg_wire.hop, tg_wire.units), per(pp_wire.back, pp_wire.units),
                per(tg_wire.back, tg_wire.units));
  std::printf("peak RSS: %.1f MB (weights %.1f MB)\n", rss_mb, double(m.weights().weight_bytes) / 1e6);
  std::printf("logits hash: %016llx (FNV-1a of the prompt's last logits; compares backends and builds)\n",
              (unsigned long long)hash);
  return 0;
}

}  // namespace qwen35::cli
