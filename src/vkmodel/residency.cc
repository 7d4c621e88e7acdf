#include "vkmodel/residency.h"

#include <algorithm>
#include <string>

namespace qwen35::vkmodel {

using Range = std::pair<uintptr_t, uint64_t>;

// The twin side of one mirrored state or pool: the host ranges it covers (sorted) and the host
// epoch its bytes were last synced at.
class Residency::Twin final : public model::Mirror::Twin {
 public:
  Twin(Residency* owner, model::Mirror* mirror) : owner_(owner), mirror_(mirror) {}

  void pull() override {
    for (const Range& r : ranges) {
      Region* g = owner_->find(r.first, r.second);
      if (!g) continue;
      core::Status st = owner_->dev_.download(g->buf, g->pad, reinterpret_cast<void*>(r.first), r.second);
      if (!st.ok() && owner_->pending_error_.empty()) owner_->pending_error_ = st.message();
    }
  }
  bool current() const override {
    return mirror_->device_ahead() || (!fresh && epoch == mirror_->host_epoch());
  }
  bool copy(const model::Mirror::Twin& from_twin, const Run* runs, size_t count,
            bool whole) override {
    const auto* from = dynamic_cast<const Twin*>(&from_twin);
    if (!from || from->owner_ != owner_ || fresh) return false;
    for (size_t i = 0; i < count; ++i)
      if (!from->holds(runs[i].src, runs[i].bytes) || !holds(runs[i].dst, runs[i].bytes)) return false;
    if (!owner_->copy_now(runs, count)) return false;
    if (whole) epoch = mirror_->host_epoch();
    return true;
  }
  // Whether [p, p + bytes) lies in one of the ranges this twin mirrors.
  bool holds(const void* p, uint64_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const Range& r : ranges)
      if (a >= r.first && a + bytes <= r.first + r.second) return true;
    return false;
  }
  void forget() override {
    for (const Range& r : ranges) owner_->drop(r.first);
    Residency* owner = owner_;
    std::erase(owner->synced_, this);
    auto it = std::find_if(owner->twins_.begin(), owner->twins_.end(),
                           [this](const std::unique_ptr<Twin>& t) { return t.get() == this; });
    if (it != owner->twins_.end()) owner->twins_.erase(it);  // destroys this: nothing after
  }

  Residency* owner_;
  model::Mirror* mirror_;
  std::vector<Range> ranges;
  uint64_t epoch = 0;
  bool fresh = true;  // no bytes synced yet
};

Residency::Residency(vulkan::Device& dev) : dev_(dev) {
  align_ = std::max<uint64_t>(4, dev.info().storage_offset_alignment);
}

Residency::~Residency() {
  for (auto& t : twins_) t->mirror_->set_twin(nullptr);
}

void Residency::fail(const std::string& what) {
  if (rec_) rec_->fail(core::error("[vulkan] " + what));
  else if (pending_error_.empty()) pending_error_ = "[vulkan] " + what;
}

Residency::Region* Residency::find(uintptr_t p, uint64_t bytes) {
  auto it = map_.upper_bound(p);
  if (it == map_.begin()) return nullptr;
  Region* g = std::prev(it)->second.get();
  return p + bytes <= g->base + g->bytes ? g : nullptr;
}

std::atomic<uint64_t>& Residency::held(const Region& g) {
  switch (g.kind) {
    case Kind::kConstant: return held_[0];
    case Kind::kMirrored: return held_[g.kv ? 2 : 1];
    case Kind::kScratch: break;
  }
  return held_[3];
}

Residency::Usage Residency::usage() const {
  return {held_[0].load(), held_[1].load(), held_[2].load(), held_[3].load()};
}

Residency::Region* Residency::make(uintptr_t base, uint64_t bytes, Kind kind, bool kv) {
  auto g = std::make_unique<Region>();
  g->base = base;
  g->bytes = bytes;
  g->pad = base % align_;
  g->kind = kind;
  g->kv = kv;
  auto buf = dev_.buffer(g->pad + bytes, vulkan::MemoryKind::kDevice);
  if (!buf.ok()) {
    fail(buf.message().substr(buf.message().find(']') + 2));
    return nullptr;
  }
  g->buf = std::move(*buf);
  held(*g) += g->buf.bytes();
  Region* raw = g.get();
  map_[base] = std::move(g);
  return raw;
}

void Residency::drop(uintptr_t base) {
  auto it = map_.find(base);
  if (it == map_.end()) return;
  held(*it->second) -= it->second->buf.bytes();
  retired_.push_back(std::move(it->second->buf));
  map_.erase(it);
}

void Residency::evict(uintptr_t lo, uintptr_t hi) {
  auto it = map_.upper_bound(lo);
  if (it != map_.begin()) --it;
  while (it != map_.end() && it->first < hi) {
    Region* g = it->second.get();
    ++it;
    if (g->base + g->bytes > lo && g->kind == Kind::kScratch) drop(g->base);
  }
}

