#include "cli/answer_printer.h"

namespace qwen35::cli {
namespace {

void out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

AnswerPrinter::AnswerPrinter(bool in_reasoning, ReasoningDisplay display, bool indicator)
    : parser_(in_reasoning, /*parse_reasoning=*/true, /*parse_tools=*/false),
      display_(display),
      indicator_(indicator && display == ReasoningDisplay::kHidden) {}

void AnswerPrinter::push(std::string_view text) {
  for (const auto& p : parser_.push(text)) show(p);
}

void AnswerPrinter::finish() {
  for (const auto& p : parser_.flush()) show(p);
  close_reasoning();
}

void AnswerPrinter::show(const server::OutputPiece& p) {
  if (p.kind == server::OutputPiece::kReasoning) {
    reasoning_ += p.text;
    show_reasoning(p.text);
    return;
  }
  // Content (a tool call cannot occur: tools are not parsed).
  close_reasoning();
  content_ += p.text;
  out(p.text);
}

// Opens the block at the first visible character, so whitespace-only reasoning shows nothing.
void AnswerPrinter::show_reasoning(std::string_view text) {
  if (!open_) {
    pending_.append(text);
    if (blank(pending_)) return;
    open_ = true;
    if (display_ == ReasoningDisplay::kDim) out("\033[2m");
    if (display_ == ReasoningDisplay::kTagged) out("<think>\n");
    if (indicator_) std::fputs("thinking\xe2\x80\xa6", stderr), std::fflush(stderr);
    text = pending_;
  }
  if (display_ != ReasoningDisplay::kHidden && !text.empty()) {
    out(text);
    at_line_start_ = text.back() == '\n';
  }
  pending_.clear();
}

// Ends an open block on its own line, so the answer starts on a fresh one.
void AnswerPrinter::close_reasoning() {
  pending_.clear();
  if (!open_) return;
  open_ = false;
  if (display_ == ReasoningDisplay::kHidden) {
    if (indicator_) std::fputs("\r\033[K", stderr), std::fflush(stderr);
    return;
  }
  if (!at_line_start_) out("\n");
  out(display_ == ReasoningDisplay::kDim ? "\033[0m" : "</think>\n");
}

}  // namespace qwen35::cli
