// The vision tower on a Vulkan device (model/vision.h through vkmodel/vulkan_executor.h), on
// lavapipe, with the committed end-to-end case tests/fixtures/vision/prompt_tiny (its images'
// patch rows and the float64 reference's merged tokens): the device's tokens within the CPU
// tower's bounds (1e-3 of the float64 reference, as vision_forward_test holds the CPU to; 1e-5 of
// the CPU tower, the bound the CPU backend keeps to the scalar reference ops), and bit for bit on
// the device: every image in pieces (several plans, each its own submission) gives the tokens of
// one piece, and the run's memory on the device is freed when the image is done.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "test_util.h"
#include "vk_test.h"
#include "vkmodel/vulkan_executor.h"

// A namespace of its own: the test binary compiles as one unit.
namespace qwen35::vkmodel::vision_model {
namespace {

using model::Model;
using model::VisionRun;

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

TEST(VulkanVision, TheTowerOnTheDeviceMatchesTheCpusAndItsPiecesKeepEveryBit) {
  std::string why;
  std::shared_ptr<vulkan::Device> dev = vulkan::test_device(&why);
  if (!dev) GTEST_SKIP() << "no Vulkan device: " << why;
  const std::string dir = testing::source_dir() + "/tests/fixtures/vision/prompt_tiny";
  auto patches = formats::read_npy(dir + "/patches.npy"), grid = formats::read_npy(dir + "/grid.npy");
  auto merged = formats::read_npy(dir + "/merged.npy");
  ASSERT_TRUE(patches.ok() && grid.ok() && merged.ok());
  auto wc = model::load_weights(dir + "/ckpt"), wd = model::load_weights(dir + "/ckpt");
  ASSERT_TRUE(wc.ok() && wd.ok()) << wc.message();
  core::ThreadPool pool(1);
  Model cpu(std::move(*wc), kernels::cpu_ops(), &pool), m(std::move(*wd), kernels::cpu_ops(), &pool);
  ASSERT_TRUE(m.has_vision());
  auto ex = VulkanExecutor::create(dev, m.weights());
  ASSERT_TRUE(ex.ok()) << ex.message();
  VulkanExecutor* vk = ex->get();
  m.replace_executor(std::move(*ex));
  const model::VisionConfig& c = m.weights().vision->config;

  const float* rows = patches->data.data();
  size_t at = 0;
  int images = 0;
  for (size_t i = 0; i < grid->ints.size(); i += 3, ++images) {
    const int64_t t = grid->ints[i], h = grid->ints[i + 1], w = grid->ints[i + 2];
    const int64_t tokens = t * (h / c.merge) * (w / c.merge);
    SCOPED_TRACE("image " + std::to_string(images) + " grid (" + std::to_string(t) + ", " + std::to_string(h) +
                 ", " + std::to_string(w) + ")");
    std::vector<float> want(size_t(tokens * c.out_hidden)), got(want.size(), NAN);
    ASSERT_TRUE(cpu.encode_image(rows, t, h, w, want.data()).ok());
    const uint32_t before = vk->submissions();
    ASSERT_TRUE(m.encode_image(rows, t, h, w, got.data()).ok());
    EXPECT_EQ(vk->submissions(), before + 1) << "one image, one submission";
    const std::vector<float> ref(merged->data.begin() + int64_t(at), merged->data.begin() + int64_t(at + want.size()));
    std::printf("  image %d, %lld tokens: device vs float64 %.3g, vs the CPU tower %.3g (CPU vs float64 %.3g)\n", images,
                (long long)tokens, max_diff(got, ref), max_diff(got, want), max_diff(want, ref));
    EXPECT_LE(max_diff(got, ref), 1e-3) << "device vs the float64 reference";
    EXPECT_LE(max_diff(got, want), 1e-5) << "device vs the CPU tower";
    // The twins of the image's memory go when it is done: a second encode holds no more.
    const uint64_t twins = vk->twin_bytes();
    std::vector<float> again(want.size(), NAN);
    ASSERT_TRUE(m.encode_image(rows, t, h, w, again.data()).ok());
    EXPECT_EQ(again, got);
    EXPECT_EQ(vk->twin_bytes(), twins);

    // In pieces: plans of about a seventh of a block's attention part, each advance a submission.
    VisionRun run;
    std::vector<float> pieces(want.size(), NAN);
    ASSERT_TRUE(m.begin_image(rows, t, h, w, pieces.data(), &run).ok());
    int advances = 0;
    for (bool done = false; !done; ++advances) {
      const double budget = double(h * w) / 7 * (4 * double(h * w) * double(c.hidden));
      const auto d = m.advance_image(&run, m.plan_image(run, budget, true).end);
      ASSERT_TRUE(d.ok()) << d.message();
      done = *d;
    }
    std::printf("  image %d in %d pieces\n", images, advances);
    EXPECT_GT(advances, 2 * (int64_t(m.weights().vision->blocks.size()) + 2));
    EXPECT_EQ(pieces, got) << "in " << advances << " pieces";
    EXPECT_EQ(vk->twin_bytes(), twins) << "the run's twins freed";
    rows += t * h * w * c.patch_dim();
    at += want.size();
  }
  EXPECT_GE(images, 1);
  EXPECT_EQ(at, merged->data.size());
}

}  // namespace
}  // namespace qwen35::vkmodel::vision_model
