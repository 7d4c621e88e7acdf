// qwen35: the command-line entry point (docs/design.md §7).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "core/log.h"
#include "dist/comm.h"

namespace qwen35::cli {

int fail(const std::string& cmd, const std::string& message) {
  std::fprintf(stderr, "qwen35 %s: %s\n", cmd.c_str(), message.c_str());
  return 1;
}

namespace {
struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};
const Command kCommands[] = {
    {"run", cmd_run, "generate text: a completion, or an interactive chat"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching"},
    {"loadtest", cmd_loadtest, "concurrent streaming clients against a running server"},
    {"inspect", cmd_inspect, "geometry, layer pattern, quantization, memory and support verdict"},
    {"logits", cmd_logits, "run the forward pass on token ids and write logits as .npy"},
    {"bench", cmd_bench, "prompt and generation tokens/s against the memory-bandwidth roofline"},
    {"synth", cmd_synth, "write a random-weight checkpoint at a real Qwen3.5 geometry"},
    {"tokenize", cmd_tokenize, "text to token ids (JSON array)"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"template", cmd_template, "render the model's chat template"},
    {"devices", cmd_devices, "the Vulkan devices, their features, and whether qwen35 runs on each"},
};

void usage(FILE* f) {
  std::fprintf(f, "usage: qwen35 <command> [options]   (qwen35 <command> --help for details)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(f, "  %-11s %s\n", c.name, c.help);
}
}  // namespace
}  // namespace qwen35::cli

int main(int argc, char** argv) {
  using namespace qwen35;
  if (const char* lv = std::getenv("QWEN35_LOG")) {
    core::LogLevel level;
    if (core::parse_log_level(lv, &level)) core::set_log_level(level);
  }
  if (argc < 2) {
    cli::usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    cli::usage(stdout);
    return 0;
  }
  // Under mpirun with more than one rank the model is split by layers (cli/pipeline_setup.h):
  // the commands that take part in the step protocol so far.
  if (dist::launched_world_size() > 1 && cmd != "logits" && cmd != "run" && cmd != "serve" &&
      cmd != "bench") {
    if (dist::launched_rank() == 0)  // one line for the job
      std::fprintf(stderr, "qwen35 %s: does not run split over MPI ranks yet (logits, run, serve and bench do); run it without mpirun\n",
                   cmd.c_str());
    return 2;
  }
  for (const auto& c : cli::kCommands)
    if (cmd == c.name) return c.fn(argc - 1, argv + 1);
  std::fprintf(stderr, "qwen35: unknown command '%s'\n", cmd.c_str());
  cli::usage(stderr);
  return 2;
}
