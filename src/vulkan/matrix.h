// A weight matrix resident on a device, in its stored type (never expanded to f32), split by rows
// into parts that each fit one storage binding: a matrix larger than the device's binding limit
// (maxStorageBufferRange: 128 MiB on lavapipe, 4 GiB on most GPUs; or maxMemoryAllocationSize) is
// several buffers, and an op dispatches once per part. Parts are whole rows, so every output row's
// arithmetic is the same whichever part holds it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "kernels/ops.h"
#include "vulkan/device.h"

namespace qwen35::vulkan {

struct MatrixPart {
  int64_t row0 = 0, rows = 0;
  Buffer data;            // the rows' stored words (codes or blocks)
  Buffer scales, biases;  // kAffine: the rows' group scales and biases (biases may be absent)
};

struct DeviceMatrix {
  kernels::WeightType type = kernels::WeightType::kF32;
  int64_t rows = 0, cols = 0;
  int bits = 0, group = 0, zero = 0;
  core::DType sb_type = core::DType::kBF16;
  bool has_biases = false;
  std::vector<MatrixPart> parts;
  // The IQ2/IQ3 types: the format's code book (kernels/iq_grids.h grid points, uint16 each), which
  // their shaders read beside the blocks.
  Buffer grid;

  // Bytes on the device (all parts).
  uint64_t bytes() const;
};

// The shader variant suffix of a weight type ("f32", "affine", "q4_k"), or null when the device
// has no shader for it yet.
const char* shader_type(kernels::WeightType t);

// Whether the type's shaders read a code book (DeviceMatrix::grid): the IQ2/IQ3 types.
bool has_grid(kernels::WeightType t);

// Bytes of one stored row of m (codes only, for kAffine).
uint64_t row_bytes(const kernels::Matrix& m);

// The bytes upload_matrix(dev, m) takes on a device whose Device::part_limit() is `part_limit`
// (0: no limit, every matrix one part): DeviceMatrix::bytes() of the result, counted without a
// device (device memory planning, vkmodel/memory_plan.h).
uint64_t planned_bytes(const kernels::Matrix& m, uint64_t part_limit = 0);

// Uploads m in its stored type, split into parts of at most dev.part_limit() bytes each.
// Fails in one line for a type without a device shader, tile-major or code-book forms (the CPU's
// int8 forms), a row larger than a binding, or device memory running out.
core::Result<DeviceMatrix> upload_matrix(Device& dev, const kernels::Matrix& m);

}  // namespace qwen35::vulkan
