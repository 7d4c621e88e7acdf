#include "tools/synth/synth.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tools/synth/config_gen.h"
#include "tools/synth/gguf_synth.h"
#include "tools/synth/presets.h"
#include "tools/synth/st_writer.h"
#include "tools/synth/tensor_plan.h"
#include "tools/synth/tokenizer_gen.h"

namespace qwen35::tools {

namespace fs = std::filesystem;
using core::Result;
using core::Status;

namespace {

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f)
    return core::error("[synth] cannot create '" + path.string() + "': " + std::strerror(errno));
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) return core::error("[synth] write to '" + path.string() + "' failed");
  return core::ok_status();
}

Status validate(const SynthOptions& o, PlanOptions* plan) {
  if (o.out_dir.empty()) return core::error("[synth] no output directory (--out)");
  if (o.format == "hf" || o.format == "gguf") {
    plan->dialect = Dialect::kHf;  // GGUF: the HF checkpoint's values, converted
  } else if (o.format == "mlx") {
    plan->dialect = Dialect::kMlx;
  } else {
    return core::error("[synth] unknown format '" + o.format + "' (expected hf|mlx|gguf)");
  }
  if (o.format != "gguf" && !o.outtype.empty())
    return core::error("[synth] --outtype applies to --format gguf only (hf is bf16; mlx takes --bits)");
  if (o.bits != 2 && o.bits != 3 && o.bits != 4 && o.bits != 5 && o.bits != 6 && o.bits != 8)
    return core::error("[synth] unsupported bits " + std::to_string(o.bits) +
                       " (expected 2|3|4|5|6|8)");
  if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
    return core::error("[synth] unsupported group size " + std::to_string(o.group_size) +
                       " (expected 32|64|128)");
  plan->bits = o.bits;
  plan->group_size = o.group_size;
  if (o.mtp != "auto" && o.mtp != "on" && o.mtp != "off")
    return core::error("[synth] --mtp must be auto, on or off, got '" + o.mtp + "'");
  plan->mtp = o.mtp == "on" ? PlanOptions::Mtp::kOn
              : o.mtp == "off" ? PlanOptions::Mtp::kOff : PlanOptions::Mtp::kAuto;
  if (o.vision != "auto" && o.vision != "on" && o.vision != "off")
    return core::error("[synth] --vision must be auto, on or off, got '" + o.vision + "'");
  plan->vision = o.vision == "on" || (o.vision == "auto" && o.format == "hf");
  return core::ok_status();
}

// Removes what a previous run may have left that would mix with this checkpoint.
Status clean_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return core::error("[synth] cannot create '" + dir.string() + "': " + ec.message());
  if (!fs::is_directory(dir, ec))
    return core::error("[synth] '" + dir.string() + "' is not a directory");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors" || name == "model.safetensors.index.json") {
      fs::remove(e.path(), ec);
      if (ec)
        return core::error("[synth] cannot remove '" + e.path().string() + "': " + ec.message());
    }
  }
  if (ec) return core::error("[synth] cannot list '" + dir.string() + "': " + ec.message());
  return core::ok_status();
}

}  // namespace

Result<SynthSummary> write_synthetic_checkpoint(const SynthOptions& opts) {
  QWEN35_ASSIGN_OR_RETURN(Preset preset, find_preset(opts.preset));
  if (!opts.vision_preset.empty()) {
    QWEN35_ASSIGN_OR_RETURN(const Preset other, find_preset(opts.vision_preset));
    preset.config.vision = other.config.vision;
    preset.config.vision.out_hidden = preset.config.hidden;
  }
  if (opts.vision_depth < 0 || opts.vision_depth > 1024)
    return core::error("[synth] --vision-depth " + std::to_string(opts.vision_depth) + ": expected 0..1024");
  if (opts.vision_depth > 0) preset.config.vision.depth = opts.vision_depth;
  return write_synthetic_checkpoint(opts, preset);
}

Result<SynthSummary> write_synthetic_checkpoint(const SynthOptions& opts, const Preset& preset) {
  PlanOptions popts;
  QWEN35_RETURN_IF_ERROR(validate(opts, &popts));
  if (opts.format == "gguf") return write_synthetic_gguf(opts, preset, popts);
  const fs::path dir(opts.out_dir);
  QWEN35_RETURN_IF_ERROR(clean_dir(dir));
  const TensorPlan plan = build_tensor_plan(preset, popts);
  QWEN35_RETURN_IF_ERROR(write_text(dir / "config.json", make_config_json(preset, popts, plan)));
  QWEN35_RETURN_IF_ERROR(
      write_text(dir / "generation_config.json", make_generation_config_json(preset)));
  if (preset.config.vision.depth > 0)
    QWEN35_RETURN_IF_ERROR(write_text(dir / "preprocessor_config.json", make_preprocessor_config_json(preset)));
  QWEN35_RETURN_IF_ERROR(write_text(dir / "tokenizer.json", make_tokenizer_json(preset.bpe_vocab)));
  QWEN35_RETURN_IF_ERROR(write_text(
      dir / "tokenizer_config.json",
      make_tokenizer_config_json(preset.bpe_vocab, preset.config.max_position,
                                 preset.config.model_type)));
  QWEN35_ASSIGN_OR_RETURN(
      const ShardedOutput out,
      write_checkpoint_tensors(dir.string(), plan, popts.dialect, opts.seed,
                               std::max<uint64_t>(opts.max_shard_bytes, 1), opts.progress));
  SynthSummary s;
  s.n_tensors = int64_t(plan.tensors.size());
  s.total_bytes = out.total_bytes;
  s.n_files = int(out.files.size());
  return s;
}

}  // namespace qwen35::tools
