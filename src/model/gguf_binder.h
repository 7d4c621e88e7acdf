// The GGUF binder shared by the text model's binding (model/gguf_weights.cc) and the mmproj
// vision tower's (model/gguf_vision.cc): finds a tensor, checks its ggml shape (ne, innermost
// first) and type, views matrices in place and converts vectors to fp32, counting what it bound.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "formats/gguf.h"
#include "kernels/ops.h"

namespace qwen35::model {

using core::error;
using core::Result;
using formats::GgmlType;
using formats::GgufModel;
using formats::GgufTensor;
using kernels::Matrix;
using kernels::WeightType;

inline std::string ne_str(std::initializer_list<int64_t> ne) {
  std::string s = "[";
  size_t i = 0;
  for (int64_t d : ne) s += (i++ ? ", " : "") + std::to_string(d);
  return s + "]";
}

// The kernels' type for a ggml type; false for a type without kernels.
inline bool weight_type(GgmlType t, WeightType* w) {
  switch (t) {
    case GgmlType::kF32: *w = WeightType::kF32; return true;
    case GgmlType::kF16: *w = WeightType::kF16; return true;
    case GgmlType::kBF16: *w = WeightType::kBF16; return true;
    case GgmlType::kQ8_0: *w = WeightType::kQ8_0; return true;
    case GgmlType::kQ4_0: *w = WeightType::kQ4_0; return true;
    case GgmlType::kIQ4_NL: *w = WeightType::kIQ4_NL; return true;
    case GgmlType::kQ4_K: *w = WeightType::kQ4_K; return true;
    case GgmlType::kQ5_K: *w = WeightType::kQ5_K; return true;
    case GgmlType::kQ6_K: *w = WeightType::kQ6_K; return true;
    case GgmlType::kIQ4_XS: *w = WeightType::kIQ4_XS; return true;
    case GgmlType::kQ4_1: *w = WeightType::kQ4_1; return true;
    case GgmlType::kQ5_0: *w = WeightType::kQ5_0; return true;
    case GgmlType::kQ5_1: *w = WeightType::kQ5_1; return true;
    case GgmlType::kQ2_K: *w = WeightType::kQ2_K; return true;
    case GgmlType::kQ3_K: *w = WeightType::kQ3_K; return true;
    case GgmlType::kIQ2_XXS: *w = WeightType::kIQ2_XXS; return true;
    case GgmlType::kIQ2_XS: *w = WeightType::kIQ2_XS; return true;
    case GgmlType::kIQ3_XXS: *w = WeightType::kIQ3_XXS; return true;
    case GgmlType::kIQ3_S: *w = WeightType::kIQ3_S; return true;
    default: return false;
  }
}

inline constexpr const char* kSupportedTypes =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, "
    "IQ3_S, IQ4_XS";

class GgufBinder {
 public:
  explicit GgufBinder(const GgufModel& g) : g_(g) {}
  size_t bytes() const { return bytes_; }
  int64_t params() const { return params_; }
  bool has(const std::string& name) const { return g_.find(name) != nullptr; }

  // A matrix [out, in] (ggml ne [in, out]), or `experts` of them stacked (ne [in, out, experts])
  // as one Matrix of experts·out rows.
  Result<Matrix> matrix(const std::string& name, int64_t out, int64_t in, int64_t experts = 0) {
    const GgufTensor* t = g_.find(name);
    const std::string want = experts ? ne_str({in, out, experts}) : ne_str({in, out});
    if (t == nullptr) return error("[weights] missing tensor '" + name + "' (expected ggml shape " + want + ")");
    const bool shape_ok = experts ? t->ne == std::vector<int64_t>{in, out, experts}
                                  : (t->ne == std::vector<int64_t>{in, out} || (out == 1 && t->ne == std::vector<int64_t>{in}));
    if (!shape_ok)
      return error("[weights] tensor '" + name + "': expected ggml shape " + want + ", found " + t->shape_str());
    Matrix m;
    if (!weight_type(t->type, &m.type))
      return error("[weights] tensor '" + name + "': type " + formats::ggml_type_name(t->type) +
                   " is not supported (supported: " + kSupportedTypes + ")");
    m.rows = (experts ? experts : 1) * out;
    m.cols = in;
    m.data = t->data;
    bytes_ += t->nbytes;
    params_ += m.rows * m.cols;
    return m;
  }

  // A vector of `dim` floats, any supported type, converted to fp32.
  Result<std::vector<float>> vec(const std::string& name, int64_t dim) {
    const GgufTensor* t = g_.find(name);
    if (t == nullptr) return error("[weights] missing tensor '" + name + "' (expected ggml shape " + ne_str({dim}) + ")");
    if (t->ne != std::vector<int64_t>{dim})
      return error("[weights] tensor '" + name + "': expected ggml shape " + ne_str({dim}) + ", found " + t->shape_str());
    return floats_(*t, name, 1, dim);
  }

  // ssm_conv1d: ne [kernel, channels] -> fp32 [channels, kernel].
  Result<std::vector<float>> conv(const std::string& name, int64_t C, int64_t K) {
    const GgufTensor* t = g_.find(name);
    if (t == nullptr) return error("[weights] missing tensor '" + name + "' (expected ggml shape " + ne_str({K, C}) + ")");
    if (t->ne != std::vector<int64_t>{K, C})
      return error("[weights] tensor '" + name + "': expected ggml shape " + ne_str({K, C}) + ", found " + t->shape_str());
    return floats_(*t, name, C, K);
  }

  // A tensor of rows × cols values of any supported type, converted to fp32 and counted.
  Result<std::vector<float>> floats(const GgufTensor& t, const std::string& name, int64_t rows, int64_t cols) {
    return floats_(t, name, rows, cols);
  }
  const GgufModel& model() const { return g_; }

 private:
  Result<std::vector<float>> floats_(const GgufTensor& t, const std::string& name, int64_t rows, int64_t cols) {
    Matrix m;
    if (!weight_type(t.type, &m.type))
      return error("[weights] tensor '" + name + "': type " + formats::ggml_type_name(t.type) +
                   " is not supported (supported: " + kSupportedTypes + ")");
    m.rows = rows;
    m.cols = cols;
    m.data = t.data;
    std::vector<float> v(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) kernels::decode_row(m, r, v.data() + r * cols);
    bytes_ += t.nbytes;
    params_ += rows * cols;
    return v;
  }

  const GgufModel& g_;
  size_t bytes_ = 0;
  int64_t params_ = 0;
};

}  // namespace qwen35::model
