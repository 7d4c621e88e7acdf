// libFuzzer: the chat-template interpreter on arbitrary templates and messages. The input is
// "template \0 messages-json"; a template that parses is rendered with the messages (or a default
// conversation). Errors are fine; crashes, hangs and runaway memory are not (the interpreter
// bounds its own work).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  const std::string source = in.substr(0, cut);
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      cut == std::string::npos ? std::string("[]") : in.substr(cut + 1), nullptr, false);
  if (messages.is_discarded())
    messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}},
                                              {{"role", "assistant"}, {"content", "<think>x</think>yo"}}});
  auto t = qwen35::tmpl::ChatTemplate::parse(source);
  if (!t.ok()) {
    if (t.message().empty()) std::abort();
    return 0;
  }
  auto r = t->render(messages, nullptr, true, nlohmann::ordered_json{{"enable_thinking", false}});
  if (!r.ok() && r.message().empty()) std::abort();
  return 0;
}
