// qwen35 serve -m DIR [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N] ...
// An OpenAI-compatible HTTP server. It listens first (/health says 503 while the model loads),
// then loads the model and starts the engine. SIGINT/SIGTERM: stop accepting, cancel in-flight
// requests (streams end with finish_reason "abort" and [DONE]), drop whatever is left after
// --shutdown-grace, exit 0. SIGTERM with --drain-s N first drains: /ready fails, the listener
// closes, and requests already here get up to N s to finish (docs/design.md "Replicas behind a
// load balancer").
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include "cli/flags.h"
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/cache_lock.h"
#include "cli/device_select.h"
#include "cli/model_assets.h"
#include "cli/commands.h"
#include "cli/model_loader.h"
#include "cli/pipeline_setup.h"
#include "cli/spec_flags.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "runtime/engine.h"
#include "runtime/image_encoder.h"
#include "server/server.h"
#include "server/structured.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

std::string model_name(const std::string& dir) {
  std::filesystem::path p(dir);
  while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  const std::string name = formats::is_gguf_path(dir) ? p.stem().string() : p.filename().string();
  return name.empty() ? dir : name;
}

// SIGTERM with --drain-s: readiness fails and the listener closes at once (a balancer moves new
// work to the other replicas), while the requests already here run on, for up to `seconds`.
// Watching the engine's counts and the open exchanges is a wait for a state, bounded by the
// deadline; whatever is left then is cancelled by the shutdown that follows.
void drain(server::Server& srv, runtime::Engine& engine, double seconds) {
  std::fprintf(stderr, "qwen35 serve: draining (up to %g s)\n", seconds);
  std::fflush(stderr);
  srv.begin_drain();
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (Clock::now() < until) {
    const runtime::EngineStats st = engine.stats();
    if (st.running == 0 && st.queued == 0 && srv.in_flight() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const runtime::EngineStats st = engine.stats();
  std::fprintf(stderr, "qwen35 serve: drained (%lld running, %lld queued left)\n",
               (long long)st.running, (long long)st.queued);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  flags::App app{"OpenAI-compatible HTTP server with continuous batching", "qwen35 serve"};
  LoadOptions lo;
  server::ServerOptions so;
  runtime::EngineOptions eo;
  std::string name;
  double mem_budget_mb = 0;
  runtime::ImageEncoderOptions image_opts;
  int max_images = 8;
  double image_max_mb = double(image_opts.limits.max_bytes) / (1 << 20);
  double image_cache_mb = double(image_opts.cache_bytes) / (1 << 20);
  app.add_option("-m,--model", lo.model_dir, "checkpoint directory (with tokenizer files) or .gguf file")
      ->required();
  app.add_option("--host", so.host, "address to bind (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port (0: any free port, printed on stderr)");
  app.add_option("--parallel", eo.parallel, "sequence slots: requests running at once");
  app.add_option("-c,--ctx", eo.ctx, "context tokens per slot (prompt + completion)");
  app.add_option("--max-queue", eo.max_queue,
                 "requests waiting beyond the slots (more get HTTP 429)");
  app.add_option("--step-tokens", eo.step_tokens,
                 "rows of one engine step (decode + prefill); its work is at most that many rows' "
                 "at a context of as many positions, so long prompts go in shorter chunks");
  app.add_option("--mem-budget-mb", mem_budget_mb,
                 "memory for the slots' recurrent state and the shared KV pool in MiB (0: a "
                 "pool for every slot at full context, resident only as used); a prompt the "
                 "pool cannot hold gets HTTP 400; requests take blocks as they grow, and when "
                 "the pool runs dry the youngest is preempted and resumes later, same tokens");
  double cache_mb = 1024;
  bool no_cache = false;
  app.add_option("--cache-mb", cache_mb,
                 "prefix cache: MiB of state snapshots and KV blocks kept for prompts that "
                 "begin the same way (least recently used evicted)");
  double cache_device_mb = 0;
  app.add_option("--cache-device-mb", cache_device_mb,
                 "prefix cache, with --device vulkan: MiB of device memory for state snapshots, so "
                 "that a resume moves nothing over the bus (counted in the device's memory at "
                 "start); past it snapshots are host memory within --cache-mb (default 0: all "
                 "host memory)");
  app.add_option("--cache-interval", eo.cache_interval,
                 "prefix cache: tokens between snapshots within a long prompt (a multiple of 64; "
                 "each prompt's last 64-token boundary is always one)");
  app.add_flag("--no-prefix-cache", no_cache, "compute every prompt from its first token");
  app.add_option("--cache-dir", eo.cache_dir,
                 "prefix cache: load snapshots from DIR at start and save them there at exit "
                 "(files of another checkpoint or mode, and damaged ones, are skipped)");
  SpecFlags spec;
  add_spec_flags(app, &spec);
  PipelineFlags pf;
  add_pipeline_flags(app, pf);
  app.add_option("--api-key", so.api_key,
                 "require 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
  app.add_option("--max-body", so.max_body_bytes,
                 "largest request body in bytes, any transfer encoding (more get HTTP 413)");
  int64_t reasoning_budget = -1;
  app.add_option("--reasoning-budget", reasoning_budget,
                 "default thinking budget of chat requests: at most N tokens of thinking, then "
                 "</think> is forced (-1: no cap; a request's thinking_token_budget or "
                 "reasoning_effort replaces it)");
  bool special_in_content = false;
  app.add_flag("--special-tokens-in-content", special_in_content,
               "match control tokens (<|im_end|>, ...) typed into chat content as tokens, as a "
               "plain tokenize of the rendered prompt does; by default they stay text, so that "
               "no message, tool result or tool definition can forge a turn");
  bool strict_tools = false;
  app.add_flag("--strict-tools", strict_tools,
               "refuse (HTTP 400) requests that carry tools the server cannot run or offer "
               "(web_search, file_search, image_generation, MCP, Anthropic's server tools, ...); "
               "by default they are left out of the prompt and a warning names them");
  server::GrammarLimits grammar_limits;
  app.add_option("--grammar-max-states", grammar_limits.max_states,
                 "structured outputs: the largest grammar a response_format or forced tool call "
                 "may compile to, in states (positions with every repeat written out: nested "
                 "repeats multiply their counts, properties add); a larger one gets HTTP 400 "
                 "before anything is built (default 250000)");
  double grammar_mb = double(grammar_limits.automaton_bytes >> 20);
  app.add_option("--grammar-max-mb", grammar_mb,
                 "structured outputs: MiB one grammar's token automaton may grow to while in use "
                 "(configurations, transitions, cached masks; masks are dropped first); a "
                 "request that needs it to grow further ends with an error (default 128)");
  double grammar_cache_mb = double(grammar_limits.cache_bytes >> 20);
  app.add_option("--grammar-cache-mb", grammar_cache_mb,
                 "structured outputs: MiB of automata kept for requests with the same format "
                 "(least recently used dropped; default 512)");
  int max_json_depth = server::kDefaultMaxJsonDepth;
  app.add_option("--max-json-depth", max_json_depth,
                 "deepest JSON nesting a request may use (deeper get HTTP 400)");
  app.add_option("--max-header", so.max_header_bytes,
                 "largest request head (request line + headers) in bytes (more get HTTP 431)");
  app.add_option("--read-timeout", so.read_timeout_s,
                 "seconds a whole request may take to arrive (slow or idle clients are closed)");
  app.add_option("--write-timeout", so.write_timeout_s,
                 "seconds one write may take (a client that stops reading is dropped)");
  app.add_option("--sse-keepalive", so.sse_keepalive_s,
                 "seconds a streamed answer may send nothing (a long prefill) before it gets an SSE "
                 "comment line, which clients skip, for clients and proxies that drop idle "
                 "responses (0: never)");
  app.add_option("--max-connections", so.max_connections,
                 "open connections in all (more are refused at accept)");
  app.add_option("--max-connections-per-client", so.max_connections_per_client,
                 "open connections from one client address");
  app.add_option("--io-threads", so.io_threads, "threads of the HTTP event loop (all connections)");
  app.add_option("--http-threads", so.http_threads,
                 "worker threads that parse, render templates and tokenize (0: 4)");
  app.add_option("--shutdown-grace", so.shutdown_grace_s,
                 "seconds in-flight answers get on SIGTERM before connections are dropped");
  app.add_option("--replica-id", so.replica_id,
                 "name this replica: every answer carries 'X-Qwen35-Replica: ID' (behind a load "
                 "balancer, which replica served it)");
  std::vector<std::string> trusted_proxies;
  app.add_option("--trusted-proxy", trusted_proxies,
                 "a load balancer's address or network (CIDR, repeatable): its connections are "
                 "not capped per address; each request counts against "
                 "--max-connections-per-client as the client its X-Forwarded-For / Forwarded "
                 "names");
  app.add_option("--ready-queue", so.ready_queue,
                 "GET /ready answers 503 while this many requests wait for a slot (0: the queue "
                 "never makes it fail), so a balancer sends new work elsewhere");
  double drain_s = 0;
  app.add_option("--drain-s", drain_s,
                 "SIGTERM: /ready fails and no connection is accepted at once, requests already "
                 "here get up to N seconds to finish, then what is left ends as cancelled "
                 "(0: cancel at once, as with SIGINT)");
  bool no_web = false;
  app.add_flag("--no-web", no_web, "no chat page at / (the API only)");
  app.add_option("--web-dir", so.web_dir,
                 "serve the chat page's files from DIR first (to work on the page without "
                 "rebuilding; files DIR lacks come from the binary)");
  app.add_option("--served-model-name", name, "model name in the API (default: the folder name)");
  app.add_option("-t,--threads", lo.threads, "compute threads (0 = all cores)");
  app.add_option("--mmproj", lo.mmproj,
                 "GGUF models: the vision tower's mmproj file (default: the one mmproj*.gguf "
                 "beside the model, if any)");
  app.add_option("--max-images", max_images, "images one request may carry (default 8; 0: none)");
  app.add_option("--image-max-mb", image_max_mb,
                 "largest encoded image accepted, in MiB (default 20; the body limit --max-body "
                 "bounds all images of a request together, base64 included)");
  app.add_option("--image-max-pixels", image_opts.limits.max_pixels,
                 "largest image accepted, width x height as its header declares it, checked "
                 "before decoding (default 50000000)");
  app.add_option("--image-threads", so.image_lane.threads,
                 "threads that decode and resize images, one request's images each, apart from "
                 "the HTTP workers so that text requests never wait behind images (the vision "
                 "tower itself runs in the engine's steps; default 2, at most 64)");
  app.add_option("--image-queue", so.image_lane.queue,
                 "requests with images waiting for an image thread; more get HTTP 429 with "
                 "Retry-After (default 8)");
  double image_mem_mb = 2048, image_request_mb = 1024;
  app.add_option("--image-mem-mb", image_mem_mb,
                 "memory for decoding images, all requests together, in MiB, counted from the "
                 "image headers before decoding (pixels, resize, patch rows); a request that finds "
                 "it full gets HTTP 429 with Retry-After (default 2048; part of --mem-budget-mb)");
  app.add_option("--image-request-mb", image_request_mb,
                 "memory one request's images may take to decode, in MiB; more is HTTP 400 "
                 "(default 1024, at most --image-mem-mb)");
  app.add_option("--image-cache-mb", image_cache_mb,
                 "memory for recent images (their patch rows, then the vision tower's output), so "
                 "that a conversation that repeats an image does not run the tower again "
                 "(default 256; 0: none)");
  app.add_option("--load", lo.load_mode, kLoadModeHelp);
  app.add_option("--device", lo.device, flags::kDeviceHelp);
  app.add_flag("--fast", lo.fast, "int8 activations for quantized matmuls: MLX, and the GGUF block types (faster; not bit-identical to the exact mode; concurrent == solo still holds within the mode)");
  app.add_flag("--no-amx", lo.no_amx, kNoAmxHelp);
  app.add_option("--kv-type", lo.kv_type, kKvTypeHelp);
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
  if (eo.parallel < 1) return fail("serve", "--parallel must be at least 1");
  if (eo.ctx < 2) return fail("serve", "--ctx must be at least 2");
  if (eo.max_queue < 0) return fail("serve", "--max-queue must be >= 0");
  if (max_json_depth < 1) return fail("serve", "--max-json-depth must be at least 1");
  if (!(cache_device_mb >= 0)) return fail("serve", "--cache-device-mb must be >= 0");
  if (cache_device_mb > 0 && lo.device.find("vulkan") == std::string::npos)
    return fail("serve", "--cache-device-mb keeps snapshots in a device's memory: it needs --device vulkan");
  if (max_images < 0 || !(image_max_mb > 0) || !(image_cache_mb >= 0) || image_opts.limits.max_pixels < 1)
    return fail("serve", "--max-images and --image-cache-mb must be >= 0, "
                         "--image-max-mb and --image-max-pixels > 0");
  if (so.image_lane.threads < 1 || so.image_lane.threads > server::kMaxImageThreads)
    return fail("serve", "--image-threads must be in [1, " + std::to_string(server::kMaxImageThreads) + "], got " +
                             std::to_string(so.image_lane.threads));
  if (so.image_lane.queue < 0) return fail("serve", "--image-queue must be >= 0");
  if (!(image_request_mb >= 1) || !(image_mem_mb >= image_request_mb))
    return fail("serve", "--image-request-mb must be >= 1 and --image-mem-mb at least as large");
  if (const char* gate = std::getenv("QWEN35_TEST_IMAGE_GATE")) so.image_lane.gate_file = gate;
  image_opts.limits.max_bytes = size_t(image_max_mb * (1 << 20));
  image_opts.cache_bytes = size_t(image_cache_mb * (1 << 20));
  if (reasoning_budget < -1) return fail("serve", "--reasoning-budget must be >= 0 (or -1: no cap)");
  if (grammar_limits.max_states < 1 || !(grammar_mb >= 1) || !(grammar_cache_mb >= 0))
    return fail("serve", "--grammar-max-states and --grammar-max-mb must be >= 1, "
                         "--grammar-cache-mb >= 0");
  grammar_limits.automaton_bytes = size_t(grammar_mb * (1 << 20));
  grammar_limits.cache_bytes = size_t(grammar_cache_mb * (1 << 20));
  so.web = !no_web;
  if (std::error_code ec; !so.web_dir.empty() && !std::filesystem::is_directory(so.web_dir, ec))
    return fail("serve", "--web-dir " + so.web_dir + " is not a directory");
  if (so.io_threads < 1 || so.http_threads < 0)
    return fail("serve", "--io-threads must be >= 1 and --http-threads >= 0");
  if (!(so.read_timeout_s > 0) || !(so.write_timeout_s > 0) || so.shutdown_grace_s < 0)
    return fail("serve", "--read-timeout and --write-timeout must be > 0, --shutdown-grace >= 0");
  if (!(so.sse_keepalive_s >= 0) || so.sse_keepalive_s > 86400)
    return fail("serve", "--sse-keepalive must be in [0, 86400] seconds");
  if (so.ready_queue < 0 || !(drain_s >= 0))
    return fail("serve", "--ready-queue and --drain-s must be >= 0");
  for (const auto& t : trusted_proxies) {
    auto c = server::Cidr::parse(t);
    if (!c.ok()) return fail("serve", "--trusted-proxy " + c.message());
    so.trusted_proxies.push_back(*c);
  }
  if (so.max_connections < 1 || so.max_connections_per_client < 1)
    return fail("serve", "--max-connections and --max-connections-per-client must be >= 1");
  // Each connection is a descriptor: raise the soft limit as far as allowed.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  // Signals go to one waiting thread; every other thread (HTTP, engine, pool) blocks them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> stop{false};
  std::atomic<int> stop_signal{0};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    stop_signal.store(sig);
    stop.store(true);
  });
  auto finish = [&](int code) {
    if (!stop.load()) pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    return code;
  };

  // Under mpirun -np N > 1 rank 0 serves HTTP; the others hold later layers (cli/pipeline_setup.h).
  const bool follower = dist::launched_world_size() > 1 && dist::launched_rank() > 0;
  // One server per --cache-dir, and a folder that cannot hold the cache refuses the start before
  // anything listens (cli/cache_lock.h). Held until this function returns, after the save.
  CacheDirLock cache_lock;
  if (!eo.cache_dir.empty() && !no_cache) {
    auto l = CacheDirLock::acquire(eo.cache_dir,
                                   dist::launched_world_size() > 1 ? dist::launched_rank() : -1);
    if (!l.ok()) return finish(fail("serve", l.message()));
    cache_lock = std::move(*l);
  }
  server::Server srv(so);
  core::Result<int> port = 0;
  if (!follower) {
    port = srv.bind();
    if (!port.ok()) return finish(fail("serve", port.message()));
    srv.start();
    std::fprintf(stderr, "qwen35 serve: listening on http://%s:%d\n", so.host.c_str(), *port);
    std::fflush(stderr);
  }

  auto tok = load_tokenizer(lo.model_dir);
  if (!tok.ok()) return finish(fail("serve", tok.message()));
  auto gen_cfg = load_generation_config(lo.model_dir);
  if (!gen_cfg.ok()) return finish(fail("serve", gen_cfg.message()));
  std::optional<tmpl::ChatTemplate> tmpl;
  if (auto t = load_chat_template(lo.model_dir); t.ok())
    tmpl = std::move(*t);
  else
    std::fprintf(stderr, "qwen35 serve: no chat template (%s); /v1/chat/completions is off\n",
                 t.message().c_str());
  Pipeline pipe;
  auto lm = load_pipelined(lo, pf, eo.ctx, eo.parallel, &pipe);
  if (!lm.ok()) return finish(pipe.report ? fail("serve", lm.message()) : 1);
  if (!pipe.leader()) {
    if (!eo.cache_dir.empty() && !no_cache)  // this rank's parts of the snapshot files
      pipe.stage->set_cache_files(pipe.cache_folder(eo.cache_dir, pipe.comm->rank()),
                                  pipe.cache_fingerprint(checkpoint_fingerprint(lo), pipe.comm->rank()));
    return finish(pipe.follow());
  }
  model::Model& m = *lm->model;
  if (!pipe.split()) m.weights().prefault({});  // a rank has read its own tensors' pages (load_pipelined)

  server::ModelInfo mi;
  mi.tok = &*tok;
  mi.tmpl = tmpl ? &*tmpl : nullptr;
  if (tmpl) mi.tool_format = server::tool_call_format(*tmpl);
  mi.defaults = runtime::sampling_defaults(*gen_cfg);
  for (int64_t e : gen_cfg->eos_token_ids) mi.eos_ids.push_back(int32_t(e));
  for (int64_t e : m.config().eos_token_ids) mi.eos_ids.push_back(int32_t(e));
  if (tok->eos_id() >= 0) mi.eos_ids.push_back(tok->eos_id());
  if (const int32_t im_end = tok->token_to_id("<|im_end|>"); im_end >= 0)
    mi.eos_ids.push_back(im_end);
  std::sort(mi.eos_ids.begin(), mi.eos_ids.end());
  mi.eos_ids.erase(std::unique(mi.eos_ids.begin(), mi.eos_ids.end()), mi.eos_ids.end());
  mi.name = name.empty() ? model_name(lo.model_dir) : name;
  mi.path = lo.model_dir;
  mi.ctx = eo.ctx;
  mi.kv_types = m.kv_types();
  mi.max_json_depth = max_json_depth;
  mi.reasoning_budget = reasoning_budget;
  mi.special_tokens_in_content = special_in_content;
  mi.strict_tools = strict_tools;
  if (const int64_t mp = m.config().max_position; mp > 0 && eo.ctx > mp)
    std::fprintf(stderr,
                 "qwen35 serve: warning: --ctx %lld is past the checkpoint's "
                 "max_position_embeddings (%lld); positions beyond it were never trained and "
                 "answers there may degrade\n",
                 (long long)eo.ctx, (long long)mp);
  // Images: the tower runs on its own pool beside the engine (runtime/image_encoder.h).
  auto processor = runtime::read_processor_config(lo.model_dir);
  if (!processor.ok()) return finish(fail("serve", processor.message()));
  image_opts.processor = *processor;
  image_opts.threads = 1;  // each image on its image-lane thread (server/image_lane.h)
  runtime::ImageEncoder images(m, image_opts);
  runtime::ImageBudget image_budget(int64_t(image_mem_mb * (1 << 20)));
  mi.images = &images;
  mi.max_images = max_images;
  mi.image_budget = &image_budget;
  if (const char* hold = std::getenv("QWEN35_TEST_IMAGE_HOLD")) mi.test_image_hold_file = hold;
  mi.image_request_bytes = int64_t(image_request_mb * (1 << 20));
  mi.image_token = m.config().vision.image_token_id >= 0 ? int32_t(m.config().vision.image_token_id)
                                                         : tok->token_to_id("<|image_pad|>");
  if (images.available())
    std::fprintf(stderr,
                 "qwen35 serve: images: up to %d per request, vision tower %s; decoding on %d threads "
                 "(queue %d) within %.0f MiB (%.0f MiB a request), image cache %.0f MiB\n",
                 max_images, m.weights().vision->source.c_str(), so.image_lane.threads, so.image_lane.queue,
                 image_mem_mb, image_request_mb, image_cache_mb);
  else
    std::fprintf(stderr, "qwen35 serve: images: off (%s)\n", images.why_not().c_str());
  mi.grammars = std::make_shared<server::GrammarCache>(
      server::grammar_vocab(*tok, m.config().vocab), grammar_limits);
  if (reasoning_budget >= 0 && tok->token_to_id("</think>") < 0)
    return finish(fail("serve", "--reasoning-budget: this model's vocabulary has no </think> token"));

  if (const std::string why = resolve_spec(spec, m, &eo.spec, pipe.split() ? &pipe.mtp_problem : nullptr);
      !why.empty())
    return finish(fail("serve", why));
  {
    // The recurrent state of every slot is allocated up front; the KV pool is reserved and
    // becomes resident as blocks are first written. The budget bounds both. With --spec a
    // slot's first verification adds its records (a second buffer of the state, the rows'
    // inputs: model/state.h); with --spec mtp each KV block holds the MTP head's layer too.
    const double mib = 1.0 / (1 << 20);
    // Under a split the MTP head's cache is the last rank's, not in rank 0's blocks.
    const bool mtp = eo.spec.method == runtime::SpecMethod::kMtp && !pipe.split();
    const double recurrent =
        double(m.new_state(1)->recurrent_bytes() +
               (eo.spec.method == runtime::SpecMethod::kOff
                    ? 0
                    : model::SequenceState::verify_bytes(m.config(), mtp))) *
        eo.parallel;
    const double block = double(m.new_pool(0, mtp)->block_bytes());  // the MTP head's layer too
    const int64_t per_slot = (eo.ctx + kernels::kKvBlock - 1) / kernels::kKvBlock;
    const int64_t full = per_slot * eo.parallel;
    eo.kv_blocks = full;
    // Images decoding and cached are part of the budget (docs/design.md "Image admission").
    const double image_mem = images.available() ? (image_mem_mb + image_cache_mb) * (1 << 20) : 0;
    if (mem_budget_mb > 0) {
      const double room = mem_budget_mb * (1 << 20) - recurrent - image_mem;
      const int64_t fits = block > 0 ? int64_t(std::max(0.0, room) / block) : full;
      if (fits < 1) {
        char why[320];
        std::snprintf(why, sizeof why,
                      "--mem-budget-mb %g leaves no room for the KV cache: the recurrent state of "
                      "%d slots takes %.1f MiB, images %.1f MiB (--image-mem-mb + --image-cache-mb), "
                      "and one KV block %.2f MiB",
                      mem_budget_mb, eo.parallel, recurrent * mib, image_mem * mib, block * mib);
        return finish(fail("serve", why));
      }
      eo.kv_blocks = std::min(full, fits);
    }
    std::fprintf(stderr,
                 "qwen35 serve: recurrent state %.1f MiB for %d slots; KV pool %lld positions "
                 "of %s (%.1f MiB when full, resident as used)\n",
                 recurrent * mib, eo.parallel, (long long)(eo.kv_blocks * kernels::kKvBlock),
                 kernels::kv_types_name(m.kv_types()).c_str(),
                 double(eo.kv_blocks) * block * mib);
    if (lm->device) {  // refused at start, before a request finds the device full
      const uint64_t snapshot_bytes = no_cache ? 0 : uint64_t(cache_device_mb * (1 << 20));
      if (auto st = lm->device->check_serving(eo.kv_blocks * kernels::kKvBlock, eo.parallel,
                                              eo.step_tokens, mtp, snapshot_bytes);
          !st.ok())
        return finish(fail("serve", "--device " + lo.device + ": " + st.message() +
                                        " (lower --ctx, --parallel, --step-tokens or --cache-device-mb)"));
    }
    if (eo.kv_blocks < per_slot)
      std::fprintf(stderr,
                   "qwen35 serve: warning: the KV pool holds fewer positions than --ctx; "
                   "longer requests get HTTP 400\n");
  }
  if (cache_mb < 0 || eo.cache_interval < kernels::kKvBlock)
    return finish(fail("serve", "--cache-mb must be >= 0 and --cache-interval >= 64"));
  eo.cache_bytes = no_cache ? 0 : int64_t(cache_mb * (1 << 20));
  eo.cache_device_bytes = no_cache ? 0 : int64_t(cache_device_mb * (1 << 20));
  if (pipe.split()) {  // steps through the ranks (runtime/engine_options.h)
    eo.forward = pipe.engine_forward(eo.ctx);
    if (eo.spec.method == runtime::SpecMethod::kMtp) eo.draft = pipe.engine_draft(eo.ctx, spec.draft_vocab);
  }

  // States with the MTP head's cache hold more than those without: their files stay apart.
  if (!eo.cache_dir.empty()) {
    for (const std::string& f : foreign_cache_folders(eo.cache_dir, pipe))
      std::fprintf(stderr, "qwen35 serve: warning: %s: prefix-cache files of another split or world size; "
                   "skipped\n", f.c_str());
    eo.cache_fingerprint =
        checkpoint_fingerprint(lo) ^ (eo.spec.method == runtime::SpecMethod::kMtp ? 0x6d7470ull : 0);
    if (pipe.split() && !no_cache) {  // each rank its own folder (dist/pipeline_cache.cc)
      eo.cache_fingerprint = pipe.cache_fingerprint(eo.cache_fingerprint, 0);
      eo.cache_dir = pipe.cache_folder(eo.cache_dir, 0);
      eo.cache_parts = pipe.cache_parts();
      eo.cache_layers_end = pipe.plan.ranks[0].end;
    }
  }
  runtime::Engine engine(m, eo);
  for (const auto& line : engine.cache_log()) std::fprintf(stderr, "qwen35 serve: %s\n", line.c_str());
  // A rank gone silent or a failed link: /health and /ready fail from then on (srv.stop() below
  // joins the server's threads before pipe.comm goes).
  // A lost device likewise, and the process then exits (below).
  std::shared_ptr<DeviceLink> device = lm->device;
  if (pipe.split() || device)
    srv.set_failure_probe([comm = pipe.split() ? pipe.comm.get() : nullptr, device] {
      std::string why = comm ? comm->failure() : std::string();
      return why.empty() && device ? device->failure() : why;
    });
  if (device) srv.set_metrics_source([device] { return device->metrics(); });
  srv.set_ready(std::move(mi), &engine);
  std::fprintf(stderr, "qwen35 serve: ready (model '%s', %d slots x %lld tokens)\n",
               (name.empty() ? model_name(lo.model_dir) : name).c_str(), eo.parallel,
               (long long)eo.ctx);
  if (so.web) {
    // A wildcard address is not one a browser can open: name this machine instead.
    const bool any = so.host == "0.0.0.0" || so.host == "::" || so.host.empty();
    const bool v6 = !any && so.host.find(':') != std::string::npos;
    std::fprintf(stderr, "qwen35 serve: chat page at http://%s%s%s:%d/\n", v6 ? "[" : "",
                 any ? "127.0.0.1" : so.host.c_str(), v6 ? "]" : "", *port);
  }
  std::fflush(stderr);
  bool lost = false;
  int failing_polls = 0;  // of the split's failure, 50 ms each
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // A rank gone: the engine thread ends its requests with the error as soon as its wait for
    // the rank gives up (dist/comm.h), but a step stuck where no wait polls (inside MPI, on a
    // link torn mid-message) would hold them until the job ends. So the HTTP side answers them
    // itself a moment later, before the job ends (dist/comm.cc's grace).
    if (pipe.split() && !pipe.comm->failure().empty() && ++failing_polls == 10)
      if (const int open = srv.abandon_jobs(pipe.comm->failure()); open > 0)
        std::fprintf(stderr, "qwen35 serve: %s: %d answers still open, answered here\n",
                     pipe.comm->failure().c_str(), open);
    if (device && !device->failure().empty()) {
      // Every step fails from here: the requests in flight end with the error, new ones get 503
      // (the failure probe), and the process exits non-zero for its supervisor to restart it.
      std::fprintf(stderr, "qwen35 serve: %s; exiting\n", device->failure().c_str());
      lost = true;
      break;
    }
  }

  if (lost) drain(srv, engine, std::max(drain_s, 5.0));
  else if (drain_s > 0 && stop_signal.load() == SIGTERM) drain(srv, engine, drain_s);
  std::fprintf(stderr, "qwen35 serve: shutting down\n");
  srv.begin_shutdown();              // no new connections or requests; idle ones close
  engine.shutdown(/*drain=*/false);  // in-flight requests end as cancelled ("abort")
  if (!eo.cache_dir.empty())
    std::fprintf(stderr, "qwen35 serve: %s\n", engine.cache_log().back().c_str());
  srv.stop();                        // their answers get --shutdown-grace, then all is dropped
  return finish(lost ? 1 : 0);
}

}  // namespace qwen35::cli
