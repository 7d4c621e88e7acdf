#include "template/chat_template.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_parser.h"

namespace qwen35::tmpl {

struct ChatTemplate::Program {
  jinja::Body body;
};

namespace {

core::Status template_error(const jinja::TemplateError& e) {
  std::string msg = "[chat_template] ";
  if (e.line() > 0) msg += "line " + std::to_string(e.line()) + ": ";
  return core::error(msg + e.message());
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return f.good() || f.eof();
}

// tokenizer_config.json stores special tokens as strings or AddedToken objects {"content": ...}.
nlohmann::ordered_json token_text(const nlohmann::ordered_json& t) {
  if (t.is_string()) return t;
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"];
  return nullptr;
}

nlohmann::ordered_json special_token_vars(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    nlohmann::ordered_json t = token_text(config[key]);
    if (!t.is_null()) vars[key] = t;
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      nlohmann::ordered_json s = token_text(t);
      if (!s.is_null()) list.push_back(s);
    }
    vars["additional_special_tokens"] = list;
  }
  return vars;
}

// Values in `j` (containers and scalars), counted without recursion: the input may nest deeply.
uint64_t count_values(const nlohmann::ordered_json& j) {
  uint64_t n = 0;
  std::vector<const nlohmann::ordered_json*> todo = {&j};
  while (!todo.empty()) {
    const nlohmann::ordered_json* v = todo.back();
    todo.pop_back();
    ++n;
    if (v->is_structured())
      for (const auto& x : *v) todo.push_back(&x);
  }
  return n;
}

}  // namespace

core::Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  try {
    auto program = std::make_shared<Program>();
    program->body = jinja::parse_template(source);
    ChatTemplate t;
    t.source_ = std::move(source);
    t.program_ = std::move(program);
    return t;
  } catch (const jinja::TemplateError& e) {
    return template_error(e);
  } catch (const std::exception& e) {
    return core::error(std::string("[chat_template] internal error: ") + e.what());
  }
}

core::Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools,
                                               bool add_generation_prompt,
                                               const nlohmann::ordered_json& extra_kwargs,
                                               bool* over_limit, std::string* reason) const {
  if (over_limit) *over_limit = false;
  if (!program_) return core::error("[chat_template] render of an empty template");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    return core::error("[chat_template] template kwargs must be a JSON object");
  try {
    jinja::Dict globals;
    jinja::add_globals(globals);
    auto global_frame = std::make_shared<jinja::Frame>();
    for (const auto& [k, v] : globals.items()) global_frame->vars[k] = v;
    auto root = std::make_shared<jinja::Frame>(jinja::Frame{{}, global_frame});
    for (const auto& [k, v] : default_vars_.items()) root->vars[k] = jinja::from_json(v);
    root->vars["messages"] = jinja::from_json(messages);
    root->vars["tools"] = jinja::from_json(tools);
    root->vars["documents"] = jinja::Value::none();
    root->vars["add_generation_prompt"] = jinja::Value::boolean(add_generation_prompt);
    if (extra_kwargs.is_object())
      for (const auto& [k, v] : extra_kwargs.items()) root->vars[k] = jinja::from_json(v);
    jinja::Limits limits = limits_;  // the step bound grows with the input (jinja::Limits)
    limits.max_steps += limits.steps_per_input_value *
                        (count_values(messages) + count_values(tools) + count_values(extra_kwargs));
    jinja::Interpreter interp{limits};
    return interp.render(program_->body, root);
  } catch (const jinja::TemplateError& e) {
    if (over_limit) *over_limit = e.over_limit();
    if (reason) *reason = e.message();
    return template_error(e);
  } catch (const std::exception& e) {
    if (reason) *reason = "internal error";
    return core::error(std::string("[chat_template] internal error: ") + e.what());
  }
}

bool ChatTemplate::is_reserved(const std::string& name) const {
  static const jinja::Dict globals = [] {
    jinja::Dict d;
    jinja::add_globals(d);
    return d;
  }();
  for (const auto& [k, v] : globals.items())
    if (k == name) return true;
  return default_vars_.contains(name);
}

core::Result<ChatTemplate> load_chat_template(const std::string& dir) {
  std::string config_text;
  nlohmann::ordered_json config;
  if (read_file(dir + "/tokenizer_config.json", &config_text)) {
    config = nlohmann::ordered_json::parse(config_text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return core::error("[chat_template] " + dir + "/tokenizer_config.json: not a JSON object");
  }
  std::string source;
  if (!read_file(dir + "/chat_template.jinja", &source)) {
    if (config.is_null() || !config.contains("chat_template"))
      return core::error("[chat_template] " + dir +
                         ": no chat_template.jinja and no chat_template in tokenizer_config.json");
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      bool found = false;
      for (const auto& entry : ct) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found)
        return core::error("[chat_template] " + dir +
                           "/tokenizer_config.json: chat_template list has no \"default\" entry");
    } else {
      return core::error("[chat_template] " + dir +
                         "/tokenizer_config.json: chat_template is neither a string nor a list");
    }
  }
  auto t = ChatTemplate::parse(std::move(source));
  if (!t.ok()) return t.status();
  if (config.is_object()) t->set_default_vars(special_token_vars(config));
  return t;
}

}  // namespace qwen35::tmpl
