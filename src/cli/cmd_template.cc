// qwen35 template: renders the chat template of a model directory (docs/design.md §7).
//   qwen35 template -m DIR --messages FILE.json [--tools FILE.json] [--no-generation-prompt]
//                   [--kwargs '{"enable_thinking":false}']
//   qwen35 template -m DIR --jsonl FILE   # one case per line -> {"rendered": ...} | {"error": ...}
#include "cli/flags.h"
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/model_assets.h"
#include "cli/commands.h"
#include "template/chat_template.h"

namespace qwen35::cli {

namespace {

using OrderedJson = nlohmann::ordered_json;

bool read_json_file(const std::string& path, OrderedJson* out, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = path + ": cannot open";
    return false;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = OrderedJson::parse(ss.str(), nullptr, false);
  if (out->is_discarded()) {
    *err = path + ": invalid JSON";
    return false;
  }
  return true;
}

std::string dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// One case object per line: {messages, tools?, add_generation_prompt?, kwargs?}.
OrderedJson render_case(const tmpl::ChatTemplate& tmpl, const std::string& line) {
  const OrderedJson c = OrderedJson::parse(line, nullptr, false);
  if (c.is_discarded() || !c.is_object()) return OrderedJson{{"error", "line is not a JSON object"}};
  const OrderedJson messages = c.value("messages", OrderedJson::array());
  const OrderedJson tools = c.value("tools", OrderedJson());
  const OrderedJson kwargs = c.value("kwargs", OrderedJson::object());
  const OrderedJson agp = c.value("add_generation_prompt", OrderedJson(false));
  if (!agp.is_boolean()) return OrderedJson{{"error", "add_generation_prompt must be a boolean"}};
  auto r = tmpl.render(messages, tools, agp.get<bool>(), kwargs);
  if (!r.ok()) return OrderedJson{{"error", r.message()}};
  return OrderedJson{{"rendered", r.value()}};
}

}  // namespace

int cmd_template(int argc, char** argv) {
  const std::string cmd = "template";
  flags::App app{"Render the model's chat template", "qwen35 template"};
  std::string dir, messages_path, tools_path, kwargs_text, jsonl_path;
  bool no_generation_prompt = false;
  app.add_option("-m,--model", dir,
                 "model directory (chat_template.jinja or tokenizer_config.json) or .gguf file")
      ->required();
  app.add_option("--messages", messages_path, "JSON file with the list of messages");
  app.add_option("--tools", tools_path, "JSON file with the list of tool schemas");
  app.add_flag("--no-generation-prompt", no_generation_prompt,
               "do not open an assistant turn at the end");
  app.add_option("--kwargs", kwargs_text, "JSON object of extra template variables");
  app.add_option("--jsonl", jsonl_path,
                 "render one case object per line; print {\"rendered\"} or {\"error\"} lines");
  try {
    app.parse(argc, argv);
  } catch (const flags::CallForHelp& e) {
    return app.exit(e);
  } catch (const flags::ParseError& e) {
    return fail(cmd, e.what());
  }
  if (messages_path.empty() == jsonl_path.empty())
    return fail(cmd, "give exactly one of --messages FILE or --jsonl FILE");

  auto tmpl = load_chat_template(dir);
  if (!tmpl.ok()) return fail(cmd, tmpl.message());

  if (!jsonl_path.empty()) {
    std::ifstream in(jsonl_path, std::ios::binary);
    if (!in) return fail(cmd, jsonl_path + ": cannot open");
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string out = dump(render_case(*tmpl, line)) + "\n";
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return std::fflush(stdout) == 0 ? 0 : fail(cmd, "cannot write to stdout");
  }

  std::string err;
  OrderedJson messages, tools;
  if (!read_json_file(messages_path, &messages, &err)) return fail(cmd, err);
  if (messages.is_object() && messages.contains("messages")) messages = OrderedJson(messages["messages"]);
  if (!tools_path.empty() && !read_json_file(tools_path, &tools, &err)) return fail(cmd, err);
  OrderedJson kwargs = OrderedJson::object();
  if (!kwargs_text.empty()) {
    kwargs = OrderedJson::parse(kwargs_text, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object())
      return fail(cmd, "--kwargs must be a JSON object");
  }
  auto r = tmpl->render(messages, tools, !no_generation_prompt, kwargs);
  if (!r.ok()) return fail(cmd, r.message());
  std::fwrite(r->data(), 1, r->size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : fail(cmd, "cannot write to stdout");
}

}  // namespace qwen35::cli
