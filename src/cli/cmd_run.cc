// qwen35 run -m DIR [-p PROMPT [--chat]] [--image FILE]... [sampling flags]
// With -p: one completion of the raw prompt (or, with --chat or --image, of one user message
// through the model's chat template, the images before the text). Without -p: an interactive chat
// with history (/image PATH attaches an image to the next message; /reset, /exit, /help; Ctrl-C
// stops the current answer, Ctrl-D leaves). Text streams to stdout; the closing line with
// prompt and generation speed goes to stderr.
//
// Generation runs on a one-slot runtime::Engine, the server's engine; this file keeps the
// terminal side: rendering, tokenizing, showing text (cli/turn.h, cli/answer_printer.h),
// Ctrl-C and the closing line. The chat resumes each turn from the prefix cache (the previous
// prompt's last 64-token boundary), so every answer is bit-identical to a fresh run of the same
// history; with --no-prefix-cache every turn computes the whole history again.
#include <signal.h>
#include <unistd.h>

#include "cli/flags.h"
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/model_assets.h"
#include "cli/answer_printer.h"
#include "cli/commands.h"
#include "cli/image_prompt.h"
#include "cli/model_loader.h"
#include "cli/pipeline_setup.h"
#include "cli/spec_flags.h"
#include "cli/turn.h"
#include "formats/hf_config.h"
#include "grammar/json_schema.h"
#include "runtime/image_encoder.h"
#include "server/structured.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Ctrl-C: while the tokenizer and the model load there is nothing to stop but the load, so it
// quits at once (status 130, as a shell reports SIGINT); from the chat's first prompt on, it
// stops the current answer (or clears the line being typed) and the chat goes on.
std::atomic<bool> g_loading{true};
std::atomic<bool> g_interrupt{false};
void on_sigint(int) {
  if (g_loading.load()) {
    static const char kMsg[] = "\nqwen35 run: interrupted while loading\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(130);
  }
  g_interrupt.store(true);
}

