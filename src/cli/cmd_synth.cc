// qwen35 synth: random-weight checkpoints at the real Qwen3.5 geometries (tools/synth).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "tools/synth/presets.h"
#include "tools/synth/synth.h"

namespace qwen35::cli {

namespace {

void synth_usage(FILE* f) {
  std::string presets;
  for (const std::string& p : tools::preset_names()) {
    if (!presets.empty()) presets += '|';
    presets += p;
  }
  std::fprintf(f,
               "usage: qwen35 synth --preset %s [--format hf|mlx|gguf] [--bits 2|3|4|5|6|8]\n"
               "                    [--group-size 64] [--outtype f32|f16|bf16|q8_0|q4_0]\n"
               "                    [--mtp auto|on|off] [--vision auto|on|off] [--vision-preset P]\n"
               "                    [--vision-depth N] [--seed N] [--quiet]\n"
               "                    --out DIR|FILE.gguf\n"
               "Writes a random-weight checkpoint (config, tokenizer, safetensors) to DIR, or\n"
               "with --format gguf one GGUF file in llama.cpp's layout (same values as hf).\n"
               "  --format      hf: bf16, HF names (default); mlx: MLX affine-quantized;\n"
               "                gguf: llama.cpp's qwen35 / qwen35moe layout\n"
               "  --bits        mlx bits per weight: 2|3|4|5|6|8 (default 4)\n"
               "  --group-size  mlx quantization group: 32|64|128 (default 64)\n"
               "  --outtype     gguf matrix type: f32|f16|bf16|q8_0|q4_0 (default f16); norms and\n"
               "                other 1-D tensors stay f32, as llama.cpp's converter keeps them\n"
               "  --mtp         the MTP head (mtp.*): auto (default: hf and gguf yes, mlx no, as\n"
               "                mlx-lm exports), on, off\n"
               "  --vision      the vision tower: auto (default: hf yes; mlx no, as mlx-lm exports;\n"
               "                gguf no), on (gguf: an mmproj-NAME.gguf file beside NAME.gguf), off\n"
               "  --vision-preset  the tower of another preset (into this preset's hidden size)\n"
               "  --vision-depth   the tower's number of blocks (default: the preset's)\n"
               "  --seed        RNG seed (default 1); same seed, same bytes\n"
               "  --shard-gb    shard size limit in GiB (default 4)\n"
               "  --quiet       no progress bar (it is also off when stderr is not a terminal)\n",
               presets.c_str());
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || s[0] == '-') return false;
  *out = v;
  return true;
}

}  // namespace

int cmd_synth(int argc, char** argv) {
  tools::SynthOptions o;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      synth_usage(stdout);
      return 0;
    }
    if (a == "--quiet" || a == "-q") {
      quiet = true;
      continue;
    }
    if (i + 1 >= argc) return fail("synth", "missing value for '" + a + "' (see --help)");
    const std::string v = argv[++i];
    uint64_t n = 0;
    if (a == "--preset") {
      o.preset = v;
    } else if (a == "--format") {
      o.format = v;
    } else if (a == "--outtype") {
      o.outtype = v;
    } else if (a == "--mtp") {
      o.mtp = v;
    } else if (a == "--vision") {
      o.vision = v;
    } else if (a == "--vision-preset") {
      o.vision_preset = v;
    } else if (a == "--out" || a == "-o") {
      o.out_dir = v;
    } else if (a == "--bits" || a == "--group-size" || a == "--seed" || a == "--shard-gb" ||
               a == "--vision-depth") {
      if (!parse_u64(v, &n) || (a != "--seed" && n > 1024))
        return fail("synth", "bad value '" + v + "' for " + a);
      if (a == "--bits") o.bits = int(n);
      if (a == "--group-size") o.group_size = int(n);
      if (a == "--seed") o.seed = n;
      if (a == "--shard-gb") o.max_shard_bytes = (n == 0 ? 1 : n) << 30;
      if (a == "--vision-depth") o.vision_depth = int64_t(n);
    } else {
      return fail("synth", "unknown option '" + a + "' (see --help)");
    }
  }
  if (o.out_dir.empty()) return fail("synth", "--out DIR (or FILE.gguf) is required (see --help)");
  o.progress = !quiet && isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tools::write_synthetic_checkpoint(o);
  if (!r.ok()) return fail("synth", r.message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string quant;
  if (o.format == "mlx") {
    quant.append(" ").append(std::to_string(o.bits)).append("-bit g");
    quant.append(std::to_string(o.group_size));
  } else if (o.format == "gguf") {
    quant.append(" ").append(o.outtype.empty() ? "f16" : o.outtype);
  }
  std::printf("wrote %s: preset %s, format %s%s, %lld tensors, %.1f MB in %d file(s), %.1f s\n",
              o.out_dir.c_str(), o.preset.c_str(), o.format.c_str(), quant.c_str(),
              static_cast<long long>(r->n_tensors), double(r->total_bytes) / 1e6, r->n_files, s);
  return 0;
}

}  // namespace qwen35::cli
