// qwen35 run -m DIR [-p PROMPT [--chat]] [sampling flags]
// With -p: one completion of the raw prompt (or, with --chat, of one user message through the
// model's chat template). Without -p: an interactive chat with history (/reset, /exit; Ctrl-C
// stops the current answer, Ctrl-D leaves). Text streams to stdout; the closing line with
// prompt and generation speed goes to stderr.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/generation.h"
#include "cli/model_loader.h"
#include "formats/hf_config.h"
#include "tokenizer/chat_template.h"

namespace qwen35::cli {
namespace {

std::atomic<bool> g_interrupt{false};
void on_sigint(int) { g_interrupt.store(true); }

void progress_bar(size_t done, size_t total) {
  const int width = 40, filled = total ? int(double(done) / double(total) * width) : width;
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "########################################",
               width - filled, "", total ? int(100.0 * double(done) / double(total)) : 100);
  if (done >= total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_stats(const GenerationStats& s) {
  std::fprintf(stderr, "\n[prompt: %lld tokens, %.1f tok/s | generation: %lld tokens, %.1f tok/s | %s]\n",
               (long long)s.prompt_tokens, s.prompt_seconds > 0 ? double(s.prompt_tokens) / s.prompt_seconds : 0.0,
               (long long)s.generated_tokens,
               s.generation_seconds > 0 ? double(s.generated_tokens) / s.generation_seconds : 0.0,
               s.finish_reason.c_str());
}

struct Flags {
  LoadOptions lo;
  std::string prompt, system;
  bool chat = false, no_think = false, quiet = false;
  int64_t max_tokens = -1, ctx = 4096;
  std::optional<float> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stops;
};

runtime::SamplingParams sampling_params(const Flags& f, const formats::GenerationConfig& g) {
  runtime::SamplingParams p = runtime::sampling_defaults(g);
  if (f.temperature) p.temperature = *f.temperature;
  if (f.top_k) p.top_k = *f.top_k;
  if (f.top_p) p.top_p = *f.top_p;
  if (f.min_p) p.min_p = *f.min_p;
  if (f.presence) p.presence_penalty = *f.presence;
  if (f.frequency) p.frequency_penalty = *f.frequency;
  if (f.repetition) p.repetition_penalty = *f.repetition;
  p.seed = f.seed;
  return p;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text: a completion of -p PROMPT, or an interactive chat", "qwen35 run"};
  Flags f;
  app.add_option("-m,--model", f.lo.model_dir, "checkpoint directory (with tokenizer files)")->required();
  app.add_option("-p,--prompt", f.prompt, "prompt (without it: interactive chat)");
  app.add_flag("--chat", f.chat, "apply the chat template to -p (a single user turn)");
  app.add_flag("--no-think", f.no_think, "chat template with enable_thinking=false");
  app.add_option("--system", f.system, "system message for chat");
  app.add_option("-n,--max-tokens", f.max_tokens, "maximum tokens to generate (default: until the end or the context)");
  app.add_option("-c,--ctx", f.ctx, "context size in tokens");
  app.add_option("--temperature", f.temperature, "sampling temperature (0 = greedy)");
  app.add_option("--top-k", f.top_k, "top-k (0 = off)");
  app.add_option("--top-p", f.top_p, "top-p");
  app.add_option("--min-p", f.min_p, "min-p");
  app.add_option("--presence-penalty", f.presence, "presence penalty");
  app.add_option("--frequency-penalty", f.frequency, "frequency penalty");
  app.add_option("--repetition-penalty", f.repetition, "repetition penalty");
  app.add_option("--seed", f.seed, "random seed (same seed, same text)");
  app.add_option("--stop", f.stops, "stop string (repeatable)");
  app.add_option("-t,--threads", f.lo.threads, "threads (0 = all cores)");
  app.add_option("--load", f.lo.load_mode, kLoadModeHelp);
  app.add_flag("--fast", f.lo.fast, "int8 activations for MLX-quantized matmuls (faster; not bit-identical to the exact mode)");
  app.add_flag("-q,--quiet", f.quiet, "no progress bar, banner or closing line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const bool interactive = app.count("--prompt") == 0;
  if (f.ctx < 2) return fail("run", "--ctx must be at least 2");
  auto tok = tokenizer::Tokenizer::load(f.lo.model_dir);
  if (!tok.ok()) return fail("run", tok.message());
  auto gen_cfg = formats::load_generation_config(f.lo.model_dir);
  if (!gen_cfg.ok()) return fail("run", gen_cfg.message());
  const runtime::SamplingParams sp = sampling_params(f, *gen_cfg);
  if (auto s = sp.validate(); !s.ok()) return fail("run", s.message());
  std::optional<tokenizer::ChatTemplate> tmpl;
  if (f.chat || interactive) {
    auto t = tokenizer::load_chat_template(f.lo.model_dir);
    if (!t.ok()) return fail("run", t.message());
    tmpl = std::move(*t);
  }
  auto lm = load_model(f.lo);
  if (!lm.ok()) return fail("run", lm.message());
  model::Model& m = *lm->model;
  const bool tty = isatty(STDERR_FILENO) && !f.quiet;
  m.weights().store.prefault(tty ? progress_bar : std::function<void(size_t, size_t)>());

  std::vector<int32_t> eos(gen_cfg->eos_token_ids.begin(), gen_cfg->eos_token_ids.end());
  for (int64_t e : m.config().eos_token_ids) eos.push_back(int32_t(e));
  if (tok->eos_id() >= 0) eos.push_back(tok->eos_id());
  if (tmpl) {
    const int32_t im_end = tok->token_to_id("<|im_end|>");
    if (im_end >= 0) eos.push_back(im_end);
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: Ctrl-C also interrupts a pending read

  Generation gen(m, *tok, f.ctx);
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (f.no_think) kwargs["enable_thinking"] = false;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  auto emit = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };

  // One turn: render (chat) or take the raw prompt, feed what the state lacks, generate.
  auto turn = [&](const std::string& user, std::string* answer) -> int {
    std::vector<int32_t> ids;
    if (tmpl) {
      messages.push_back({{"role", "user"}, {"content", user}});
      auto text = tmpl->render(messages, nullptr, true, kwargs);
      if (!text.ok()) {
        messages.erase(messages.size() - 1);
        return fail("run", text.message());
      }
      auto r = tok->encode(*text);
      if (!r.ok()) return fail("run", r.message());
      ids = std::move(*r);
    } else {
      auto r = tok->encode(user);
      if (!r.ok()) return fail("run", r.message());
      ids = std::move(*r);
    }
    // Reuse the state when what it holds is a prefix of the new prompt; else start over.
    const auto& h = gen.history();
    std::span<const int32_t> fresh(ids);
    if (!h.empty() && h.size() < ids.size() && std::equal(h.begin(), h.end(), ids.begin())) {
      fresh = fresh.subspan(h.size());
    } else {
      gen.reset();
    }
    g_interrupt.store(false);
    std::string out;
    auto st = gen.run(fresh, sp, eos, f.stops, f.max_tokens, &g_interrupt, [&](const std::string& s) {
      out += s;
      emit(s);
    });
    if (!st.ok()) {
      if (tmpl) messages.erase(messages.size() - 1);
      return fail("run", st.message());
    }
    if (answer) *answer = out;
    if (tmpl) messages.push_back({{"role", "assistant"}, {"content", out}});
    if (!f.quiet) print_stats(*st);
    else if (!interactive) std::fputc('\n', stdout);
    return 0;
  };

  if (!interactive) return turn(f.prompt, nullptr);
  if (!f.quiet)
    std::fprintf(stderr, "qwen35 chat: /reset clears the history, /exit or Ctrl-D leaves, Ctrl-C stops an answer\n");
  std::string line;
  for (;;) {
    std::fputs("> ", stdout);
    std::fflush(stdout);
    g_interrupt.store(false);
    if (!std::getline(std::cin, line)) {
      if (std::cin.eof()) break;  // Ctrl-D
      std::cin.clear();           // Ctrl-C at the prompt: a fresh line
      std::fputc('\n', stdout);
      continue;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      gen.reset();
      std::fputs("(history cleared)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    turn(line, nullptr);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace qwen35::cli