void progress_bar(size_t done, size_t total) {
  const int width = 40, filled = total ? int(double(done) / double(total) * width) : width;
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "########################################",
               width - filled, "", total ? int(100.0 * double(done) / double(total)) : 100);
  if (done >= total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_stats(const TurnStats& s) {
  std::string spec;
  if (s.drafted > 0)
    spec = " | drafted " + std::to_string(s.drafted) + ", accepted " + std::to_string(s.accepted) +
           " (" + std::to_string(100 * s.accepted / s.drafted) + "%)";
  std::fprintf(stderr, "\n[prompt: %lld tokens, %.1f tok/s | generation: %lld tokens, %.1f tok/s%s | %s]\n",
               (long long)s.prompt_tokens, s.prompt_seconds > 0 ? double(s.prompt_tokens) / s.prompt_seconds : 0.0,
               (long long)s.generated_tokens,
               s.generation_seconds > 0 ? double(s.generated_tokens) / s.generation_seconds : 0.0,
               spec.c_str(), s.finish_reason.c_str());
}

void emit(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

struct Flags {
  LoadOptions lo;
  std::string prompt, system, json_schema;
  bool json = false;
  bool chat = false, no_think = false, hide_reasoning = false, quiet = false;
  bool no_cache = false;
  int64_t max_tokens = -1, ctx = 4096, reasoning_budget = -1;
  double cache_mb = 256;
  std::optional<float> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stops;
  std::vector<std::string> images;
  SpecFlags spec;
  PipelineFlags pipe;
};

void add_flags(flags::App& app, Flags& f) {
  app.add_option("-m,--model", f.lo.model_dir, "checkpoint directory (with tokenizer files) or .gguf file")->required();
  app.add_option("-p,--prompt", f.prompt, "prompt (without it: interactive chat)");
  app.add_flag("--chat", f.chat, "apply the chat template to -p (a single user turn)");
  app.add_option("--image", f.images,
                 "an image file (PNG, JPEG, WebP, GIF) for the prompt, before its text "
                 "(repeatable; implies --chat; in the interactive chat, with the first message)");
  app.add_option("--mmproj", f.lo.mmproj,
                 "GGUF models: the vision tower's mmproj file (default: the one mmproj*.gguf "
                 "beside the model, if any)");
  app.add_flag("--no-think", f.no_think, "chat template with enable_thinking=false");
  app.add_flag("--hide-reasoning", f.hide_reasoning,
               "chat: leave the model's reasoning (<think> … </think>) out of the output; otherwise "
               "it is shown faint on a terminal, tagged <think> … </think> in a pipe or file");
  app.add_option("--reasoning-budget", f.reasoning_budget,
                 "chat: at most N tokens of thinking, then </think> is forced and the answer "
                 "follows (default -1: no cap)");
  app.add_option("--system", f.system, "system message for chat");
  app.add_option("--json-schema", f.json_schema,
                 "constrain the answer to JSON valid under the JSON Schema in FILE (the subset in "
                 "docs/design.md; with thinking on, from </think>)");
  app.add_flag("--json", f.json, "constrain the answer to a JSON object");
  app.add_option("-n,--max-tokens", f.max_tokens, "maximum tokens to generate (default: until the end or the context)");
  app.add_option("-c,--ctx", f.ctx, "context size in tokens");
  app.add_option("--cache-mb", f.cache_mb,
                 "chat: MiB of prefix cache, so a turn resumes from the last one's prompt");
  app.add_flag("--no-prefix-cache", f.no_cache,
               "chat: compute the whole history again every turn (the same answers, slower)");
  app.add_option("--temperature", f.temperature, "sampling temperature (0 = greedy)");
  app.add_option("--top-k", f.top_k, "top-k (0 = off)");
  app.add_option("--top-p", f.top_p, "top-p");
  app.add_option("--min-p", f.min_p, "min-p");
  app.add_option("--presence-penalty", f.presence, "presence penalty");
  app.add_option("--frequency-penalty", f.frequency, "frequency penalty");
  app.add_option("--repetition-penalty", f.repetition, "repetition penalty");
  app.add_option("--seed", f.seed, "random seed (same seed, same text)");
  app.add_option("--stop", f.stops, "stop string (repeatable)");
  add_spec_flags(app, &f.spec);
  app.add_option("-t,--threads", f.lo.threads, "threads (0 = all cores)");
  app.add_option("--load", f.lo.load_mode, kLoadModeHelp);
  app.add_option("--device", f.lo.device, flags::kDeviceHelp);
  app.add_flag("--fast", f.lo.fast, "int8 activations for quantized matmuls: MLX, and the GGUF block types (faster; not bit-identical to the exact mode)");
  app.add_flag("--no-amx", f.lo.no_amx, kNoAmxHelp);
  app.add_option("--kv-type", f.lo.kv_type, kKvTypeHelp);
  app.add_flag("-q,--quiet", f.quiet, "no progress bar, banner or closing line");
  add_pipeline_flags(app, f.pipe);
}

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

// Every id that ends a turn: the generation config's, the model config's, the tokenizer's, and
// <|im_end|> in chat.
std::vector<int32_t> eos_ids(const formats::GenerationConfig& g, const model::ModelConfig& c,
                             const tokenizer::Tokenizer& tok, bool chat) {
  std::vector<int32_t> eos(g.eos_token_ids.begin(), g.eos_token_ids.end());
  for (int64_t e : c.eos_token_ids) eos.push_back(int32_t(e));
  if (tok.eos_id() >= 0) eos.push_back(tok.eos_id());
  if (chat) {
    const int32_t im_end = tok.token_to_id("<|im_end|>");
    if (im_end >= 0) eos.push_back(im_end);
  }
  return eos;
}

// Qwen3.5's generation prompt opens <think> unless thinking is off: the answer starts inside.
bool opens_reasoning(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end >= 7 && text.compare(end - 7, 7, "<think>") == 0;
}

// One `qwen35 run`: the engine, the chat history and how answers are shown.
struct Session {
  const Flags& f;
  const tokenizer::Tokenizer& tok;
  std::optional<tmpl::ChatTemplate> tmpl;  // set for --chat and the interactive chat
  runtime::Engine& engine;
  const model::Model& model;
  runtime::GenerationRequest base;  // sampling, max_tokens, eos ids
  ReasoningDisplay display = ReasoningDisplay::kTagged;
  bool indicator = false;  // "thinking…" on stderr while reasoning is hidden
  OrderedJson kwargs = OrderedJson::object();
  OrderedJson messages = OrderedJson::array();
  // Images (chat only): the encoder (decoding and resizing; the engine runs the tower), made at
  // the first one;
  // the images of the history's user messages in prompt order; those for the next message.
  std::unique_ptr<runtime::ImageEncoder> encoder{};
  std::string encoder_problem{};
  std::vector<runtime::PromptImage> history_images{}, pending_images{};

  void reset_history() {
    messages = OrderedJson::array();
    history_images.clear();
    pending_images.clear();
    if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  }

  // Why this checkpoint takes no images ("" when it does); makes the encoder.
  const std::string& image_problem() {
    if (encoder || !encoder_problem.empty()) return encoder ? encoder->why_not() : encoder_problem;
    auto pc = runtime::read_processor_config(f.lo.model_dir);
    if (!pc.ok()) return encoder_problem = pc.message();
    runtime::ImageEncoderOptions o;
    o.threads = f.lo.threads;
    o.processor = *pc;
    encoder = std::make_unique<runtime::ImageEncoder>(model, o);
    return encoder->why_not();
  }

  // Reads and encodes the image file at `path` for the next message.
  core::Status attach(const std::string& path) {
    if (const std::string& why = image_problem(); !why.empty())
      return core::error("this checkpoint takes no images (" + why + ")");
    QWEN35_ASSIGN_OR_RETURN(std::string bytes, read_image_file(path, encoder->limits().max_bytes));
    auto im = encoder->encode(bytes);
    if (!im.ok()) return core::error(path + ": " + im.message());
    if (!f.quiet)
      std::fprintf(stderr, "[image %s: %lldx%lld pixels to the tower, %lld tokens]\n", path.c_str(),
                   (long long)(im->grid[2] * model.config().vision.patch),
                   (long long)(im->grid[1] * model.config().vision.patch), (long long)encoder->tokens(*im));
    pending_images.push_back(std::move(*im));
    return core::Status();
  }

  // The prompt of the next turn: the raw text, or the history plus `user` (after the attached
  // images) rendered, each image's placeholder expanded to its tokens (the user message stays in
  // the history; *images: every image of the prompt). *in_reasoning: the prompt opened <think>.
  core::Result<std::vector<int32_t>> prompt(const std::string& user, bool* in_reasoning,
                                            std::vector<runtime::PromptImage>* images) {
    *in_reasoning = false;
    if (!tmpl) return tok.encode(user);
    messages.push_back({{"role", "user"}, {"content", user_content(pending_images.size(), user)}});
    auto text = tmpl->render(messages, nullptr, true, kwargs);
    if (!text.ok()) return core::error(text.message());
    *in_reasoning = opens_reasoning(*text);
    QWEN35_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(*text));
    *images = history_images;
    images->insert(images->end(), pending_images.begin(), pending_images.end());
    if (images->empty()) return ids;
    std::vector<int64_t> tokens;
    for (const runtime::PromptImage& im : *images) tokens.push_back(encoder->tokens(im));
    return expand_image_tokens(ids, base.image_token, tokens);
  }

  // One turn: prompt, generate, show; in chat the answer joins the history as the server's
  // parser splits it (content + reasoning_content), even when Ctrl-C cut it short.
  int turn(const std::string& user, bool interactive) {
    bool in_reasoning = false;
    const size_t n_messages = messages.size();
    std::vector<runtime::PromptImage> images;
    auto ids = prompt(user, &in_reasoning, &images);
    std::optional<AnswerPrinter> printer;
    if (tmpl) printer.emplace(in_reasoning, display, indicator);
    core::Result<TurnStats> st = core::error("");
    if (ids.ok()) {
      runtime::GenerationRequest req = base;
      req.prompt = std::move(*ids);
      req.images = std::move(images);
      req.sampling.reasoning_open = in_reasoning;
      // g_interrupt is not cleared here: the chat clears it when it shows its prompt, so a
      // Ctrl-C that comes after Enter and before the answer's first token still stops it.
      st = run_turn(engine, std::move(req), tok, f.stops, g_interrupt, [&](const std::string& s) {
        if (printer) printer->push(s);
        else emit(s);
      });
      if (printer) printer->finish();
    }
    if (!ids.ok() || !st.ok()) {  // the message and its images leave the history
      while (messages.size() > n_messages) messages.erase(messages.size() - 1);
      pending_images.clear();
      return fail("run", ids.ok() ? st.message() : ids.message());
    }
    history_images.insert(history_images.end(), pending_images.begin(), pending_images.end());
    pending_images.clear();
    if (tmpl)
      messages.push_back({{"role", "assistant"},
                          {"content", printer->content()},
                          {"reasoning_content", printer->reasoning()}});
    if (!f.quiet) print_stats(*st);
    else if (!interactive) std::fputc('\n', stdout);
    return 0;
  }

  static void help() {
    std::fputs("/image PATH   attach an image (PNG, JPEG, WebP, GIF) to your next message\n"
               "/reset        clear the history and the attached images\n"
               "/exit, /quit  leave (or Ctrl-D)\n"
               "/help         this list\n"
               "Ctrl-C stops an answer\n", stdout);
  }

  void repl() {
    if (!f.quiet)
      std::fprintf(stderr, "qwen35 chat: /image PATH attaches an image, /reset clears the history, /exit or "
                           "Ctrl-D leaves, Ctrl-C stops an answer, /help lists these\n");
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
        reset_history();
        std::fputs("(history cleared)\n", stdout);
        continue;
      }
      if (line == "/help") {
        help();
        continue;
      }
      if (line == "/image" || line.rfind("/image ", 0) == 0) {
        const size_t b = line.find_first_not_of(' ', 6);
        const size_t e = line.find_last_not_of(' ');
        if (b == std::string::npos) {
          fail("run", "/image needs a file: /image PATH");
        } else if (auto st = attach(line.substr(b, e + 1 - b)); !st.ok()) {
          fail("run", "/image: " + st.message());
        } else {
          std::printf("(image attached to your next message: %zu waiting)\n", pending_images.size());
        }
        continue;
      }
      if (line.empty()) continue;
      turn(line, true);
    }
    std::fputc('\n', stdout);
  }
};

}  // namespace

