#include "cli/kv_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "cli/model_assets.h"
#include "kernels/kv_format.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {
namespace {

// log-softmax of one row of logits, in double.
void log_softmax(const float* l, int64_t V, std::vector<double>* out) {
  out->resize(size_t(V));
  double mx = l[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(l[v]));
  double z = 0;
  for (int64_t v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
  const double lz = mx + std::log(z);
  for (int64_t v = 0; v < V; ++v) (*out)[size_t(v)] = double(l[v]) - lz;
}

struct Measured {
  std::vector<double> kl;
  int64_t agree = 0, predicted = 0;  // rows whose next token is in the text
  double nll_ref = 0, nll_type = 0;
  std::vector<double> a, b;  // a row's log-probabilities, f32 and the type
};

// One window row: KL(p_ref ‖ p_type), top-1 agreement and each side's NLL of the next token.
void measure_row(const float* ref, const float* got, int64_t V, int32_t next, Measured* m) {
  std::vector<double>& a = m->a;
  std::vector<double>& b = m->b;
  log_softmax(ref, V, &a);
  log_softmax(got, V, &b);
  double kl = 0;
  for (int64_t v = 0; v < V; ++v) kl += std::exp(a[size_t(v)]) * (a[size_t(v)] - b[size_t(v)]);
  m->kl.push_back(std::max(kl, 0.0));
  m->agree += std::max_element(ref, ref + V) - ref == std::max_element(got, got + V) - got;
  if (next >= 0) {
    ++m->predicted;
    m->nll_ref -= a[size_t(next)];
    m->nll_type -= b[size_t(next)];
  }
}

}  // namespace

int run_kv_quality(const LoadOptions& lo, const KvQualityOptions& o) {
  if (o.window < 1 || o.depth < 0 || o.chunk < 64 || o.chunk % 64 != 0)
    return fail("logits", "--window must be >= 1, --depth >= 0 and --chunk a multiple of 64");
  std::ifstream in(o.text_file, std::ios::binary);
  if (!in) return fail("logits", "cannot read --kl-text '" + o.text_file + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto tok = load_tokenizer(lo.model_dir);
  if (!tok.ok()) return fail("logits", tok.message());
  auto ids = tok->encode(ss.str());
  if (!ids.ok()) return fail("logits", ids.message());
  const int64_t depth = o.depth > 0 ? o.depth : int64_t(ids->size());
  if (depth > int64_t(ids->size()) || o.window > depth)
    return fail("logits", "--kl-text has " + std::to_string(ids->size()) + " tokens: fewer than --depth " +
                              std::to_string(depth) + " or --window " + std::to_string(o.window));
  auto lm = load_model(lo);
  if (!lm.ok()) return fail("logits", lm.message());
  model::Model& m = *lm->model;
  const kernels::KvTypes types = m.kv_types();
  auto state = m.new_state(depth);
  if (!m.set_kv_types({}).ok()) return fail("logits", "f32 KV");
  auto ref_state = m.new_state(depth);
  const int64_t V = m.config().vocab, from = depth - o.window;
  Measured meas;
  std::vector<float> ref_logits, logits;
  for (int64_t p = 0; p < depth;) {
    // Chunks on the 64-position grid; the window's rows with every row's logits.
    const int64_t end = p < from ? std::min(from, p + o.chunk) : std::min(depth, p + o.chunk);
    const bool all = p >= from;
    const std::span<const int32_t> rows_ids(ids->data() + p, size_t(end - p));
    model::SequenceRows a{ref_state.get(), rows_ids, all}, b{state.get(), rows_ids, all};
    if (auto st = m.forward(std::span<const model::SequenceRows>(&a, 1), &ref_logits); !st.ok())
      return fail("logits", st.message());
    if (auto st = m.forward(std::span<const model::SequenceRows>(&b, 1), &logits); !st.ok())
      return fail("logits", st.message());
    for (int64_t r = 0; all && r < end - p; ++r) {
      const int64_t pos = p + r;
      const int32_t next = pos + 1 < int64_t(ids->size()) ? (*ids)[size_t(pos + 1)] : -1;
      measure_row(ref_logits.data() + r * V, logits.data() + r * V, V, next, &meas);
    }
    p = end;
  }
  std::vector<double> sorted = meas.kl;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double k : meas.kl) mean += k;
  mean /= double(meas.kl.size());
  const double p99 = sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))];
  const double n = double(meas.kl.size());
  std::printf("kv %s vs f32: depth %lld, positions %lld..%lld: mean KL %.3e, p99 KL %.3e, top-1 "
              "agreement %.4f, perplexity %.4f vs %.4f (f32)\n",
              kernels::kv_types_name(types).c_str(), (long long)depth, (long long)from,
              (long long)(depth - 1), mean, p99, double(meas.agree) / n,
              std::exp(meas.nll_type / double(std::max<int64_t>(meas.predicted, 1))),
              std::exp(meas.nll_ref / double(std::max<int64_t>(meas.predicted, 1))));
  return 0;
}

}  // namespace qwen35::cli
