// Stop strings matched on the streamed text, across token boundaries. Text that could still turn
// out to be the start of a stop string is held back until it is decided, so what has been emitted
// never has to be taken back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qwen35::tokenizer {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` (valid UTF-8) and returns what can be emitted now. When a stop string is
  // complete, *stopped is set and the result ends just before it; later calls return "".
  std::string push(std::string_view text, bool* stopped);
  // At the end of generation: the text still held back (no stop string completed).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that stopped the text (the earliest in it; "" while none has).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_, matched_;
  bool stopped_ = false;
};

}  // namespace qwen35::tokenizer
