// The `qwen35` subcommands. Each takes the arguments after its name (argv[0] is the subcommand)
// and returns the process exit code. Errors go to stderr as one line: "qwen35 <cmd>: <what>".
#pragma once

#include <string>

namespace qwen35::cli {

int cmd_run(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_loadtest(int argc, char** argv);
int cmd_devices(int argc, char** argv);

// Prints "qwen35 <cmd>: <message>" to stderr and returns 1.
int fail(const std::string& cmd, const std::string& message);

}  // namespace qwen35::cli