core::Status Residency::add_constant(const void* p, uint64_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(p);
  if (bytes == 0 || find(base, bytes)) return core::ok_status();
  Region* g = make(base, bytes, Kind::kConstant);
  if (!g) {
    std::string e = pending_error_;
    pending_error_.clear();
    return core::error(e);
  }
  return dev_.upload(g->buf, g->pad, p, bytes);
}

void Residency::begin(vulkan::Recorder* rec) {
  rec_ = rec;
  if (!pending_error_.empty()) {
    rec_->fail(core::error(pending_error_));
    pending_error_.clear();
  }
}

void Residency::end() {
  rec_ = nullptr;
  retired_.clear();
  synced_.clear();
}

void Residency::abort() {
  for (Twin* t : synced_) {
    t->fresh = true;
    t->mirror_->host_wrote();
  }
  synced_.clear();
  std::vector<uintptr_t> scratch;
  for (const auto& [base, g] : map_)
    if (g->kind == Kind::kScratch) scratch.push_back(base);
  for (uintptr_t b : scratch) drop(b);
}

void Residency::mirror(model::Mirror& m, const std::vector<Range>& ranges_in, bool kv) {
  std::vector<Range> ranges = ranges_in;
  std::sort(ranges.begin(), ranges.end());
  Twin* t = nullptr;
  if (m.twin()) {
    t = dynamic_cast<Twin*>(m.twin());
    if (!t || t->owner_ != this) return fail("a state attached to another executor");
  } else {
    twins_.push_back(std::make_unique<Twin>(this, &m));
    t = twins_.back().get();
    m.set_twin(t);
  }
  // Buffers that went away (a record reallocated): their twins with them.
  for (const Range& r : t->ranges)
    if (!std::binary_search(ranges.begin(), ranges.end(), r)) drop(r.first);
  // The host's bytes are the current ones for a new buffer, and for all of them after a host
  // write; epoch 0 with nothing synced yet is the memory as made: zeros.
  const bool stale = t->fresh || m.host_epoch() != t->epoch;
  const bool zeros = t->fresh && m.host_epoch() == 0;
  if (stale || ranges != t->ranges) synced_.push_back(t);
  for (const Range& r : ranges) {
    Region* g = find(r.first, r.second);
    const bool known = std::binary_search(t->ranges.begin(), t->ranges.end(), r);
    if (!known || !g || g->base != r.first || g->bytes != r.second) {
      evict(r.first, r.first + r.second);
      if (find(r.first, 1) || find(r.first + r.second - 1, 1))
        return fail("a state's memory overlaps another state's twin");
      g = make(r.first, r.second, Kind::kMirrored, kv);
      if (!g) return;
      if (zeros) rec_->zero({&g->buf, 0, 0}, g->buf.bytes());
      else rec_->stage_in(reinterpret_cast<const void*>(r.first), r.second, {&g->buf, g->pad, r.second});
    } else if (stale) {
      if (zeros) rec_->zero({&g->buf, 0, 0}, g->buf.bytes());
      else rec_->stage_in(reinterpret_cast<const void*>(r.first), r.second, {&g->buf, g->pad, r.second});
    }
  }
  t->ranges = std::move(ranges);
  t->epoch = m.host_epoch();
  t->fresh = false;
  m.device_wrote();
}

void Residency::attach(model::SequenceState& st) {
  if (!rec_) return fail("a state attached outside a step");
  std::vector<std::span<float>> rs;
  st.regions(&rs);
  std::vector<Range> ranges;
  for (auto s : rs) ranges.emplace_back(reinterpret_cast<uintptr_t>(s.data()), s.size_bytes());
  mirror(st.mirror(), ranges, false);
  std::vector<std::span<uint8_t>> ps;
  st.pool()->regions(&ps);
  ranges.clear();
  for (auto s : ps) ranges.emplace_back(reinterpret_cast<uintptr_t>(s.data()), s.size_bytes());
  mirror(st.pool()->mirror(), ranges, true);
}

