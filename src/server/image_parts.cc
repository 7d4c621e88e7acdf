#include "server/image_parts.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "server/request_fields.h"

namespace qwen35::server {
using namespace fields;
namespace {

int base64_value(unsigned char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+' || ch == '-') return 62;
  if (ch == '/' || ch == '_') return 63;
  return -1;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(),
                    [](char a, char b) { return std::tolower((unsigned char)a) == std::tolower((unsigned char)b); });
}

ApiError about(const std::string& where, const std::string& what) { return bad(where, "'" + where + "': " + what); }

std::string count_of(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// A data: URL's header ("image/png;base64") -> refusal or nothing.
std::optional<ApiError> check_data_header(std::string_view header, const std::string& where) {
  const size_t semi = header.find(';');
  const std::string_view media = header.substr(0, semi);
  if (starts_with_nocase(media, "video/")) return video_refused(std::string(media), where);
  if (!starts_with_nocase(media, "image/"))
    return about(where, "the data: URL's media type '" + std::string(media) +
                            "' is not an image (send data:image/png;base64,... or another image/ type)");
  bool base64 = false;
  for (size_t p = semi; p != std::string_view::npos;) {
    const size_t next = header.find(';', p + 1);
    if (starts_with_nocase(header.substr(p + 1, next == std::string_view::npos ? next : next - p - 1), "base64"))
      base64 = true;
    p = next;
  }
  if (!base64) return about(where, "the data: URL is not base64 (send data:image/...;base64,...)");
  return std::nullopt;
}

}  // namespace

bool base64_decode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size() / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t n = 0, pad = 0;
  for (unsigned char ch : in) {
    if (ch == '\n' || ch == '\r') continue;  // MIME line breaks; a space is no base64
    if (ch == '=') {
      ++pad;
      continue;
    }
    const int v = base64_value(ch);
    if (v < 0 || pad > 0) return false;  // a foreign character, or data after the padding
    acc = acc << 6 | uint32_t(v);
    bits += 6;
    ++n;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(char((acc >> bits) & 0xff));
    }
  }
  if (n % 4 == 1 || pad > 2 || (pad > 0 && (n + pad) % 4 != 0)) return false;
  return true;
}

ApiError video_refused(const std::string& type, const std::string& where) {
  return about(where, "video input ('" + type + "') is not supported yet; send images");
}

std::optional<ApiError> read_image_url(const std::string& url, const std::string& where, std::string* bytes) {
  std::string_view data = url;
  if (starts_with_nocase(url, "data:")) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return about(where, "the data: URL has no ',' before its data");
    QWEN35_TRY(check_data_header(std::string_view(url).substr(5, comma - 5), where));
    data = std::string_view(url).substr(comma + 1);
  } else if (starts_with_nocase(url, "http://") || starts_with_nocase(url, "https://") ||
             url.find("://") != std::string::npos || starts_with_nocase(url, "file:")) {
    return about(where, "the server fetches nothing: send the image as a data: URL "
                        "(data:image/png;base64,...)");
  }
  if (!base64_decode(data, bytes))
    return about(where, starts_with_nocase(url, "data:") ? "the data: URL's data is not valid base64"
                                                         : "the image is neither a data: URL nor valid base64");
  if (bytes->empty()) return about(where, "the image is empty");
  return std::nullopt;
}

void add_image(ChatMessage* m, std::string bytes, std::string origin) {
  m->images.push_back(ChatImage{m->content.size(), std::move(bytes), std::move(origin)});
}

bool mentions_images(const Json& j) {
  if (j.is_object()) {
    if (const auto t = j.find("type"); t != j.end() && t->is_string()) {
      const std::string& type = t->get_ref<const std::string&>();
      if (type == "image_url" || type == "input_image" || type == "image") return true;
    }
    for (const auto& [k, v] : j.items())
      if ((v.is_object() || v.is_array()) && mentions_images(v)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if ((v.is_object() || v.is_array()) && mentions_images(v)) return true;
  }
  return false;
}

bool has_images(const ChatRequest& c) {
  return std::any_of(c.messages.begin(), c.messages.end(), [](const ChatMessage& m) { return !m.images.empty(); });
}

namespace {

// Refusals that need no decoding: no encoder or tower, too many images, no image token.
std::optional<ApiError> check_images(const std::vector<const ChatImage*>& all, const ModelInfo& mi) {
  const std::string& first = all.front()->origin;
  if (!mi.images) return about(first, "this server takes no images");
  if (!mi.images->available())
    return about(first, "this model has no vision tower (" + mi.images->why_not() + ")");
  if (int64_t(all.size()) > mi.max_images)
    return about(all[size_t(mi.max_images)]->origin,
                 "more than the limit of " + std::to_string(mi.max_images) + " images in one request (--max-images)");
  if (mi.image_token < 0) return about(first, "this model's vocabulary has no image token (<|image_pad|>)");
  return std::nullopt;
}

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / double(1 << 20));
  return b;
}

