#include "model/resident.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/tensor_table.h"

namespace qwen35::model {
namespace {

constexpr uintptr_t kPage = 4096;

// One byte of every page of [p, p + n) (the first at p, then each page boundary after it).
void touch(const void* p, size_t n) {
  if (p == nullptr || n == 0) return;
  volatile uint8_t sink = 0;
  const auto* b = static_cast<const uint8_t*>(p);
  sink = sink + b[0];
  for (uintptr_t a = (uintptr_t(b) / kPage + 1) * kPage; a < uintptr_t(b) + n; a += kPage)
    sink = sink + *reinterpret_cast<const uint8_t*>(a);
  (void)sink;
}

struct Walker {
  std::vector<std::pair<uintptr_t, uintptr_t>> maps;  // the mappings' [begin, end)
  std::set<const void*> seen;                         // ranges counted already
  HeldBytes held;

  bool mapped(const void* p) const {
    for (const auto& [b, e] : maps)
      if (uintptr_t(p) >= b && uintptr_t(p) < e) return true;
    return false;
  }
  void range(const void* p, size_t n) {
    if (p == nullptr || n == 0 || !seen.insert(p).second) return;
    touch(p, n);
    if (mapped(p)) {
      held.mapped += n;
      ++held.mapped_ranges;
    } else {
      held.copies += n;
    }
  }
  void matrix(const kernels::Matrix& m) {
    if (m.data == nullptr) return;
    if (m.type != kernels::WeightType::kAffine) return range(m.data, m.bytes());
    // Codes, scales and biases are three arrays (Matrix::bytes counts them together).
    const size_t sb = size_t(m.rows * (m.cols / m.group)) * core::dtype_size(m.sb_type);
    range(m.data, m.bytes() - sb * (m.biases ? 2 : 1));
    range(m.scales, sb);
    if (m.biases) range(m.biases, sb);
  }
  void slot(const Tensor& t, const Slot& s) {
    if (s.present != nullptr && !*s.present) return;
    if (s.matrix != nullptr) matrix(*s.matrix);
    if (s.floats != nullptr) range(s.floats->data(), s.floats->size() * sizeof(float));
    if (s.experts != nullptr)
      for (const MlpWeights& e : *s.experts) matrix(e.*t.expert);
  }
};

}  // namespace

void drop_mapped_pages(const ModelWeights& w) {
  for (const core::MappedFile* m : w.mappings()) m->drop_pages();
}

HeldBytes fault_in_held(ModelWeights& w) {
  Walker k;
  for (const core::MappedFile* m : w.mappings())
    if (!m->anonymous())
      k.maps.emplace_back(uintptr_t(m->data()), uintptr_t(m->data()) + m->size());
  const ModelConfig& c = w.config;
  for (const Tensor& t : tensor_table()) {
    if (t.is_vision() || !in_family(t, c)) continue;
    if (t.block == Block::kModel || t.block == Block::kHead || t.block == Block::kMtp) {
      if (t.block != Block::kMtp || w.mtp) k.slot(t, t.slot(w, nullptr));
      continue;
    }
    for (LayerWeights& l : w.layers)  // unbound layers have empty slots
      if (in_layer(t, c, l.kind)) k.slot(t, t.slot(w, &l));
    if (w.mtp && in_layer(t, c, LayerKind::kFullAttention)) k.slot(t, t.slot(w, &w.mtp->layer));
  }
  return k.held;
}

size_t mapped_resident_bytes(const ModelWeights& w) {
  std::vector<std::pair<uintptr_t, uintptr_t>> maps;
  for (const core::MappedFile* m : w.mappings())
    if (!m->anonymous()) maps.emplace_back(uintptr_t(m->data()), uintptr_t(m->data()) + m->size());
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  size_t total = 0;
  bool ours = false;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t b = 0, e = 0;
    size_t kb = 0;
    // An area's header ("begin-end perms offset dev inode path"; no field line reads as two
    // hex numbers joined by '-') or one of its fields ("Rss: N kB").
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &b, &e) == 2) {
      ours = false;
      for (const auto& [mb, me] : maps) ours = ours || (b < me && e > mb);
    } else if (ours && std::sscanf(line, "Rss: %zu kB", &kb) == 1) {
      total += kb << 10;
    }
  }
  std::fclose(f);
  return total;
}

}  // namespace qwen35::model
