#include "server/json_limits.h"

#include <string>

namespace qwen35::server {
namespace {

// Counts open containers; returning false from a callback stops nlohmann's (iterative) parser.
class DepthSax {
 public:
  explicit DepthSax(int max_depth) : max_depth_(max_depth) {}
  bool too_deep() const { return too_deep_; }

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(int64_t) { return true; }
  bool number_unsigned(uint64_t) { return true; }
  bool number_float(double, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(std::vector<uint8_t>&) { return true; }
  bool key(std::string&) { return true; }
  bool start_object(size_t) { return open(); }
  bool start_array(size_t) { return open(); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  bool open() {
    if (++depth_ > max_depth_) too_deep_ = true;
    return !too_deep_;
  }
  bool close() {
    --depth_;
    return true;
  }
  int max_depth_, depth_ = 0;
  bool too_deep_ = false;
};

}  // namespace

JsonStatus check_json(std::string_view text, int max_depth) {
  DepthSax sax(max_depth);
  bool ok = false;
  try {
    ok = nlohmann::ordered_json::sax_parse(text, &sax, nlohmann::json::input_format_t::json,
                                           /*strict=*/true);
  } catch (...) {  // parse_error returns false, so nothing should throw; be safe anyway
    ok = false;
  }
  if (sax.too_deep()) return JsonStatus::kTooDeep;
  return ok ? JsonStatus::kOk : JsonStatus::kInvalid;
}

nlohmann::ordered_json parse_json(std::string_view text, int max_depth, JsonStatus* status) {
  const JsonStatus st = check_json(text, max_depth);
  if (status) *status = st;
  if (st != JsonStatus::kOk)
    return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (status && j.is_discarded()) *status = JsonStatus::kInvalid;
  return j;
}

}  // namespace qwen35::server
