#include "tools/synth/presets.h"

namespace qwen35::tools {

namespace {

// Real geometries. Shared: vocab 248320 rows, BPE 248044 + 33 added tokens (248044..248076).
Geometry real(const char* name, int64_t hidden, int64_t layers, int64_t intermediate, int64_t heads,
              int64_t kv_heads, int64_t lin_k, int64_t lin_v, bool tied) {
  Geometry g;
  g.name = name;
  g.hidden = hidden;
  g.layers = layers;
  g.intermediate = intermediate;
  g.heads = heads;
  g.kv_heads = kv_heads;
  g.lin_k_heads = lin_k;
  g.lin_v_heads = lin_v;
  g.tied = tied;
  g.bpe_vocab = 248044;
  g.vocab_rows = 248320;
  return g;
}

// The gen_tiny default geometry with a small synthetic tokenizer: BPE vocabulary 4000 (256 byte
// symbols + 3744 merges), added tokens at 4000..4032, vocab rows rounded up to 4096 (multiple of
// 64).
Geometry tiny(const char* name) {
  Geometry g;
  g.name = name;
  g.hidden = 128;
  g.layers = 8;
  g.intermediate = 256;
  g.heads = 4;
  g.kv_heads = 2;
  g.lin_k_heads = 2;
  g.lin_v_heads = 4;
  g.tied = true;
  g.bpe_vocab = 4000;
  g.vocab_rows = 4096;
  g.fan_in_init = true;
  return g;
}

std::vector<Geometry> all_presets() {
  std::vector<Geometry> v;
  v.push_back(tiny("tiny"));
  Geometry tm = tiny("tiny-moe");
  tm.intermediate = 0;
  tm.experts = 8;
  tm.top_k = 2;
  tm.moe_intermediate = 128;
  tm.shared_intermediate = 128;
  tm.tied = false;
  v.push_back(tm);
  v.push_back(real("0.8b", 1024, 24, 3584, 8, 2, 16, 16, true));
  // 2B: the linear-attention head counts were not found in public sources; 16/16 as in 0.8B.
  v.push_back(real("2b", 2048, 24, 6144, 8, 2, 16, 16, true));
  v.push_back(real("4b", 2560, 32, 9216, 16, 4, 16, 32, true));
  v.push_back(real("9b", 4096, 32, 12288, 16, 4, 16, 32, false));
  v.push_back(real("27b", 5120, 64, 17408, 24, 4, 16, 48, false));
  Geometry moe = real("35b-a3b", 2048, 40, 0, 16, 2, 16, 32, false);
  moe.experts = 256;
  moe.top_k = 8;
  moe.moe_intermediate = 512;
  moe.shared_intermediate = 512;
  v.push_back(moe);
  return v;
}

}  // namespace

core::Result<Geometry> find_preset(const std::string& name) {
  for (const Geometry& g : all_presets())
    if (g.name == name) return g;
  std::string names;
  for (const std::string& n : preset_names()) {
    if (!names.empty()) names += '|';
    names += n;
  }
  return core::error("[synth] unknown preset '" + name + "' (expected " + names + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const Geometry& g : all_presets()) v.push_back(g.name);
  return v;
}

}  // namespace qwen35::tools
