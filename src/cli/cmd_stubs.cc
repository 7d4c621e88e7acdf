// Subcommands whose implementation has not landed yet. Each moves to its own cmd_<name>.cc.
#include "cli/commands.h"

namespace qwen35::cli {
int cmd_tokenize(int, char**) { return fail("tokenize", "not implemented yet"); }
int cmd_detokenize(int, char**) { return fail("detokenize", "not implemented yet"); }
int cmd_synth(int, char**) { return fail("synth", "not implemented yet"); }
int cmd_inspect(int, char**) { return fail("inspect", "not implemented yet"); }
int cmd_logits(int, char**) { return fail("logits", "not implemented yet"); }
}  // namespace qwen35::cli
