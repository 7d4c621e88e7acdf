// The device memory plan (vkmodel/memory_plan.h) against what the pieces it plans for really
// take: every matrix and vector of a checkpoint uploaded to lavapipe (the tensor table's walk,
// not the plan's), split across test-lowered bindings; the KV pool and sequence states the CPU
// makes for the same config; the one-line refusal on a heap too small; and
// `inspect --device vulkan` on the bundled model.
#include "vkmodel/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "../kernels/test_matrices.h"
#include "model/kv_pool.h"
#include "model/state.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "test_util.h"
#include "vk_test.h"
#include "vulkan/matrix.h"

namespace qwen35::vulkan {
namespace {

std::string bundled_model() { return testing::source_dir() + "/models/qwen35-tiny-kjv"; }

// What uploading every tensor of `w` takes on `dev`: the trunk's (with the embedding and the
// head) and the MTP head's own, walked by the tensor table.
struct Uploaded {
  uint64_t trunk = 0, mtp = 0;
};
Uploaded upload_every_tensor(Device& dev, model::ModelWeights& w) {
  const model::ModelConfig& c = w.config;
  Uploaded u;
  model::for_each_tensor_at(
      c, /*head=*/!w.tied, /*mtp=*/w.mtp != nullptr, [&](const model::Tensor& t, int64_t layer) {
        const bool of_mtp = t.block == model::Block::kMtp || layer == c.n_layers;
        model::LayerWeights* l = layer < 0            ? nullptr
                                 : layer < c.n_layers ? &w.layers[size_t(layer)]
                                                      : &w.mtp->layer;
        const model::Slot s = t.slot(w, l);
        if (s.present != nullptr && !*s.present) return;
        uint64_t& sum = of_mtp ? u.mtp : u.trunk;
        auto matrix = [&](const kernels::Matrix& m) {
          auto d = upload_matrix(dev, m);
          EXPECT_TRUE(d.ok()) << t.hf << ": " << d.message();
          if (d.ok()) sum += d->bytes();
        };
        if (s.matrix != nullptr) matrix(*s.matrix);
        if (s.experts != nullptr)
          for (const model::MlpWeights& e : *s.experts) matrix(e.*t.expert);
        if (s.floats != nullptr && !s.floats->empty()) sum += put(dev, *s.floats).bytes();
      });
  return u;
}

TEST(VulkanMemoryPlan, WeightsAreWhatTheDeviceHoldsOnceUploaded) {
  DeviceOptions o;
  o.max_part_bytes = 64 << 10;  // the embedding and the larger matrices in several parts
  QWEN35_VK_DEVICE_OR_SKIP(dev, o);
  testing::TempDir dir;
  // bf16 (tied head), MLX 4-bit MoE (scales and biases, experts, the shared expert's gate, an MTP
  // head with an MoE layer), GGUF Q4_0 (18-byte blocks: rows that end mid-word).
  const std::string synth_moe =
      "synth --preset tiny-moe --format mlx --mtp on --quiet --out " + dir.file("moe");
  const std::string synth_q4 =
      "synth --preset tiny --format gguf --outtype q4_0 --quiet --out " + dir.file("q4.gguf");
  for (const std::string& cmd : {synth_moe, synth_q4}) {
    auto r = testing::run_qwen35(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
  }
  // And every fixture: Qwen3, Qwen3-MoE (fused experts), Qwen3-Next (its regrouped fused
  // projections), untied heads, mixed MLX quantization.
  std::vector<std::string> paths = {bundled_model(), dir.file("moe"), dir.file("q4.gguf")};
  for (const std::string& name : testing::fixture_model_names())
    paths.push_back(testing::fixture_models_dir() + "/" + name + "/ckpt");
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    auto w = model::load_weights(path);
    ASSERT_TRUE(w.ok()) << path << ": " << w.message();
    if (i < 3) {
      EXPECT_NE((*w)->mtp, nullptr) << path << ": " << (*w)->mtp_problem;
    }
    const Uploaded u = upload_every_tensor(*dev, **w);
    const auto with = vkmodel::plan_device_memory(**w, 64, 1, 1, true, dev->part_limit());
    const auto without = vkmodel::plan_device_memory(**w, 64, 1, 1, false, dev->part_limit());
    EXPECT_EQ(with.weights, u.trunk + u.mtp) << path;
    EXPECT_EQ(without.weights, u.trunk) << path;
    EXPECT_EQ(u.mtp > 0, (*w)->mtp != nullptr) << path;
  }
}

// planned_bytes counts a matrix's parts as upload_matrix makes them, padding of a part that ends
// mid-word and the IQ code book included.
TEST(VulkanMemoryPlan, PlannedMatrixBytesAreTheUploadedBytes) {
  std::vector<kernels::TestMatrix> ms;
  ms.push_back(kernels::make_matrix(kernels::WeightType::kQ4_0, 11, 32, 1));  // 18-byte rows
  ms.push_back(kernels::make_matrix(kernels::WeightType::kF16, 27, 3, 2));    // 6-byte rows
  ms.push_back(
      kernels::make_matrix(kernels::WeightType::kAffine, 11, 32, 3, 4, 32));  // 2-byte scales
  ms.push_back(kernels::make_matrix(kernels::WeightType::kIQ2_XXS, 3, 256, 4));
  ms.push_back(kernels::make_matrix(kernels::WeightType::kF32, 5, 8, 5));
  for (const uint64_t limit : {uint64_t(0), uint64_t(160)}) {
    DeviceOptions o;
    o.max_part_bytes = limit;
    QWEN35_VK_DEVICE_OR_SKIP(dev, o);
    for (const kernels::TestMatrix& t : ms) {
      auto d = upload_matrix(*dev, t.m);
      ASSERT_TRUE(d.ok()) << d.message();
      EXPECT_EQ(planned_bytes(t.m, dev->part_limit()), d->bytes())
          << "type " << int(t.m.type) << ", part limit " << limit;
      if (limit == 0) {
        EXPECT_EQ(planned_bytes(t.m), d->bytes()) << "type " << int(t.m.type);
      } else {  // split: every type but the f32 one in more than one part
        EXPECT_GT(d->parts.size(), t.m.type == kernels::WeightType::kF32 ? 0u : 1u);
      }
    }
  }
}

TEST(VulkanMemoryPlan, KvAndStateAreTheCpuPoolsAndStatesOfTheConfig) {
  auto w = model::load_weights(bundled_model());
  ASSERT_TRUE(w.ok()) << w.message();
  const model::ModelConfig& c = (*w)->config;
  const int64_t ctx = 100, parallel = 3;  // two 64-position blocks a sequence
  for (const bool mtp : {false, true}) {
    const auto p = vkmodel::plan_device_memory(**w, ctx, parallel, 8, mtp);
    model::SequenceState st(c, ctx, mtp);  // a private pool: every block taken
    EXPECT_EQ(p.kv, uint64_t(parallel) * st.kv_bytes()) << mtp;
    model::KvPool pool(c, parallel * 2, mtp);
    EXPECT_EQ(p.kv, uint64_t(pool.n_blocks()) * pool.block_bytes()) << mtp;
    const uint64_t verify = mtp ? model::SequenceState::verify_bytes(c, true) : 0;
    EXPECT_EQ(p.state, uint64_t(parallel) * (st.recurrent_bytes() + verify)) << mtp;
    // The working memory holds at least the residual stream, a layer's input and output and the
    // logits of every row, and grows with the rows.
    const auto p2 = vkmodel::plan_device_memory(**w, ctx, parallel, 16, mtp);
    EXPECT_GE(p2.workspace - p.workspace, 8 * uint64_t(3 * c.hidden + c.vocab) * 4) << mtp;
    EXPECT_EQ(p2.weights, p.weights);
    EXPECT_EQ(p2.kv, p.kv);
    // A compressed cache: the CPU pool's bytes of that type (the device holds the same layout).
    for (const kernels::KvTypes t : {kernels::KvTypes{kernels::KvType::kQ8_0, kernels::KvType::kQ8_0},
                                     kernels::KvTypes{kernels::KvType::kQ8_0, kernels::KvType::kTurbo3}}) {
      const auto q = vkmodel::plan_device_memory(**w, ctx, parallel, 8, mtp, 0, t);
      model::KvPool typed(c, parallel * 2, mtp, t);
      EXPECT_EQ(q.kv, uint64_t(typed.n_blocks()) * typed.block_bytes()) << kernels::kv_types_name(t);
      EXPECT_LT(q.kv, p.kv);
      EXPECT_EQ(q.weights, p.weights);
      EXPECT_EQ(q.state, p.state);
    }
  }
}

TEST(VulkanMemoryPlan, AModelThatDoesNotFitIsRefusedInOneLineWithTheNumbers) {
  DeviceInfo info;
  info.name = "Fake GPU";
  info.heaps = {{uint64_t(64) << 30, false}, {uint64_t(8) << 30, true}, {uint64_t(1) << 30, true}};
  const double gib = 1073741824.0;
  vkmodel::DeviceMemoryPlan p{uint64_t(8.0 * gib), uint64_t(0.8 * gib), uint64_t(0.2 * gib),
                              uint64_t(0.1 * gib)};
  EXPECT_EQ(vkmodel::device_local_bytes(info), uint64_t(8) << 30);
  core::Status st = vkmodel::check_fits(p, info);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "[vulkan] the model needs 9.1 GiB of device memory (weights 8.0, KV 0.8, state 0.2, "
            "workspace 0.1) but Fake GPU has 8.0 GiB");
  p.weights = uint64_t(6.0 * gib);
  EXPECT_TRUE(vkmodel::check_fits(p, info).ok());
  // Totals that would print the same get more digits.
  p = {(uint64_t(8) << 30) + (uint64_t(1) << 20), 0, 0, 0};
  st = vkmodel::check_fits(p, info);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs 8.001 GiB"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("has 8.000 GiB"), std::string::npos) << st.message();

