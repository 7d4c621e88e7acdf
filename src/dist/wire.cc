#include "dist/wire.h"

namespace qwen35::dist {

void put_ops(std::vector<uint8_t>& m, std::span<const model::StateOp> ops) {
  put(m, uint32_t(ops.size()));
  for (const model::StateOp& op : ops) {
    put(m, op.kind);
    put(m, op.seq);
    put(m, op.a);
    put(m, op.b);
    put(m, op.c);
  }
}

std::vector<model::StateOp> read_ops(Reader& rd) {
  std::vector<model::StateOp> ops;
  const uint32_t n_ops = rd.get<uint32_t>();
  for (uint32_t i = 0; i < n_ops && rd.ok; ++i) {
    model::StateOp op;
    op.kind = rd.get<uint32_t>();
    op.seq = rd.get<int64_t>();
    op.a = rd.get<uint64_t>();
    op.b = rd.get<uint64_t>();
    op.c = rd.get<int64_t>();
    if (rd.ok) ops.push_back(op);
  }
  return ops;
}

}  // namespace qwen35::dist
