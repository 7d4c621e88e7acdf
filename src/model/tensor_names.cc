#include "model/tensor_names.h"

namespace qwen35::model {

const DialectNames& dialect_names(Dialect d) { return d == Dialect::kMlx ? kMlxNames : kHfNames; }

namespace names {

std::string layer(const std::string& prefix, int64_t i) {
  return prefix + "layers." + std::to_string(i) + ".";
}

}  // namespace names
}  // namespace qwen35::model
