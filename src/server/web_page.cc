#include "server/web_page.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace qwen35::server {
namespace {

// A file of --web-dir larger than this is not served (the page's own files are a few KiB).
constexpr std::uintmax_t kMaxDirFileBytes = 16u << 20;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// "a/b.js": '/'-separated parts of [A-Za-z0-9._-] that do not start with a dot. So a name can
// never leave --web-dir ("..", absolute paths, percent escapes and backslashes are refused)
// nor reach a hidden file.
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part[0] == '.') return false;
    for (char c : part)
      if (!name_char(c)) return false;
    start = end + 1;
  }
  return true;
}

void add_page_headers(HttpResponse* res) {
  res->headers.emplace_back("Content-Security-Policy", kWebCsp);
  res->headers.emplace_back("X-Content-Type-Options", "nosniff");
  res->headers.emplace_back("Referrer-Policy", "no-referrer");
  // The files change with the binary (or --web-dir) and are small: always revalidate.
  res->headers.emplace_back("Cache-Control", "no-cache");
}

// A strong validator: FNV-1a (64 bits) of the bytes, quoted.
std::string etag_of(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ull;
  char b[24];
  std::snprintf(b, sizeof b, "\"%016llx\"", static_cast<unsigned long long>(h));
  return b;
}

HttpResponse not_found() {
  HttpResponse res;
  res.status = 404;
  res.set_content("no such page file\n", "text/plain; charset=utf-8");
  add_page_headers(&res);
  return res;
}

}  // namespace

std::string content_type_for(std::string_view name) {
  const size_t dot = name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "js" || ext == "mjs") return "text/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "json" || ext == "map") return "application/json";
  if (ext == "txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

WebPage::WebPage(std::string dir) : dir_(std::move(dir)) {
  for (const EmbeddedFile& f : embedded_web_files()) etags_.push_back(etag_of(f.data));
}

bool WebPage::owns(std::string_view path) { return path == "/" || path.starts_with("/web/"); }

std::optional<std::string> WebPage::read_dir_file(std::string_view name) const {
  if (dir_.empty()) return std::nullopt;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(dir_) / std::string(name);
  if (!std::filesystem::is_regular_file(p, ec) || ec) return std::nullopt;
  const std::uintmax_t size = std::filesystem::file_size(p, ec);
  if (ec || size > kMaxDirFileBytes) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

HttpResponse WebPage::answer(std::string_view path, std::string_view if_none_match) const {
  if (!owns(path)) return not_found();
  const std::string_view name = path == "/" ? std::string_view("index.html") : path.substr(5);
  if (!valid_name(name)) return not_found();
  std::string body, etag;
  if (auto from_dir = read_dir_file(name)) {
    body = std::move(*from_dir);
    etag = etag_of(body);
  } else {
    const auto files = embedded_web_files();
    size_t i = 0;
    while (i < files.size() && files[i].name != name) ++i;
    if (i == files.size()) return not_found();
    etag = etags_[i];
    if (if_none_match != etag) body = files[i].data;
  }
  HttpResponse res;
  if (if_none_match == etag) {
    res.status = 304;  // the browser's copy is current: no body
    body.clear();
  }
  res.set_content(std::move(body), content_type_for(name));
  res.headers.emplace_back("ETag", etag);
  add_page_headers(&res);
  return res;
}

}  // namespace qwen35::server