vulkan::Binding Residency::at(const void* p, uint64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (bytes == 0) bytes = 4;
  if (Region* g = find(a, bytes)) return {&g->buf, g->pad + (a - g->base), bytes};
  if (!rec_) {
    fail("a range named outside a step");
    return {};
  }
  // A scratch twin over the union of [a, a + bytes) and the scratch twins it overlaps, which
  // hand their bytes over (the MTP rows a draft carries to its next position live in one).
  uintptr_t lo = a, hi = a + bytes;
  std::vector<Region*> old;
  auto it = map_.upper_bound(a);
  if (it != map_.begin()) --it;
  for (; it != map_.end() && it->first < a + bytes; ++it) {
    Region* g = it->second.get();
    if (g->base + g->bytes <= a) continue;
    if (g->kind != Kind::kScratch) {
      fail("a range of " + std::to_string(bytes) + " bytes crosses a weight's or a state's memory");
      return {};
    }
    lo = std::min(lo, g->base);
    hi = std::max(hi, g->base + g->bytes);
    old.push_back(g);
  }
  std::vector<std::pair<uintptr_t, vulkan::Buffer>> moved;
  std::vector<std::pair<uintptr_t, uint64_t>> spans;
  for (Region* g : old) {
    spans.emplace_back(g->base + 0, g->bytes);
    held(*g) -= g->buf.bytes();
    moved.emplace_back(g->base - g->pad, std::move(g->buf));  // host address of device byte 0
    map_.erase(g->base);
  }
  Region* g = make(lo, hi - lo, Kind::kScratch);
  if (!g) return {};
  for (size_t i = 0; i < moved.size(); ++i) {
    const uintptr_t from0 = moved[i].first;
    const auto [base, n] = spans[i];
    rec_->copy({&moved[i].second, base - from0, n}, {&g->buf, g->pad + (base - lo), n}, n);
    retired_.push_back(std::move(moved[i].second));
  }
  return {&g->buf, g->pad + (a - lo), bytes};
}

vulkan::Binding Residency::mirrored(const void* p, uint64_t bytes) {
  const Region* g = find(reinterpret_cast<uintptr_t>(p), bytes);
  if (!g || g->kind != Kind::kMirrored) return {};
  const uint64_t at = g->pad + (reinterpret_cast<uintptr_t>(p) - g->base);
  // The recorder's copies move whole words.
  if (at % 4 || bytes % 4) return {};
  return {&g->buf, at, bytes};
}

bool Residency::submit_copies(const std::vector<std::pair<vulkan::Binding, vulkan::Binding>>& pairs) {
  if (rec_) return false;  // inside a step: the host copies (these run between steps)
  if (!copier_) copier_ = std::make_unique<vulkan::Recorder>(dev_);
  if (!copier_->begin().ok()) return false;
  for (const auto& [from, to] : pairs) copier_->copy(from, to, from.bytes);
  core::Status st = copier_->submit();
  if (!st.ok()) {
    // The copies may have run in part (a lost device): the device's bytes are no one's. The
    // error reaches the next step, which fails; the caller's host copy goes on meanwhile.
    if (pending_error_.empty()) pending_error_ = st.message();
    return false;
  }
  ++device_copies_;
  return true;
}

bool Residency::copy_now(const model::Mirror::Twin::Run* runs, size_t count) {
  std::vector<std::pair<vulkan::Binding, vulkan::Binding>> pairs;
  for (size_t i = 0; i < count; ++i) {
    const vulkan::Binding s = mirrored(runs[i].src, runs[i].bytes), d = mirrored(runs[i].dst, runs[i].bytes);
    if (!s.buffer || !d.buffer) return false;
    pairs.push_back({s, d});
  }
  return submit_copies(pairs);
}

Residency::Twin* Residency::twin_of(const model::Mirror& m) const {
  auto* t = dynamic_cast<Twin*>(m.twin());
  return t && t->owner_ == this ? t : nullptr;
}

bool Residency::current(const model::Mirror& m) const {
  const Twin* t = twin_of(m);
  return t && t->current();
}

bool Residency::synced_once(const model::Mirror& m) const {
  const Twin* t = twin_of(m);
  return t && !t->fresh;
}

void Residency::mark_current(model::Mirror& m) {
  Twin* t = twin_of(m);
  if (!t) return;
  t->epoch = m.host_epoch();
  m.device_wrote();
}

vulkan::Binding Residency::whole(const void* p, uintptr_t* base) {
  Region* g = find(reinterpret_cast<uintptr_t>(p), 1);
  if (!g) {
    fail("a KV block or state outside the memory attached to the step");
    return {};
  }
  *base = g->base;
  return {&g->buf, g->pad, g->bytes};
}

void Residency::send(const void* p, uint64_t bytes) {
  if (!rec_ || bytes == 0) return;
  const vulkan::Binding b = at(p, bytes);
  if (b.buffer) rec_->stage_in(p, bytes, b);
}

void Residency::receive(const void* p, uint64_t bytes) {
  if (!rec_ || bytes == 0) return;
  const vulkan::Binding b = at(p, bytes);
  if (b.buffer) rec_->stage_out(b, bytes, const_cast<void*>(p));
}

void Residency::forget(const void* p, uint64_t bytes) {
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  std::vector<uintptr_t> inside;
  for (auto it = map_.lower_bound(lo); it != map_.end() && it->first < hi; ++it)
    if (it->second->kind == Kind::kScratch && it->first + it->second->bytes <= hi)
      inside.push_back(it->first);
  for (uintptr_t b : inside) drop(b);
}

uint64_t Residency::bytes() const {
  uint64_t n = 0;
  for (const auto& [base, g] : map_) n += g->buf.bytes();
  return n;
}

}  // namespace qwen35::vkmodel
