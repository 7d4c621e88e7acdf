// Helpers of the vision tests (vision_test.cc, vision_forward_test.cc): the fixture folder, synth
// checkpoints with or without the tower, and copies of a checkpoint with tensors or config edited.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/safetensors.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace qwen35::model::vision_testing {

using json = nlohmann::json;

inline std::string vision_fixtures() { return qwen35::testing::source_dir() + "/tests/fixtures/vision"; }

// A synth checkpoint of `preset` with the tower on (hf).
inline void synth(const std::string& dir, const std::string& preset = "tiny", const std::string& vision = "auto") {
  tools::SynthOptions o;
  o.preset = preset;
  o.out_dir = dir;
  o.vision = vision;
  o.progress = false;
  auto r = tools::write_synthetic_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.message();
}

// Copies a checkpoint, letting `edit` drop or change tensors and `edit_config` the config.
inline void copy_checkpoint(const std::string& src, const std::string& dst,
                     const std::function<bool(qwen35::testing::RawTensor&)>& edit,
                     const std::function<void(json&)>& edit_config = nullptr) {
  auto store = formats::TensorStore::open_dir(src);
  ASSERT_TRUE(store.ok()) << store.message();
  std::vector<qwen35::testing::RawTensor> out;
  for (const auto& [name, v] : store->all()) {
    qwen35::testing::RawTensor t{name, std::string(core::dtype_name(v.dtype)), v.shape,
                                 std::string(reinterpret_cast<const char*>(v.data), v.nbytes)};
    if (edit(t)) out.push_back(std::move(t));
  }
  qwen35::testing::write_file(dst + "/model.safetensors", qwen35::testing::safetensors_bytes(out));
  json cfg = json::parse(std::ifstream(src + "/config.json"));
  if (edit_config) edit_config(cfg);
  qwen35::testing::write_file(dst + "/config.json", cfg.dump());
}

}  // namespace qwen35::model::vision_testing
