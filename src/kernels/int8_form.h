// The affine form of a ggml block-type matrix (GGUF files), in which the fast mode multiplies it
// with int8 activations: the codes of split_block (kernels/matrix.h) made unsigned and packed as
// an MLX row (code j at bits [j·bits, (j+1)·bits) of the row's little-endian words), one scale per
// group of block_group(t) elements, and the group's mins as biases or, for the types without
// mins, the implicit bias −zero·scale (Matrix::zero):
//   Q8_0: 8-bit, zero 128;  Q4_0: 4-bit, zero 8;  Q6_K: 6-bit in groups of 16, zero 32;
//   Q4_K, Q5_K: 4- and 5-bit, biases −dmin·m;  Q4_1, Q5_1: 4- and 5-bit, biases m;
//   Q5_0: 5-bit, zero 16;  Q2_K: 2-bit in groups of 16, biases −dmin·m;  Q3_K: 3-bit in groups of
//   16, zero 4;
//   IQ4_NL, IQ4_XS, and IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S: 4-bit code-book indices, zero 128
//   (Matrix::book: the kernels map index q to the code book[q] by a byte shuffle); the books are
//   kIq4Values and ± the IQ grids' levels (kernels/iq_grids.h: IQ2 6 values, IQ3 16), + 128.
// Rows in whole tiles of 16 store codes and scales tile-major (Matrix::codes_tiled, sb_tiled): a
// tile reads word j of its 16 rows as one vector, the matrix as one sequential stream.
// Scales and biases are stored as f16: products of an f16 and a small integer, rounded to f16
// they move by a relative 2^-11 at most (2^-25 absolute where subnormal), far below the int8
// rounding of the activations; the Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 scales and mins are the blocks'
// own f16 values, exact. A matrix with a value past f16's range stores f32 instead, exactly.
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace qwen35::kernels {

// The affine shape (type kAffine, rows, cols, bits, group, zero; no data) of a block-type
// matrix's form; bits == 0 where its type has none.
Matrix int8_form_shape(const Matrix& block);

// Builds the form (rows in parallel on pool, which may be null). Requires int8_form_shape(block).bits.
std::unique_ptr<Int8Form> make_int8_form(const Matrix& block, core::ThreadPool* pool);

}  // namespace qwen35::kernels
