#include "cli/kv_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_assets.h"
#include "kernels/kv_format.h"
#include "model/kv_pool.h"
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

struct KvMeasured {
  std::vector<double> kl;
  int64_t agree = 0, predicted = 0;  // rows whose next token is in the text
  double nll_ref = 0, nll_type = 0;
  std::vector<double> a, b;  // a row's log-probabilities, f32 and the type
};

// One window row: KL(p_ref ‖ p_type), top-1 agreement and each side's NLL of the next token.
void measure_row(const float* ref, const float* got, int64_t V, int32_t next, KvMeasured* m) {
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

// Feeds seg to the f32 state and each type's (every state reset first), in chunks on the
// 64-position grid, and measures the rows at positions [from, to) of seg: their next token is
// seg's next one, or none past its end (`after`: the token that follows seg in the text, -1
// if none). states[i]'s rows go to meas[i].
core::Status measure_segment(model::Model& m, model::SequenceState* ref_state,
                             std::span<model::SequenceState* const> states,
                             std::span<const int32_t> seg, int64_t from, int64_t to, int32_t after,
                             int64_t chunk, std::vector<KvMeasured>* meas) {
  ref_state->reset();
  for (auto* st : states) st->reset();
  const int64_t n = int64_t(seg.size()), V = m.config().vocab;
  std::vector<float> ref_logits, logits;
  for (int64_t p = 0; p < n;) {
    const int64_t end = p < from ? std::min(from, p + chunk) : std::min(n, p + chunk);
    const bool all = p >= from;
    const std::span<const int32_t> rows_ids = seg.subspan(size_t(p), size_t(end - p));
    model::SequenceRows a{ref_state, rows_ids, all};
    if (auto st = m.forward(std::span<const model::SequenceRows>(&a, 1), &ref_logits); !st.ok()) return st;
    for (size_t i = 0; i < states.size(); ++i) {
      model::SequenceRows b{states[i], rows_ids, all};
      if (auto st = m.forward(std::span<const model::SequenceRows>(&b, 1), &logits); !st.ok()) return st;
      for (int64_t r = 0; all && r < end - p; ++r) {
        const int64_t pos = p + r;
        if (pos >= to) break;
        const int32_t next = pos + 1 < n ? seg[size_t(pos + 1)] : after;
        measure_row(ref_logits.data() + r * V, logits.data() + r * V, V, next, &(*meas)[i]);
      }
    }
    p = end;
  }
  return core::Status();
}

void print_measured(kernels::KvTypes types, const KvMeasured& meas, const std::string& where) {
  std::vector<double> sorted = meas.kl;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double k : meas.kl) mean += k;
  mean /= double(meas.kl.size());
  const double p99 = sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))];
  const double n = double(meas.kl.size());
  const double predicted = double(std::max<int64_t>(meas.predicted, 1));
  std::printf("kv %s vs f32: %s: mean KL %.3e, p99 KL %.3e, top-1 agreement %.4f, perplexity "
              "%.4f vs %.4f (f32)\n",
              kernels::kv_types_name(types).c_str(), where.c_str(), mean, p99,
              double(meas.agree) / n, std::exp(meas.nll_type / predicted),
              std::exp(meas.nll_ref / predicted));
}

}  // namespace

int run_kv_quality(const LoadOptions& lo, const KvQualityOptions& o) {
  if (o.window < 1 || o.depth < 0 || o.chunk < 64 || o.chunk % 64 != 0 || o.ppl_ctx < 0 ||
      (o.ppl_ctx > 0 && (o.ppl_ctx < 4 || o.ppl_ctx % 2 != 0)))
    return fail("logits", "--window must be >= 1, --depth >= 0, --chunk a multiple of 64 and "
                          "--ppl-ctx 0 or an even number >= 4");
  if (o.ppl_ctx > 0 && o.depth > 0) return fail("logits", "--ppl-ctx takes no --depth");
  std::ifstream in(o.text_file, std::ios::binary);
  if (!in) return fail("logits", "cannot read --kl-text '" + o.text_file + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto tok = load_tokenizer(lo.model_dir);
  if (!tok.ok()) return fail("logits", tok.message());
  auto ids = tok->encode(ss.str());
  if (!ids.ok()) return fail("logits", ids.message());
  const int64_t n_ids = int64_t(ids->size());
  const int64_t depth = o.ppl_ctx > 0 ? o.ppl_ctx : o.depth > 0 ? o.depth : n_ids;
  if (depth > n_ids || (o.ppl_ctx == 0 && o.window > depth))
    return fail("logits", "--kl-text has " + std::to_string(n_ids) + " tokens: fewer than " +
                              (o.ppl_ctx > 0 ? "--ppl-ctx " + std::to_string(depth)
                                             : "--depth " + std::to_string(depth) + " or --window " +
                                                   std::to_string(o.window)));
  auto lm = load_model(lo);
  if (!lm.ok()) return fail("logits", lm.message());
  model::Model& m = *lm->model;
  // The types measured: --kv-type's, then each --kl-also (one pass, one f32 state for all).
  std::vector<kernels::KvTypes> types = {m.kv_types()};
  for (const std::string& spec : o.more_types) {
    auto t = kernels::parse_kv_types(spec);
    if (!t.ok()) return fail("logits", "--kl-also: " + t.message());
    if (auto st = model::check_kv_types(m.config(), *t); !st.ok()) return fail("logits", "--kl-also: " + st.message());
    types.push_back(*t);
  }
  std::vector<std::unique_ptr<model::SequenceState>> owned;
  std::vector<model::SequenceState*> states;
  for (const kernels::KvTypes& t : types) {
    if (auto st = m.set_kv_types(t); !st.ok()) return fail("logits", st.message());
    owned.push_back(m.new_state(depth));
    states.push_back(owned.back().get());
  }
  if (!m.set_kv_types({}).ok()) return fail("logits", "f32 KV");
  auto ref_state = m.new_state(depth);
  std::vector<KvMeasured> meas(types.size());
  const std::span<const int32_t> all_ids(*ids);
  if (o.ppl_ctx > 0) {
    // Perplexity at a context C: consecutive chunks of C tokens, each from empty states; the
    // rows of the second half predict the chunk's next token, positions [C/2, C-1).
    const int64_t C = o.ppl_ctx, chunks = n_ids / C;
    for (int64_t k = 0; k < chunks; ++k) {
      auto st = measure_segment(m, ref_state.get(), states, all_ids.subspan(size_t(k * C), size_t(C)),
                                C / 2, C - 1, -1, o.chunk, &meas);
      if (!st.ok()) return fail("logits", st.message());
    }
    for (size_t i = 0; i < types.size(); ++i)
      print_measured(types[i], meas[i], "context " + std::to_string(C) + ", " + std::to_string(chunks) +
                                            " chunks, " + std::to_string(meas[i].predicted) +
                                            " tokens scored (the second half of each chunk)");
    return 0;
  }
  const int64_t from = depth - o.window;
  const int32_t after = depth < n_ids ? (*ids)[size_t(depth)] : -1;
  auto st = measure_segment(m, ref_state.get(), states, all_ids.first(size_t(depth)), from,
                            depth, after, o.chunk, &meas);
  if (!st.ok()) return fail("logits", st.message());
  for (size_t i = 0; i < types.size(); ++i)
    print_measured(types[i], meas[i], "depth " + std::to_string(depth) + ", positions " +
                                          std::to_string(from) + ".." + std::to_string(depth - 1));
  return 0;
}

}  // namespace qwen35::cli
