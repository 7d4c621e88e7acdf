// Subcommands whose implementation has not landed yet. Each moves to its own cmd_<name>.cc.
#include "cli/commands.h"

namespace qwen35::cli {
int cmd_template(int, char**) { return fail("template", "not implemented yet"); }
}  // namespace qwen35::cli
