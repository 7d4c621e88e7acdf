// --spec and --draft-tokens: speculative decoding flags, shared by run and serve.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/model.h"
#include "runtime/drafter.h"

namespace qwen35::cli {

struct SpecFlags {
  std::string method = "off";
  int draft_tokens = 3;
};

inline void add_spec_flags(CLI::App& app, SpecFlags* f) {
  app.add_option("--spec", f->method,
                 "speculative decoding: lookup (drafts by copying what followed the latest "
                 "earlier occurrence of the last tokens, no weights), mtp (the checkpoint's MTP "
                 "head) or off; the output is the same bits either way, only faster");
  app.add_option("--draft-tokens", f->draft_tokens,
                 "speculative decoding: the most tokens drafted and verified per step (1-" +
                     std::to_string(model::kMaxVerifyRows - 1) + ")");
}

// Fills *out from the flags; returns an error message, or "" when they are valid for `m`. With
// --spec mtp, turns MTP drafting on in `m` (before any state is made).
inline std::string resolve_spec(const SpecFlags& f, model::Model& m, runtime::SpecOptions* out) {
  const auto method = runtime::parse_spec_method(f.method);
  if (!method) return "--spec must be lookup, mtp or off, got '" + f.method + "'";
  if (f.draft_tokens < 1 || f.draft_tokens >= model::kMaxVerifyRows)
    return "--draft-tokens must be in [1, " + std::to_string(model::kMaxVerifyRows - 1) + "]";
  if (*method == runtime::SpecMethod::kMtp)
    if (const auto st = m.enable_mtp(); !st.ok()) return st.message() + "; use --spec lookup";
  out->method = *method;
  out->draft_tokens = f.draft_tokens;
  return "";
}

}  // namespace qwen35::cli