  // The bundled model's real plan on a 4 MiB heap, and on a device without device-local memory.
  auto w = model::load_weights(bundled_model());
  ASSERT_TRUE(w.ok()) << w.message();
  const auto plan = vkmodel::plan_device_memory(**w, 4096, 1, 256, false);
  info.heaps = {{uint64_t(4) << 20, true}};
  st = vkmodel::check_fits(plan, info);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("[vulkan] the model needs ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find(" MiB of device memory (weights "), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(") but Fake GPU has 4.0 MiB"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  info.heaps = {{uint64_t(1) << 40, false}};
  st = vkmodel::check_fits(plan, info);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("but Fake GPU has no device-local memory"), std::string::npos)
      << st.message();
}

// `inspect --device vulkan`: the plan the library makes for the device, and its verdict; a
// context no device holds is refused in one line, exit 1.
// `inspect --device vulkan --fit-mb`: each context and count it prints is the largest whose plan
// fits the budget (the next block, or the next sequence, does not), checked against the plan.
TEST(VulkanMemoryPlan, FitMbGivesTheLargestContextsAndCountsThatFit) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  auto w = model::load_weights(bundled_model());
  ASSERT_TRUE(w.ok()) << w.message();
  const int64_t mib = 12;
  const uint64_t budget = uint64_t(mib) << 20;
  auto plan = [&](int64_t ctx, int64_t parallel) {
    return vkmodel::plan_device_memory(**w, ctx, parallel, 64, false, dev->part_limit()).total();
  };
  auto r = testing::run_qwen35("inspect -m " + bundled_model() + " --device vulkan --step-tokens 64 --ctx 512 --fit-mb " +
                               std::to_string(mib));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("device fit in 12 MiB (64 rows a step, no MTP head, KV f32):\n"), std::string::npos) << r.out;
  const int64_t max_ctx = (*w)->config.max_position;
  int lines = 0;
  for (int64_t p = 1; p <= 64; p *= 2) {
    const std::string key = "  --parallel " + std::to_string(p) + ": --ctx up to ";
    const size_t at = r.out.find(key);
    if (at == std::string::npos) {
      EXPECT_GT(plan(64, p), budget) << "--parallel " << p << " missing: " << r.out;
      break;
    }
    ++lines;
    const int64_t ctx = std::stoll(r.out.substr(at + key.size()));
    EXPECT_EQ(ctx % 64, 0);
    EXPECT_LE(plan(ctx, p), budget) << p;
    if (ctx < max_ctx) {
      EXPECT_GT(plan(ctx + 64, p), budget) << p;
    }
  }
  EXPECT_GE(lines, 2) << r.out;
  const std::string key = "  --ctx 512: --parallel up to ";
  const size_t at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const int64_t most = std::stoll(r.out.substr(at + key.size()));
  EXPECT_LE(plan(512, most), budget);
  EXPECT_GT(plan(512, most + 1), budget);
  // A budget below the weights: one line, exit 1.
  r = testing::run_qwen35("inspect -m " + bundled_model() + " --device vulkan --fit-mb 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("[vulkan] nothing fits in 1 MiB: one sequence of 64 positions needs weights "),
            std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(VulkanMemoryPlan, InspectPlansTheDeviceMemory) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  auto w = model::load_weights(bundled_model());
  ASSERT_TRUE(w.ok()) << w.message();
  const auto plan = vkmodel::plan_device_memory(**w, 256, 2, 256, true, dev->part_limit());
  auto r = testing::run_qwen35("inspect -m " + bundled_model() +
                               " --device vulkan --ctx 256 --parallel 2 --spec mtp");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("device: vulkan:0, " + dev->info().name), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device memory plan (256 positions x 2 sequences, 256 rows a step, MTP "
                       "head, KV f32): " +
                       vkmodel::describe(plan) + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("device verdict: fits"), std::string::npos) << r.out;
  // --kv-type: the KV in that format; a type the model cannot take is one line.
  const kernels::KvTypes q8t4{kernels::KvType::kQ8_0, kernels::KvType::kTurbo4};
  const auto typed = vkmodel::plan_device_memory(**w, 256, 2, 256, true, dev->part_limit(), q8t4);
  r = testing::run_qwen35("inspect -m " + bundled_model() +
                          " --device vulkan --ctx 256 --parallel 2 --spec mtp --kv-type q8_0,turbo4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MTP head, KV q8_0,turbo4): " + vkmodel::describe(typed) + "\n"),
            std::string::npos)
      << r.out;
  r = testing::run_qwen35("inspect -m " + bundled_model() + " --device vulkan --kv-type q5");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("--kv-type: unknown kv type 'q5'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = testing::run_qwen35("inspect -m " + bundled_model() +
                          " --device vulkan --ctx 1000000000 --parallel 64");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("device verdict: DOES NOT FIT"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[vulkan] the model needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" but " + dev->info().name + " has "), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = testing::run_qwen35("inspect -m " + testing::fixture_models_dir() +
                          "/dense_q4_untied/ckpt --device vulkan --spec mtp");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("--spec mtp: "), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace qwen35::vulkan
