// SIMD twins (Highway dynamic dispatch) of the attention primitives over compressed KV rows
// (kernels/kv_format.h): the same arguments, the same float operations in the same order, so the
// same bits as kv_scores_ref / kv_values_ref on every target. AVX2, AVX-512 and AVX-512 VNNI run
// eight-lane vectors (the header's eight partials are the lanes; q8_0/q4_0 scores take their
// four-byte sums from vpmaddubsw + vpmaddwd, or vpdpbusd with VNNI); other targets run the
// reference loops.
#pragma once

#include <cstdint>

#include "kernels/kv_format.h"

namespace qwen35::kernels::cpu {

void kv_scores(const PreparedQuery& q, const uint8_t* k_rows, int64_t stride, int64_t n,
               float scale, float* s);
// kv_scores_many_ref's twin (same bits as kv_scores per query).
void kv_scores_many(const PreparedQuery* const* q, int nq, const uint8_t* k_rows, int64_t stride,
                    int64_t n, float scale, float* const* s);
void kv_values(const KvFormat& f, const float* w, const uint8_t* v_rows, int64_t stride, int64_t n,
               float* acc);

}  // namespace qwen35::kernels::cpu
