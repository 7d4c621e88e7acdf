// The bundled model's tokenizer and chat template as a request parser sees them (ModelInfo),
// with no weights loaded: for the tests of the API parsers and formatters.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/request.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace qwen35::server::testing_model {

struct BundledModelInfo {
  BundledModelInfo() {
    const std::string dir = testing::source_dir() + "/models/qwen35-tiny-kjv";
    auto t = tokenizer::Tokenizer::load(dir);
    auto c = tmpl::load_chat_template(dir);
    EXPECT_TRUE(t.ok() && c.ok());
    tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
    chat = std::make_unique<tmpl::ChatTemplate>(std::move(*c));
    mi.tok = tok.get();
    mi.tmpl = chat.get();
    mi.name = "m";
    mi.ctx = 4096;
    mi.eos_ids = {tok->eos_id()};
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<tmpl::ChatTemplate> chat;
  ModelInfo mi;
};

// One per test binary, loaded on first use.
inline BundledModelInfo& bundled_model_info() {
  static BundledModelInfo m;
  return m;
}

}  // namespace qwen35::server::testing_model
