#include "vulkan/shaders.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace qwen35::vulkan {

std::string_view shader_spirv(std::string_view name) {
  for (const EmbeddedShader& s : embedded_shaders())
    if (s.name == name) return s.data;
  return {};
}

namespace {

// The module's words, or none where it is not SPIR-V (too short, not whole words, no magic).
std::vector<uint32_t> spirv_words(std::string_view spirv) {
  constexpr uint32_t kMagic = 0x07230203;
  if (spirv.size() < 20 || spirv.size() % 4 != 0) return {};
  std::vector<uint32_t> w(spirv.size() / 4);
  std::memcpy(w.data(), spirv.data(), spirv.size());
  if (w[0] != kMagic) return {};
  return w;
}

}  // namespace

uint32_t spirv_bindings(std::string_view spirv) {
  constexpr uint32_t kOpDecorate = 71, kDecorationBinding = 33;
  const std::vector<uint32_t> words = spirv_words(spirv);
  if (words.empty()) return 0;
  auto word = [&](size_t i) { return words[i]; };
  const size_t n = words.size();
  uint32_t bindings = 0;
  for (size_t i = 5; i < n;) {  // instructions follow the 5-word header
    const uint32_t len = word(i) >> 16, op = word(i) & 0xFFFF;
    if (len == 0 || i + len > n) return 0;
    if (op == kOpDecorate && len >= 4 && word(i + 2) == kDecorationBinding)
      bindings = std::max(bindings, word(i + 3) + 1);
    i += len;
  }
  return bindings;
}

uint32_t spirv_readonly_bindings(std::string_view spirv) {
  constexpr uint32_t kOpDecorate = 71, kOpMemberDecorate = 72, kOpTypePointer = 32,
                     kOpTypeStruct = 30, kOpVariable = 59, kDecorationBinding = 33,
                     kDecorationNonWritable = 24;
  const std::vector<uint32_t> words = spirv_words(spirv);
  if (words.empty()) return 0;
  auto word = [&](size_t i) { return words[i]; };
  const size_t n = words.size();
  std::map<uint32_t, uint32_t> binding_of;           // variable id -> binding
  std::set<uint32_t> nonwritable;                    // ids decorated NonWritable
  std::map<uint32_t, std::set<uint32_t>> ro_members;  // struct id -> its NonWritable members
  std::map<uint32_t, uint32_t> members;               // struct id -> member count
  std::map<uint32_t, uint32_t> pointee;               // pointer type id -> pointed type
  std::map<uint32_t, uint32_t> type_of;               // variable id -> its pointer type
  for (size_t i = 5; i < n;) {
    const uint32_t len = word(i) >> 16, op = word(i) & 0xFFFF;
    if (len == 0 || i + len > n) return 0;
    if (op == kOpDecorate && len >= 4 && word(i + 2) == kDecorationBinding)
      binding_of[word(i + 1)] = word(i + 3);
    else if (op == kOpDecorate && len >= 3 && word(i + 2) == kDecorationNonWritable)
      nonwritable.insert(word(i + 1));
    else if (op == kOpMemberDecorate && len >= 4 && word(i + 3) == kDecorationNonWritable)
      ro_members[word(i + 1)].insert(word(i + 2));
    else if (op == kOpTypeStruct && len >= 2)
      members[word(i + 1)] = len - 2;
    else if (op == kOpTypePointer && len >= 4)
      pointee[word(i + 1)] = word(i + 3);
    else if (op == kOpVariable && len >= 4)
      type_of[word(i + 2)] = word(i + 1);
    i += len;
  }
  uint32_t mask = 0;
  for (const auto& [var, binding] : binding_of) {
    if (binding >= 32) continue;
    bool ro = nonwritable.count(var) != 0;
    if (!ro) {
      const auto t = type_of.find(var);
      const auto s = t == type_of.end() ? pointee.end() : pointee.find(t->second);
      if (s != pointee.end()) {
        const auto m = members.find(s->second);
        const auto r = ro_members.find(s->second);
        ro = m != members.end() && r != ro_members.end() && m->second > 0 &&
             r->second.size() == m->second;
      }
    }
    if (ro) mask |= 1u << binding;
  }
  return mask;
}

}  // namespace qwen35::vulkan
