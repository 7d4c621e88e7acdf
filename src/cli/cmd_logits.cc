// qwen35 logits -m DIR --tokens 1,2,3 --out FILE.npy
// Runs the forward pass and writes float32 [n_tokens, vocab] logits in NumPy .npy format.
// --chunk N prefills N tokens per forward call; --decode feeds one token per call (the decode
// path); --greedy N also prints the N-token greedy continuation as a JSON array.
// qwen35 logits -m DIR --kl-text FILE --kv-type T [--depth N] [--window W]: a KV type's
// next-token distributions against the f32 cache's on a text (kv_quality.h); with --ppl-ctx C,
// perplexity at context C instead.
// Under `mpirun -np N` (N > 1) the model is split by layers over the ranks (cli/pipeline_setup.h);
// rank 0 writes the file, bit-identical to one process.
#include "cli/flags.h"
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/kv_quality.h"
#include "cli/model_loader.h"
#include "cli/pipeline_setup.h"
#include "formats/npy.h"

namespace qwen35::cli {
namespace {

core::Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  if (s.empty()) return core::error("--tokens is empty");
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string tok = s.substr(i, j - i);
    while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    if (tok.empty() || tok.size() > 10 || tok.find_first_not_of("0123456789") != std::string::npos)
      return core::error("token '" + tok + "' is not a non-negative integer");
    long long v = std::stoll(tok);
    if (v > INT32_MAX) return core::error("token id " + tok + " is out of range");
    ids.push_back(int32_t(v));
    i = j + 1;
  }
  return ids;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  flags::App app{"Run the forward pass on token ids and write the logits as .npy", "qwen35 logits"};
  LoadOptions lo;
  std::string tokens, out;
  int64_t chunk = 0;
  bool decode = false;
  int greedy = 0;
  app.add_option("-m,--model", lo.model_dir, "checkpoint directory or .gguf file")->required();
  app.add_option("--tokens", tokens, "comma-separated token ids (required without --kl-text)");
  app.add_option("--out", out, "output .npy file: float32 [n_tokens, vocab] (required without --kl-text)");
  app.add_option("--chunk", chunk, "prefill chunk size (tokens per forward call; 0 = all)");
  app.add_flag("--decode", decode, "feed the tokens one by one (the decode path)");
  app.add_option("--greedy", greedy, "also print the N-token greedy continuation (JSON)");
  app.add_option("-t,--threads", lo.threads, "threads (0 = all cores)");
  app.add_option("--backend", lo.backend, "kernels: cpu or ref (scalar reference)");
  app.add_option("--load", lo.load_mode, kLoadModeHelp);
  app.add_option("--device", lo.device, flags::kDeviceHelp);
  app.add_option("--isa", lo.isa, "cap run-time SIMD dispatch at this target (e.g. AVX2, SSE4) to measure older CPUs");
  app.add_flag("--fast", lo.fast, "int8 activations for quantized matmuls: MLX, and the GGUF block types (faster; not bit-identical to the exact mode)");
  app.add_flag("--no-amx", lo.no_amx, kNoAmxHelp);
  app.add_option("--kv-type", lo.kv_type, kKvTypeHelp);
  KvQualityOptions kq;
  app.add_option("--kl-text", kq.text_file,
                 "instead of --tokens/--out: feed this text file's tokens with an f32 KV cache and "
                 "with --kv-type's, and print mean and p99 KL(f32 || type), top-1 agreement and "
                 "both perplexities over the last --window positions before --depth");
  app.add_option("--depth", kq.depth, "with --kl-text: tokens of the text fed (default: all)");
  app.add_option("--window", kq.window, "with --kl-text: positions measured (default 256)");
  app.add_option("--kl-also", kq.more_types,
                 "with --kl-text: one more KV type measured in the same pass against the same f32 "
                 "state (repeatable)");
  app.add_option("--ppl-ctx", kq.ppl_ctx,
                 "with --kl-text, instead of --depth: perplexity (and KL) at context C: the text "
                 "cut into consecutive chunks of C tokens, each from an empty state, the second "
                 "half of each chunk scored");
  PipelineFlags pf;
  add_pipeline_flags(app, pf);
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  if (!kq.text_file.empty()) {
    if (app.count("--tokens") || app.count("--out") || decode || greedy != 0)
      return fail("logits", "--kl-text takes none of --tokens, --out, --decode, --greedy");
    if (chunk > 0) kq.chunk = chunk;
    return run_kv_quality(lo, kq);
  }
  if (!app.count("--tokens") || !app.count("--out"))
    return fail("logits", "--tokens and --out are required (or --kl-text)");
  auto ids = parse_ids(tokens);
  if (!ids.ok()) return fail("logits", ids.message());
  if (chunk < 0) return fail("logits", "--chunk must be >= 0");
  if (greedy < 0) return fail("logits", "--greedy must be >= 0");
  const int64_t n = int64_t(ids->size());
  Pipeline pipe;
  auto lm = load_pipelined(lo, pf, n + greedy, 1, &pipe);
  if (!lm.ok()) return pipe.report ? fail("logits", lm.message()) : 1;
  if (!pipe.leader()) return pipe.follow();  // a later rank's layers: steps until rank 0 is done
  {
    FILE* f = std::fopen(out.c_str(), "wb");
    if (f == nullptr) return fail("logits", "cannot write '" + out + "'");
    std::fclose(f);
  }
  model::Model& m = *lm->model;
  const int64_t V = m.config().vocab;
  for (int32_t t : *ids)
    if (t >= V) return fail("logits", "token id " + std::to_string(t) + " out of range (vocabulary size " + std::to_string(V) + ")");
  auto state = m.new_state(n + greedy);
  const dist::StepSequence seq{0, n + greedy};
  auto forward = [&](const model::SequenceRows& rows, std::vector<float>* logits) {
    const std::span<const model::SequenceRows> batch(&rows, 1);
    return pipe.split() ? pipe.stage->step(batch, std::span(&seq, 1), logits) : m.forward(batch, logits);
  };
  std::vector<float> all(size_t(n * V)), part;
  const int64_t step = decode ? 1 : (chunk > 0 ? chunk : n);
  for (int64_t p = 0; p < n; p += step) {
    const int64_t len = std::min(step, n - p);
    model::SequenceRows rows{state.get(), std::span<const int32_t>(ids->data() + p, size_t(len)), true};
    if (auto st = forward(rows, &part); !st.ok()) return fail("logits", st.message());
    std::copy(part.begin(), part.end(), all.begin() + p * V);
  }
  if (auto st = formats::write_npy_f32(out, all.data(), {n, V}); !st.ok()) return fail("logits", st.message());
  if (greedy > 0) {
    std::vector<int32_t> cont;
    const float* last = all.data() + (n - 1) * V;
    int32_t tok = int32_t(std::max_element(last, last + V) - last);
    for (int i = 0; i < greedy; ++i) {
      cont.push_back(tok);
      if (i + 1 == greedy) break;
      model::SequenceRows rows{state.get(), std::span<const int32_t>(&tok, 1), false};
      if (auto st = forward(rows, &part); !st.ok())
        return fail("logits", st.message());
      tok = int32_t(std::max_element(part.begin(), part.end()) - part.begin());
    }
    std::printf("[");
    for (size_t i = 0; i < cont.size(); ++i) std::printf("%s%d", i ? ", " : "", cont[i]);
    std::printf("]\n");
  }
  return 0;
}

}  // namespace qwen35::cli
