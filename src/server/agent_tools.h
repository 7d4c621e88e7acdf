// Tools as coding agents send them (Codex CLI on the Responses API, Claude Code on Messages),
// read into the chat template's function tools:
//   function                      as it is
//   namespace {name, tools}       flattened: each tool it holds becomes a function tool under its
//                                 own name (or "NAMESPACE.NAME" where two would share a name);
//                                 a call is answered under the name and namespace the client
//                                 gave (Codex looks a call up by both)
//   custom {name, format}         free-form input: offered as a function of one string
//                                 parameter, "input", and answered as a custom_tool_call whose
//                                 input is that text. A regex grammar the grammar engine takes
//                                 becomes the parameter's `pattern` (so a forced call is
//                                 constrained by it); a Lark grammar, or a regex it cannot take,
//                                 is shown to the model in the parameter's description and left
//                                 free, with a warning
//   anything else                 tools the server cannot run (web_search, file_search,
//                                 code_interpreter, image_generation, tool_search, computer use,
//                                 MCP, local_shell, ...): left out of the prompt, with a warning
//                                 that names each; serve --strict-tools refuses them instead
// Warnings reach the client as the X-Qwen35-Warnings header and, in a Response or Message, a
// "warnings" list.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/request.h"

namespace qwen35::server {

// The one parameter a custom tool is offered with.
inline constexpr const char* kCustomInput = "input";
inline constexpr const char* kWarningsHeader = "X-Qwen35-Warnings";

// What a tool name the model sees stands for in the client's API.
struct ToolOrigin {
  std::string name;    // the client's name of the tool
  std::string ns;      // the namespace tool it came from ("" for none)
  bool custom = false;  // a custom tool: its call's input is the "input" parameter's text
};

struct AgentTools {
  std::map<std::string, ToolOrigin> by_model;  // model-facing name -> the client's tool
  std::vector<std::string> warnings;

  // The client's tool behind a model-facing name; null when it is a plain function tool or
  // unknown.
  const ToolOrigin* origin(const std::string& model_name) const;
  // The model-facing name of the client's tool `name` in namespace `ns` ("" for none): what a
  // call in the history is rendered as, so that it reads as the model wrote it.
  std::string model_name(const std::string& ns, const std::string& name) const;
};

// The Responses API's `tools` (validated here; errors name "tools[i]...") -> the template's
// function tools (*fn) and what their names stand for (*out).
std::optional<ApiError> read_responses_tools(const Json& tools, const ModelInfo& mi, Json* fn,
                                             AgentTools* out);

// The warning for a tool left out (`what` names it: "tools[2] (web_search)").
std::string left_out_warning(const std::string& what);

// The header value of a request's warnings: joined by "; ", every byte outside printable ASCII
// replaced by '?' (client strings may appear in them).
std::string warnings_header(const std::vector<std::string>& warnings);

}  // namespace qwen35::server
