// Chat templates: renders a model's Jinja chat template byte for byte as Hugging Face
// transformers' apply_chat_template does (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps(ensure_ascii=False); globals
// raise_exception and strftime_now). See tests/fixtures/chat_template/README.md for the Python
// semantics this reproduces. Anything the interpreter does not support fails with an error naming
// the line and the construct; runaway templates are cut off by step, depth and size limits.
//
// Thread-safety: a parsed ChatTemplate is immutable; render() may run concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"
#include "template/jinja_interp.h"

namespace qwen35::tmpl {

class ChatTemplate {
 public:
  // Errors: "[chat_template] line N: <what>".
  static core::Result<ChatTemplate> parse(std::string source);

  // messages: the conversation (normally a list of {role, content, ...}); tools: null or a list
  // of tool schemas; extra_kwargs: an object of further template variables (enable_thinking,
  // add_vision_id, ...) or null. A variable that is absent is undefined to the template.
  // On failure *over_limit (when given) tells whether a work bound (set_limits) stopped the
  // render, as opposed to the template rejecting its input or an unsupported construct, and
  // *reason (when given) is what went wrong without the template's line: what a client is told
  // (the template's own code is no business of theirs).
  core::Result<std::string> render(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                   const nlohmann::ordered_json& extra_kwargs,
                                   bool* over_limit = nullptr, std::string* reason = nullptr) const;

  // Whether `name` is one the template's own code relies on: a global function (range,
  // namespace, raise_exception, ...) or a default variable (eos_token, ...). A template kwarg of
  // that name would replace it.
  bool is_reserved(const std::string& name) const;

  // Variables every render sees unless extra_kwargs overrides them (transformers passes the
  // tokenizer's named special tokens: eos_token, pad_token, ...). Must be an object.
  void set_default_vars(nlohmann::ordered_json vars) { default_vars_ = std::move(vars); }

  // Bounds on the work of one render (steps, macro depth, string and list sizes).
  void set_limits(const jinja::Limits& limits) { limits_ = limits; }

  const std::string& source() const { return source_; }

 private:
  struct Program;
  std::string source_;
  std::shared_ptr<const Program> program_;
  nlohmann::ordered_json default_vars_ = nlohmann::ordered_json::object();
  jinja::Limits limits_;
};

// Loads DIR/chat_template.jinja, else the chat_template of DIR/tokenizer_config.json (a string,
// or a list of {name, template} of which "default" is used). The special tokens named in
// tokenizer_config.json become default variables.
core::Result<ChatTemplate> load_chat_template(const std::string& dir);

}  // namespace qwen35::tmpl
