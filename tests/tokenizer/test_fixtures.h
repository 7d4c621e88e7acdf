// Shared helpers for the tokenizer tests: the fixture cases and a per-process tokenizer cache.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qwen35::tokenizer::testing {

struct Case {
  std::string name, text, decoded, decoded_skip_special;
  std::vector<int32_t> ids;
};

inline std::string fixture_dir(const std::string& name) {
  return std::string(QWEN35_TOK_FIXTURES) + "/" + name;
}

inline std::vector<Case> load_cases(const std::string& name) {
  std::vector<Case> cases;
  std::ifstream f(fixture_dir(name) + "/cases.jsonl", std::ios::binary);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    cases.push_back({j.at("name").get<std::string>(), j.at("text").get<std::string>(),
                     j.at("decoded").get<std::string>(),
                     j.at("decoded_skip_special").get<std::string>(),
                     j.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

// Loading a 16 MB tokenizer.json takes a while: load each fixture once per process.
inline const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto r = Tokenizer::load(fixture_dir(name));
    if (!r.ok()) {
      ADD_FAILURE() << r.message();
      std::abort();
    }
    it = cache.emplace(name, std::move(r).value()).first;
  }
  return it->second;
}

}  // namespace qwen35::tokenizer::testing