// The refusals a request's image headers decide: a prompt longer than the context, images that
// need more memory than one request may take.
std::optional<ApiError> admit(const ChatRequest& c, const ModelInfo& mi, int64_t prompt, int64_t peak) {
  if (mi.ctx > 0 && prompt >= mi.ctx)
    return bad(c.names.messages, "the prompt has " + std::to_string(prompt) + " tokens with its images, more than the context of " +
                                     std::to_string(mi.ctx) + " tokens allows (at most " + std::to_string(mi.ctx - 1) +
                                     "); send fewer or smaller images");
  if (mi.image_request_bytes > 0 && peak > mi.image_request_bytes)
    return bad(c.names.messages, "decoding this request's images takes " + mib(peak) + ", more than the " +
                                     mib(mi.image_request_bytes) + " one request may take (--image-request-mb); "
                                     "send fewer or smaller images");
  return std::nullopt;
}

// The byte offsets of the template's pad spellings in `text` (outside the client's literal text).
std::vector<size_t> template_pads(const std::string& text, std::string_view pad,
                                  const std::vector<tokenizer::TextRange>& literal) {
  std::vector<size_t> at;
  for (size_t p = text.find(pad); !pad.empty() && p != std::string::npos; p = text.find(pad, p + 1)) {
    const bool client = std::any_of(literal.begin(), literal.end(),
                                    [&](const tokenizer::TextRange& r) { return p >= r.begin && p < r.end; });
    if (!client) at.push_back(p);
  }
  return at;
}

}  // namespace

std::optional<ApiError> attach_images(const ChatRequest& c, const ModelInfo& mi, const std::string& text,
                                      const std::vector<tokenizer::TextRange>& literal,
                                      std::vector<int32_t>* ids, CompletionRequest* r, std::string* text_out) {
  std::vector<const ChatImage*> all;
  for (const auto& m : c.messages)
    for (const auto& im : m.images) all.push_back(&im);
  if (all.empty()) return std::nullopt;
  QWEN35_TRY(check_images(all, mi));
  const int64_t slots = std::count(ids->begin(), ids->end(), mi.image_token);
  if (slots != int64_t(all.size()))
    return bad(c.names.messages, "the chat template placed " + count_of(size_t(slots), "image slot") + " for " +
                                     count_of(all.size(), "image"));
  // Every image's header first: the prompt's length and the memory its images will take are
  // known, and refused, before a pixel is decoded.
  std::vector<runtime::ImageEncoder::Plan> plans;
  int64_t prompt = int64_t(ids->size()) - slots, rows = 0, peak = 0;
  for (const ChatImage* im : all) {
    auto p = mi.images->plan(im->bytes);
    if (!p.ok()) return about(im->origin, p.message());
    prompt += p->tokens;
    // Images are decoded one after another: the rows of those before stay while the next decodes.
    peak = std::max(peak, rows + p->peak_bytes);
    rows += p->rows_bytes;
    plans.push_back(std::move(*p));
  }
  QWEN35_TRY(admit(c, mi, prompt, peak));
  runtime::ImageBudget::Reservation held;
  if (mi.image_budget && peak > 0) {
    held = mi.image_budget->try_reserve(peak);
    if (!held) {
      ApiError e = api_error(ErrorKind::kRateLimited,
                             "the server's memory for decoding images (--image-mem-mb " +
                                 std::to_string(mi.image_budget->limit() >> 20) +
                                 ") is taken by other requests now; retry");
      e.retry_after_s = 1;
      return e;
    }
  }
  if (!mi.test_image_hold_file.empty()) {
    std::error_code ec;
    for (int i = 0; i < 3000 && !std::filesystem::exists(mi.test_image_hold_file, ec); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r->images.clear();
  for (size_t i = 0; i < all.size(); ++i) {
    auto enc = mi.images->encode(all[i]->bytes, plans[i]);
    if (!enc.ok()) return about(all[i]->origin, enc.message());
    r->images.push_back(std::move(*enc));
  }
  std::vector<int32_t> out;
  size_t k = 0;
  int64_t image_tokens = 0;
  for (int32_t id : *ids) {
    if (id != mi.image_token) {
      out.push_back(id);
      continue;
    }
    const int64_t n = mi.images->tokens(r->images[k++]);
    out.insert(out.end(), size_t(n), id);
    image_tokens += n;
  }
  if (text_out) {
    const std::string_view pad = mi.tok->id_to_token(mi.image_token);
    const std::vector<size_t> at = template_pads(text, pad, literal);
    if (at.size() != all.size())
      return bad(c.names.messages, "the chat template's text holds " + count_of(at.size(), "image slot") + " for " +
                                       count_of(all.size(), "image"));
    text_out->clear();
    size_t from = 0;
    for (size_t i = 0; i < at.size(); ++i) {
      text_out->append(text, from, at[i] - from);
      for (int64_t j = 0; j < mi.images->tokens(r->images[i]); ++j) text_out->append(pad);
      from = at[i] + pad.size();
    }
    text_out->append(text, from, std::string::npos);
  }
  *ids = std::move(out);
  r->image_token = mi.image_token;
  r->image_tokens = image_tokens;
  return std::nullopt;
}

}  // namespace qwen35::server
