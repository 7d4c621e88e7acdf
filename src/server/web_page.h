// The web chat page (docs/design.md, "The web chat page"): GET / and /web/NAME. Its files are
// embedded at build time (cmake/web_page.cmake writes embedded_web_files()), so the binary
// serves it with no network and no files beside it; `--web-dir DIR` serves DIR's files first
// (to work on the page without rebuilding), `--no-web` turns it off.
//
// Every answer carries a Content-Security-Policy that allows scripts, styles and connections
// from this origin only: no inline script runs, even if model output ever reached the DOM
// unsanitized. Thread-safety: WebPage is immutable after construction; answer() may run on any
// thread.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace qwen35::server {

struct EmbeddedFile {
  std::string_view name;  // path under /web/ ("app.js", "lib/marked.min.js")
  std::string_view data;
};

// The files the build embedded (generated: build/generated/web_files.cc).
std::span<const EmbeddedFile> embedded_web_files();

// The Content-Type for a file name, by extension ("application/octet-stream" when unknown).
std::string content_type_for(std::string_view name);

// The security headers every page answer carries.
inline constexpr const char* kWebCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

class WebPage {
 public:
  // `dir`: a folder whose files take precedence over the embedded ones ("" for none).
  explicit WebPage(std::string dir = "");

  // True for the paths the page owns: "/" and "/web/..." (answered without the API key).
  static bool owns(std::string_view path);
  // The answer to GET `path` (one of owns()): the file with its ETag, 304 when `if_none_match`
  // (the request's If-None-Match) is that ETag, or 404. Browsers revalidate every load
  // (Cache-Control: no-cache), so the libraries (about 1 MB) cross the network once.
  HttpResponse answer(std::string_view path, std::string_view if_none_match = "") const;

 private:
  std::optional<std::string> read_dir_file(std::string_view name) const;
  std::string dir_;
  std::vector<std::string> etags_;  // of embedded_web_files(), in order
};

}  // namespace qwen35::server