int cmd_run(int argc, char** argv) {
  flags::App app{"Generate text: a completion of -p PROMPT, or an interactive chat", "qwen35 run"};
  Flags f;
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: Ctrl-C also interrupts a pending read
  const bool interactive = app.count("--prompt") == 0;
  const bool chat = f.chat || interactive || !f.images.empty();
  if (f.ctx < 2) return fail("run", "--ctx must be at least 2");
  if (f.hide_reasoning && !chat)
    return fail("run", "--hide-reasoning needs a chat (--chat, or no -p for the interactive chat)");
  auto tok = load_tokenizer(f.lo.model_dir);
  if (!tok.ok()) return fail("run", tok.message());
  auto gen_cfg = load_generation_config(f.lo.model_dir);
  if (!gen_cfg.ok()) return fail("run", gen_cfg.message());
  runtime::SamplingParams sp = sampling_params(f, *gen_cfg);
  if (f.reasoning_budget >= 0) {
    if (!chat) return fail("run", "--reasoning-budget needs the chat template (--chat, or no -p)");
    sp.reasoning_budget = f.reasoning_budget;
    sp.think_start = tok->token_to_id("<think>");
    sp.think_end = tok->token_to_id("</think>");
    if (sp.think_end < 0) return fail("run", "--reasoning-budget: this model's vocabulary has no </think> token");
  } else if (f.reasoning_budget < -1) {
    return fail("run", "--reasoning-budget must be >= 0 (or -1: no cap)");
  }
  if (auto s = sp.validate(); !s.ok()) return fail("run", s.message());
  std::optional<tmpl::ChatTemplate> tmpl;
  if (chat) {
    auto t = load_chat_template(f.lo.model_dir);
    if (!t.ok()) return fail("run", t.message());
    tmpl = std::move(*t);
  }
  Pipeline pipe;  // under mpirun -np N > 1: this rank's layers (cli/pipeline_setup.h)
  auto lm = load_pipelined(f.lo, f.pipe, f.ctx, 1, &pipe);
  if (!lm.ok()) return pipe.report ? fail("run", lm.message()) : 1;
  if (!pipe.leader()) return pipe.follow();
  model::Model& m = *lm->model;
  if (!f.images.empty() && !m.has_vision()) {  // before the weights are read in
    fail("run", "--image: this checkpoint takes no images (" + m.weights().vision_problem + ")");
    return 2;
  }
  const bool tty = isatty(STDERR_FILENO) && !f.quiet;
  if (!pipe.split())  // a rank has read its own tensors' pages only (load_pipelined)
    m.weights().prefault(tty ? progress_bar : std::function<void(size_t, size_t)>());

  runtime::EngineOptions eo;
  eo.parallel = 1;
  eo.ctx = f.ctx;
  eo.step_tokens = 512;  // prefill pieces of a long prompt; the workspace stays bounded
  if (f.cache_mb < 0) return fail("run", "--cache-mb must be >= 0");
  const bool cache = interactive && !f.no_cache && f.cache_mb > 0;
  eo.cache_bytes = cache ? int64_t(f.cache_mb * (1 << 20)) : 0;
  if (const std::string why = resolve_spec(f.spec, m, &eo.spec, pipe.split() ? &pipe.mtp_problem : nullptr);
      !why.empty())
    return fail("run", why);
  if (pipe.split()) {  // steps through the ranks, the MTP head's drafts from the last (engine_options.h)
    eo.forward = pipe.engine_forward(eo.ctx);
    if (eo.spec.method == runtime::SpecMethod::kMtp) eo.draft = pipe.engine_draft(eo.ctx, f.spec.draft_vocab);
  }
  const std::vector<int32_t> ends = eos_ids(*gen_cfg, m.config(), *tok, chat);
  if (!f.json_schema.empty() || f.json) {
    if (!f.json_schema.empty() && f.json) return fail("run", "--json and --json-schema exclude each other");
    core::Result<grammar::Grammar> g = core::error("");
    if (f.json) {
      g = grammar::json_object_grammar();
    } else {
      std::ifstream in(f.json_schema, std::ios::binary);
      if (!in) return fail("run", "--json-schema: cannot read " + f.json_schema);
      std::stringstream ss;
      ss << in.rdbuf();
      const OrderedJson schema = OrderedJson::parse(ss.str(), nullptr, false);
      if (schema.is_discarded()) return fail("run", "--json-schema: " + f.json_schema + " is not valid JSON");
      g = grammar::json_schema_grammar(schema);
    }
    if (!g.ok()) return fail("run", (f.json ? "--json: " : "--json-schema: ") + g.message());
    if (ends.empty()) return fail("run", "--json-schema: the model has no end-of-sequence token");
    sp.grammar = std::make_shared<grammar::Automaton>(
        std::move(*g), server::grammar_vocab(*tok, m.config().vocab), ends);
    if (chat) {
      sp.think_start = tok->token_to_id("<think>");
      sp.think_end = tok->token_to_id("</think>");
    }
    const int64_t need = sp.grammar->finish_tokens(sp.grammar->initial()) + 2;
    if (f.max_tokens >= 0 && f.max_tokens < need)
      return fail("run", "-n " + std::to_string(f.max_tokens) + " is too small for this format: it needs up to " +
                             std::to_string(need) + " tokens to be sure of a whole value");
  }
  runtime::Engine engine(m, eo);
  Session s{f, *tok, std::move(tmpl), engine, m, {}};
  s.base.sampling = sp;
  s.base.max_tokens = f.max_tokens < 0 ? -1 : f.max_tokens;
  s.base.eos_ids = ends;
  s.display = f.hide_reasoning               ? ReasoningDisplay::kHidden
              : isatty(STDOUT_FILENO) != 0 ? ReasoningDisplay::kDim
                                           : ReasoningDisplay::kTagged;
  s.indicator = tty;
  if (f.no_think) s.kwargs["enable_thinking"] = false;
  s.base.image_token = image_token_id(m.config(), *tok);
  s.reset_history();
  if (!f.images.empty()) {
    // A checkpoint without a tower cannot take the request at all: a usage error (status 2).
    if (const std::string& why = s.image_problem(); !why.empty()) {
      fail("run", "--image: this checkpoint takes no images (" + why + ")");
      return 2;
    }
    for (const std::string& path : f.images)
      if (auto st = s.attach(path); !st.ok()) return fail("run", "--image: " + st.message());
  }
  g_loading.store(false);
  if (!interactive) return s.turn(f.prompt, false);
  s.repl();
  return 0;
}

}  // namespace qwen35::cli
