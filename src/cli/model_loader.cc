#include "cli/model_loader.h"

#include "kernels/cpu/matmul.h"
#include "kernels/ops.h"

namespace qwen35::cli {

core::Result<LoadedModel> load_model(const LoadOptions& o) {
  core::LoadMode mode;
  if (o.load_mode == "mmap") mode = core::LoadMode::kMmap;
  else if (o.load_mode == "populate") mode = core::LoadMode::kMmapPopulate;
  else if (o.load_mode == "anon") mode = core::LoadMode::kAnonymous;
  else return core::error("unknown --load mode '" + o.load_mode + "' (mmap, populate, anon)");
  const kernels::Ops* ops = nullptr;
  if (o.backend == "cpu") ops = &kernels::cpu_ops();
  else if (o.backend == "ref") ops = &kernels::ref_ops();
  else return core::error("unknown --backend '" + o.backend + "' (cpu, ref)");
  if (o.threads < 0) return core::error("--threads must be >= 0");
  if (!o.isa.empty() && !kernels::cpu::limit_simd(o.isa))
    return core::error("--isa '" + o.isa + "' is not a SIMD target this build and CPU run (the default picks the best; e.g. AVX2, SSE4)");
  QWEN35_ASSIGN_OR_RETURN(auto weights, model::load_weights(o.model_dir, mode));
  LoadedModel lm;
  lm.pool = std::make_unique<core::ThreadPool>(o.threads);
  lm.model = std::make_unique<model::Model>(std::move(weights), *ops, lm.pool.get());
  lm.model->set_fast_activations(o.fast);
  return lm;
}

}  // namespace qwen35::cli
