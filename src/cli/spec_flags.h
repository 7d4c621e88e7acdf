// --spec and --draft-tokens: speculative decoding flags, shared by run and serve.
#pragma once

#include "cli/flags.h"
#include <string>

#include "model/model.h"
#include "runtime/drafter.h"

namespace qwen35::cli {

struct SpecFlags {
  std::string method = "off";
  int draft_tokens = 3;
  int64_t draft_vocab = 32768;
};

inline void add_spec_flags(flags::App& app, SpecFlags* f) {
  app.add_option("--spec", f->method,
                 "speculative decoding: lookup (drafts by copying what followed the latest "
                 "earlier occurrence of the last tokens, no weights), mtp (the checkpoint's MTP "
                 "head) or off; the output is the same bits either way, only faster");
  app.add_option("--draft-tokens", f->draft_tokens,
                 "speculative decoding: the most tokens drafted and verified per step (1-" +
                     std::to_string(model::kMaxVerifyRows - 1) + ")");
  app.add_option("--draft-vocab", f->draft_vocab,
                 "--spec mtp: the head drafts among token ids below N only (BPE ids rise with "
                 "merge order: roughly the N most frequent tokens), scoring N/vocab of the head "
                 "per draft; 0: the whole vocabulary (default " + std::to_string(f->draft_vocab) + ")");
}

// Fills *out from the flags; returns an error message, or "" when they are valid for `m`. With
// --spec mtp, turns MTP drafting on in `m` (before any state is made); under a split (rank 0,
// `split_mtp_problem` given: why the last rank's head cannot draft, or "") the head is the last
// rank's and `m` is left as it is.
inline std::string resolve_spec(const SpecFlags& f, model::Model& m, runtime::SpecOptions* out,
                                const std::string* split_mtp_problem = nullptr) {
  const auto method = runtime::parse_spec_method(f.method);
  if (!method) return "--spec must be lookup, mtp or off, got '" + f.method + "'";
  if (f.draft_tokens < 1 || f.draft_tokens >= model::kMaxVerifyRows)
    return "--draft-tokens must be in [1, " + std::to_string(model::kMaxVerifyRows - 1) + "]";
  if (f.draft_vocab < 0) return "--draft-vocab must be >= 0 (0: the whole vocabulary)";
  if (*method == runtime::SpecMethod::kMtp && split_mtp_problem) {
    if (!split_mtp_problem->empty()) return *split_mtp_problem + "; use --spec lookup";
  } else if (*method == runtime::SpecMethod::kMtp) {
    if (const auto st = m.enable_mtp(); !st.ok()) return st.message() + "; use --spec lookup";
    m.set_draft_vocab(f.draft_vocab);
  }
  out->method = *method;
  out->draft_tokens = f.draft_tokens;
  return "";
}

}  // namespace qwen35::cli
