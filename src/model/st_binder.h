// The safetensors binder shared by the text model's binding (model/weights.cc) and the vision
// tower's (model/vision_weights.cc): finds a tensor, checks its dtype and shape (MLX-quantized
// shapes included), converts vectors to fp32, and counts the bytes and parameters it bound.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "core/result.h"
#include "formats/safetensors.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/tensor_names.h"

namespace qwen35::model {

using core::DType;
using core::error;
using core::Result;
using core::Status;
using formats::TensorView;
using kernels::Matrix;
using kernels::WeightType;
using namespace names;  // prefixes and suffixes: kTextOnlyPrefix, kWeight, ...

inline bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

inline std::string shp(std::initializer_list<int64_t> s) { return formats::shape_to_string(std::vector<int64_t>(s)); }

class Binder {
 public:
  Binder(const formats::TensorStore& store, const ModelConfig& cfg, std::string prefix)
      : store_(store), cfg_(cfg), prefix_(std::move(prefix)) {}

  size_t bytes() const { return bytes_; }
  int64_t params() const { return params_; }

  const TensorView* find(const std::string& full) const { return store_.find(full); }

  Status missing(const std::string& full, const std::string& expect) const {
    return error("[weights] missing tensor '" + full + "' (expected " + expect + ")");
  }

  // A float vector [dim] converted to fp32, plus `offset` per element.
  Result<std::vector<float>> vec(const std::string& full, int64_t dim, float offset = 0.0f) {
    const TensorView* t = find(full);
    if (t == nullptr) return missing(full, shp({dim}));
    if (!is_float(t->dtype))
      return error("[weights] tensor '" + full + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
    if (t->shape != std::vector<int64_t>{dim})
      return error("[weights] tensor '" + full + "': expected shape " + shp({dim}) + ", found " + t->shape_str());
    account(*t, dim);
    return to_f32(*t, offset);
  }

  // `experts` stacked matrices [experts, out, in] (`three_d`; else one [out, in]) as one Matrix
  // of experts*out rows, float or MLX-quantized. `key` is the tensor name, `module` the
  // quantization module path (key without ".weight").
  Result<Matrix> stacked(const std::string& key, const std::string& module, int64_t experts,
                         int64_t out, int64_t in, bool three_d) {
    const TensorView* w = find(key);
    std::vector<int64_t> lead;
    if (three_d) lead.push_back(experts);
    auto with_lead = [&](std::initializer_list<int64_t> tail) {
      std::vector<int64_t> s = lead;
      s.insert(s.end(), tail);
      return s;
    };
    const TensorView* scales = find(module + kScales);
    bool unquantized_override = false;
    const formats::QuantSpec* spec = nullptr;
    if (cfg_.quantization) spec = cfg_.quantization->lookup(module, &unquantized_override);
    if (w == nullptr) return missing(key, formats::shape_to_string(with_lead({out, in})));
    Matrix m;
    m.rows = experts * out;
    m.cols = in;
    if (scales == nullptr) {
      if (!is_float(w->dtype))
        return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(w->dtype)) +
                     " without '.scales' (not a float matrix and not MLX-quantized)");
      if (w->shape != with_lead({out, in}))
        return error("[weights] tensor '" + key + "': expected shape " +
                     formats::shape_to_string(with_lead({out, in})) + ", found " + w->shape_str());
      m.type = w->dtype == DType::kF32 ? WeightType::kF32 : w->dtype == DType::kF16 ? WeightType::kF16 : WeightType::kBF16;
      m.data = w->data;
      account(*w, experts * out * in);
      return m;
    }
    if (unquantized_override)
      return error("[weights] tensor '" + key + "': quantized in the file but config.json marks '" + module + "' unquantized");
    if (!cfg_.quantization)
      return error("[weights] tensor '" + key + "' is MLX-quantized but config.json has no 'quantization' block");
    const formats::QuantSpec q = spec ? *spec : cfg_.quantization->defaults;
    if (in % q.group_size != 0 || (in * q.bits) % 32 != 0)
      return error("[weights] '" + module + "': in-features " + std::to_string(in) + " not divisible by group size " +
                   std::to_string(q.group_size) + " (" + std::to_string(q.bits) + "-bit)");
    const std::string what = " (" + std::to_string(q.bits) + "-bit, group " + std::to_string(q.group_size) + ")";
    if (w->dtype != DType::kU32)
      return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(w->dtype)) + ", expected U32" + what);
    if (w->shape != with_lead({out, in * q.bits / 32}))
      return error("[weights] tensor '" + key + "': expected shape " +
                   formats::shape_to_string(with_lead({out, in * q.bits / 32})) + what + ", found " + w->shape_str());
    const TensorView* biases = find(module + kBiases);
    for (const TensorView* t : {scales, biases}) {
      const std::string name = module + (t == scales ? kScales : kBiases);
      if (t == nullptr) return missing(name, formats::shape_to_string(with_lead({out, in / q.group_size})));
      if (!is_float(t->dtype))
        return error("[weights] tensor '" + name + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
      if (t->shape != with_lead({out, in / q.group_size}))
        return error("[weights] tensor '" + name + "': expected shape " +
                     formats::shape_to_string(with_lead({out, in / q.group_size})) + what + ", found " + t->shape_str());
    }
    if (scales->dtype != biases->dtype)
      return error("[weights] '" + module + "': scales and biases have different dtypes");
    m.type = WeightType::kAffine;
    m.bits = q.bits;
    m.group = q.group_size;
    m.data = w->data;
    m.scales = scales->data;
    m.biases = biases->data;
    m.sb_type = scales->dtype;
    account(*w, experts * out * in);
    account(*scales, 0);
    account(*biases, 0);
    return m;
  }

  // Counts a bound tensor: its stored bytes and `params` parameters.
  void account(const TensorView& t, int64_t params) {
    bytes_ += t.nbytes;
    params_ += params;
  }
  // A float tensor's values as fp32, plus `offset` each.
  static std::vector<float> to_f32(const TensorView& t, float offset) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      float x;
      switch (t.dtype) {
        case DType::kF32: std::memcpy(&x, t.data + 4 * i, 4); break;
        case DType::kF16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); x = core::f16_to_f32(h); break; }
        default: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); x = core::bf16_to_f32(h); break; }
      }
      v[i] = offset + x;
    }
    return v;
  }

 private:
  const formats::TensorStore& store_;
  const ModelConfig& cfg_;
  std::string prefix_;
  size_t bytes_ = 0;
  int64_t params_ = 0;
};


}  // namespace qwen35::model
