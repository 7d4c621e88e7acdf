// Rows of fp32 values encoded as the ggml types `qwen35 synth --format gguf` writes: F32, F16,
// BF16, Q8_0 and Q4_0. The quantizers round as ggml's reference quantizers
// (quantize_row_q8_0_ref / quantize_row_q4_0_ref) do, so a file we write holds the bytes
// llama.cpp's own tools would write for the same values:
//   Q8_0, blocks of 32: d = max|x| / 127, q = roundf(x * (1/d)) (half away from zero), d as f16;
//   Q4_0, blocks of 32: m = the x of largest |x| (the first on ties), d = m / -8,
//     q = min(15, trunc(x * (1/d) + 8.5)), d as f16; byte j holds q[j] low, q[j + 16] high.
// A zero block has d = 0 and 1/d taken as 0. F16 and BF16 round to nearest even.
#pragma once

#include <cstdint>

#include "formats/gguf.h"

namespace qwen35::tools {

// Bytes of `n` elements of `t`; `n` must be a multiple of the type's block (32 for Q8_0 / Q4_0).
uint64_t gguf_row_bytes(formats::GgmlType t, int64_t n);

// Whether rows of `n` elements can be stored as `t` (whole blocks).
bool gguf_row_fits(formats::GgmlType t, int64_t n);

// Encodes x[0..n) as `t` into out[0..gguf_row_bytes(t, n)). `t` is one of the five types above.
void gguf_encode_row(formats::GgmlType t, const float* x, int64_t n, uint8_t* out);

}  // namespace qwen35::tools
