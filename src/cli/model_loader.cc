#include "cli/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/device_select.h"
#include "dist/comm.h"
#include "formats/gguf.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ops.h"

namespace qwen35::cli {

core::Result<LoadedModel> load_model(const LoadOptions& o) {
  // This process's device: under mpirun each rank its own of a list (cli/device_select.h).
  QWEN35_ASSIGN_OR_RETURN(const std::string device,
                          device_for_rank(o.device, dist::launched_rank(), dist::launched_world_size()));
  QWEN35_RETURN_IF_ERROR(check_device(device));
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
  // Before the weights: a typo costs nothing.
  auto kv_types = kernels::parse_kv_types(o.kv_type.empty() ? "f32" : o.kv_type);
  if (!kv_types.ok()) return core::error("--kv-type: " + kv_types.message());
  if (!o.isa.empty() && !kernels::cpu::limit_simd(o.isa))
    return core::error("--isa '" + o.isa + "' is not a SIMD target this build and CPU run (the default picks the best; e.g. AVX2, SSE4)");
  if (o.no_amx) kernels::cpu::amx_turn_off();
  // With --fast, a GGUF file's matmuls read int8 forms built at load, in anonymous memory
  // (Model::set_fast_activations); the blocks are then read only by the embedding lookup. They
  // stay file-backed, where the kernel drops the pages nothing reads, instead of being copied
  // beside their forms (twice the file in memory that cannot be reclaimed).
  if (o.fast && mode == core::LoadMode::kAnonymous && formats::is_gguf_path(o.model_dir))
    mode = core::LoadMode::kMmap;
  QWEN35_ASSIGN_OR_RETURN(auto weights, model::load_weights(o.model_dir, mode));
  if (weights->dialect == model::Dialect::kGguf) {
    std::string mmproj = o.mmproj;
    if (mmproj.empty()) {
      auto found = model::find_mmproj(o.model_dir);
      if (!found.ok()) weights->vision_problem = found.message();
      else mmproj = *found;
    }
    if (!mmproj.empty()) model::attach_mmproj(*weights, mmproj);
    if (!o.mmproj.empty() && !weights->vision) return core::error("--mmproj: " + weights->vision_problem);
  } else if (!o.mmproj.empty()) {
    return core::error("--mmproj applies to GGUF models; this checkpoint's tower is in its safetensors");
  }
  if (o.prepare) QWEN35_RETURN_IF_ERROR(o.prepare(*weights));
  LoadedModel lm;
  lm.pool = std::make_unique<core::ThreadPool>(o.threads);
  lm.model = std::make_unique<model::Model>(std::move(weights), *ops, lm.pool.get());
  lm.model->set_fast_activations(o.fast);
  if (o.kv_type.empty() && o.fast) {
    auto fast = kernels::parse_kv_types(kFastKvType);
    if (fast.ok() && model::check_kv_types(lm.model->config(), *fast).ok()) kv_types = fast;
  }
  QWEN35_RETURN_IF_ERROR(lm.model->set_kv_types(*kv_types));
  QWEN35_ASSIGN_OR_RETURN(lm.device, use_device(device, *lm.model, o.fast));
  return lm;
}

namespace {
uint64_t fnv_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
}  // namespace

uint64_t checkpoint_fingerprint(const LoadOptions& o) {
  namespace fs = std::filesystem;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) { h = fnv_bytes(s.data(), s.size(), h); };
  mix(o.fast ? "fast" : "exact");
  // A device's bits are its own (docs/design.md): the same kind of device shares them.
  if (o.device != "cpu") mix(device_identity(o.device));
  mix(o.backend == "ref" ? "scalar-reference" : kernels::cpu::simd_target());
  std::vector<fs::path> files;
  std::error_code ec;
  if (formats::is_gguf_path(o.model_dir)) {
    for (const std::string& f : formats::gguf_file_set(o.model_dir)) files.push_back(f);
  } else {
    for (const auto& e : fs::directory_iterator(o.model_dir, ec))
      if (e.path().filename() == "config.json" || e.path().extension() == ".safetensors")
        files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<char> buf(1 << 20);
  for (const auto& f : files) {
    mix(f.filename().string());
    const uintmax_t size = fs::file_size(f, ec);
    mix(std::to_string(size));
    std::ifstream in(f, std::ios::binary);
    for (uintmax_t at : {uintmax_t(0), size > buf.size() ? size - buf.size() : uintmax_t(0)}) {
      in.clear();
      in.seekg(std::streamoff(at));
      in.read(buf.data(), std::streamsize(buf.size()));
      h = fnv_bytes(buf.data(), size_t(in.gcount()), h);
    }
  }
  return h;
}

}  // namespace qwen35::cli
