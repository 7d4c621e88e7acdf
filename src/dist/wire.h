// The byte layout of the pipeline's messages (dist/pipeline.h): fields appended as the machine
// writes them (every rank runs one binary, checked at start), read back with every read
// bounds-checked.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "model/state_op.h"

namespace qwen35::dist {

inline void put(std::vector<uint8_t>& m, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  m.insert(m.end(), b, b + n);
}
template <class T>
void put(std::vector<uint8_t>& m, T v) {
  put(m, &v, sizeof v);
}

// Reads a message another rank wrote; after a read past its end, ok is false and every later
// read gives zeros.
struct Reader {
  const std::vector<uint8_t>& m;
  size_t at = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    read(&v, sizeof v);
    return v;
  }
  void read(void* p, size_t n) {
    if (!ok || n > m.size() - at) {
      ok = false;
      return;
    }
    std::memcpy(p, m.data() + at, n);
    at += n;
  }
};

// A message's state ops (model/state_op.h): a count, then each op's fields.
void put_ops(std::vector<uint8_t>& m, std::span<const model::StateOp> ops);
// A message's state ops (put_ops), in order; rd.ok says whether they were whole.
std::vector<model::StateOp> read_ops(Reader& rd);

}  // namespace qwen35::dist
