// Renders a template source with kwargs given as JSON text; messages default to one user turn.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"

namespace qwen35::tmpl::testing_util {

inline core::Result<std::string> render(const std::string& src, const std::string& kwargs = "{}",
                                        const jinja::Limits* limits = nullptr) {
  auto t = ChatTemplate::parse(src);
  if (!t.ok()) return t.status();
  if (limits) t->set_limits(*limits);
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  return t->render(messages, nullptr, true, nlohmann::ordered_json::parse(kwargs));
}

// The rendered text, or "ERROR: <message>".
inline std::string out(const std::string& src, const std::string& kwargs = "{}") {
  auto r = render(src, kwargs);
  return r.ok() ? r.value() : "ERROR: " + r.message();
}

}  // namespace qwen35::tmpl::testing_util
