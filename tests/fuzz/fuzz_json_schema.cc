// libFuzzer: a JSON Schema from a request (response_format, a tool's parameters) compiled to a
// grammar, JSON and raw, then a matcher over a small vocabulary: masks, steps and the finishing
// count. Any input is an error or a working automaton, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace {

std::shared_ptr<const qwen35::grammar::Vocab> vocab() {
  static const auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
    for (const char* s : {"{\"", "\":", "\",", "true", "null", "  ", "\n  ", "12", "ab", "é", "\xE2\x82", "</", "<tool_call>"})
      t.push_back(s);
    t.push_back("<|end|>");
    std::vector<bool> usable(t.size(), true);
    usable.back() = false;
    return std::make_shared<const qwen35::grammar::Vocab>(t, usable);
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwen35::grammar;
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The server bounds a body's nesting while parsing (64); so does this harness.
  int depth = 0, max_depth = 0;
  for (char c : text) {
    if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  if (max_depth > 64) return 0;
  const Json schema = Json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;
  {
    Builder b;
    JsonSchemaCompiler c(b, schema);
    auto raw = c.raw_string(schema, "#");
    if (!raw.ok() && raw.message().empty()) std::abort();
  }
  auto g = json_schema_grammar(schema);
  if (!g.ok()) {
    if (g.message().empty()) std::abort();
    return 0;
  }
  const int32_t end = int32_t(vocab()->size() - 1);
  Automaton a(std::move(*g), vocab(), {end});
  int32_t c = a.initial();
  std::vector<uint64_t> mask;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  for (int step = 0; step < 24 && c != Automaton::kDead; ++step) {
    const int64_t left = 24 - step;
    a.mask(c, a.finish_tokens(c) < left ? left - 2 : Automaton::kInf, &mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < int32_t(vocab()->size()); ++t)
      if ((mask[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
    if (allowed.empty()) break;
    const int32_t t = allowed[(h >> (step % 32)) % allowed.size()];
    if (t == end) {
      if (!a.complete(c)) std::abort();  // the end token only once the value is whole
      break;
    }
    c = a.step(c, t);
    if (c == Automaton::kDead) std::abort();  // a masked-in token never kills the value
  }
  return 0;
}
