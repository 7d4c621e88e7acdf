#include "cli/device_plan.h"

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "model/kv_pool.h"
#ifdef QWEN35_HAVE_VULKAN
#include "vkmodel/memory_plan.h"
#include "vulkan/instance.h"
#endif

namespace qwen35::cli {

int print_device_plan(const model::ModelWeights& w, const std::string& device,
                      const DevicePlanFlags& f) {
  auto choice = flags::parse_device(device);
  if (!choice.ok()) return fail("inspect", choice.message());
  if (!choice->vulkan) return 0;
#ifdef QWEN35_HAVE_VULKAN
  auto inst = vulkan::Instance::create();
  if (!inst.ok()) return fail("inspect", "--device " + device + ": " + inst.message());
  auto devices = (*inst)->devices();
  if (!devices.ok()) return fail("inspect", "--device " + device + ": " + devices.message());
  if (size_t(choice->index) >= devices->size())
    return fail("inspect",
                "--device " + device + ": no Vulkan device " + std::to_string(choice->index));
  const vulkan::DeviceInfo& info = (*devices)[size_t(choice->index)];
  // The split of a matrix across bindings decides a few bytes of padding a part: as the device
  // would split them (Device::part_limit without test options).
  uint64_t part_limit = info.max_storage_buffer_range;
  if (info.max_allocation_bytes) part_limit = std::min(part_limit, info.max_allocation_bytes);
  part_limit &= ~uint64_t(3);
  if (f.mtp && w.mtp == nullptr)
    return fail("inspect",
                "--spec mtp: " +
                    (w.mtp_problem.empty() ? std::string("the checkpoint has no MTP head")
                                           : w.mtp_problem) +
                    "; use --spec lookup");
  const bool mtp = f.mtp;
  auto kv = kernels::parse_kv_types(f.kv_type);
  if (!kv.ok()) return fail("inspect", "--kv-type: " + kv.message());
  if (auto st = model::check_kv_types(w.config, *kv); !st.ok()) return fail("inspect", st.message());
  const vkmodel::DeviceMemoryPlan plan =
      vkmodel::plan_device_memory(w, f.ctx, f.parallel, f.step_tokens, mtp, part_limit, *kv);
  const double heap = double(vkmodel::device_local_bytes(info)) / 1073741824.0;
  std::printf("device: vulkan:%d, %s (%s), %.2f GiB of device-local memory\n", info.index,
              info.name.c_str(), info.type.c_str(), heap);
  std::printf("device memory plan (%lld positions x %lld sequence%s, %lld rows a step, %s, KV %s): %s\n",
              (long long)f.ctx, (long long)f.parallel, f.parallel == 1 ? "" : "s",
              (long long)f.step_tokens, mtp ? "MTP head" : "no MTP head",
              kernels::kv_types_name(*kv).c_str(), vkmodel::describe(plan).c_str());
  const core::Status fits = vkmodel::check_fits(plan, info);
  if (!fits.ok()) std::printf("device verdict: DOES NOT FIT\n");
  else
    std::printf("device verdict: fits (%.1f%% of %s's device-local memory)\n",
                heap > 0 ? 100.0 * double(plan.total()) / (heap * 1073741824.0) : 0.0,
                info.name.c_str());
  if (f.fit_mb > 0) {
    const uint64_t have = vkmodel::device_local_bytes(info);
    const uint64_t asked = uint64_t(f.fit_mb * 1048576.0);
    const uint64_t budget = std::min(asked, have);
    // Positions: the model's trained context, or 1M where the checkpoint does not say.
    const int64_t max_ctx = w.config.max_position > 0 ? w.config.max_position : int64_t(1) << 20;
    constexpr int64_t kMaxParallel = 4096;
    std::printf("device fit in %.0f MiB%s (%lld rows a step, %s, KV %s):\n", double(budget) / 1048576.0,
                asked > have ? " (the device's memory: less than --fit-mb)" : "",
                (long long)f.step_tokens, mtp ? "MTP head" : "no MTP head", kernels::kv_types_name(*kv).c_str());
    bool any = false;
    for (int64_t p = 1; p <= 64; p *= 2) {
      const int64_t ctx = vkmodel::fit_ctx(w, budget, p, max_ctx, f.step_tokens, mtp, part_limit, *kv);
      if (ctx == 0) break;
      any = true;
      std::printf("  --parallel %lld: --ctx up to %lld%s\n", (long long)p, (long long)ctx,
                  ctx == max_ctx / kernels::kKvBlock * kernels::kKvBlock ? " (the model's context)" : "");
    }
    const int64_t most = vkmodel::fit_parallel(w, budget, f.ctx, kMaxParallel, f.step_tokens, mtp, part_limit, *kv);
    if (most > 0)
      std::printf("  --ctx %lld: --parallel up to %lld%s\n", (long long)f.ctx, (long long)most,
                  most == kMaxParallel ? " (or more)" : "");
    if (!any) {
      const vkmodel::DeviceMemoryPlan least =
          vkmodel::plan_device_memory(w, kernels::kKvBlock, 1, f.step_tokens, mtp, part_limit, *kv);
      return fail("inspect", "[vulkan] nothing fits in " + std::to_string(budget / 1048576) +
                                 " MiB: one sequence of " + std::to_string(kernels::kKvBlock) +
                                 " positions needs " + vkmodel::describe(least));
    }
  }
  if (!fits.ok()) return fail("inspect", fits.message());
  return 0;
#else
  (void)w;
  (void)f;
  return fail("inspect", "--device " + device + ": this build has no Vulkan backend");
#endif
}

}  // namespace qwen35::cli
