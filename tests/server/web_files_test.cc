// The web chat page's file serving, without a server: content types, the embedded files (the
// page's own and the Debian libraries), names that try to leave the page's folder, and
// --web-dir's files taking precedence. Runs under ASan + UBSan in scripts/test (server_unit_test).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "server/web_page.h"
#include "test_util.h"

namespace qwen35 {
namespace {

using server::WebPage;
using testing::TempDir;

TEST(WebPage, ContentTypes) {
  EXPECT_EQ(server::content_type_for("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(server::content_type_for("lib/marked.min.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(server::content_type_for("app.css"), "text/css; charset=utf-8");
  EXPECT_EQ(server::content_type_for("icon.svg"), "image/svg+xml");
  EXPECT_EQ(server::content_type_for("noext"), "application/octet-stream");
}

TEST(WebPage, EmbedsThePageAndTheDebianLibraries) {
  std::set<std::string> names;
  for (const auto& f : server::embedded_web_files()) {
    EXPECT_FALSE(f.data.empty()) << f.name;
    names.insert(std::string(f.name));
  }
  for (const char* n :
       {"index.html", "app.js", "api.js", "store.js", "render.js", "app.css", "lib/marked.min.js",
        "lib/highlight.min.js", "lib/purify.min.js", "lib/hljs-light.css", "lib/hljs-dark.css"})
    EXPECT_TRUE(names.count(n)) << n;
  WebPage page;
  EXPECT_NE(page.answer("/web/lib/marked.min.js").body.find("marked"), std::string::npos);
  EXPECT_NE(page.answer("/web/lib/purify.min.js").body.find("DOMPurify"), std::string::npos);
  EXPECT_NE(page.answer("/web/lib/highlight.min.js").body.find("hljs"), std::string::npos);
}

TEST(WebPage, NamesCannotLeaveThePage) {
  TempDir dir;
  testing::write_file(dir.file("secret.txt"), "secret");
  std::filesystem::create_directory(dir.file("web"));
  testing::write_file(dir.file("web/.hidden"), "hidden");
  WebPage page(dir.file("web"));
  for (const char* path :
       {"/web/../secret.txt", "/web/..", "/web/.hidden", "/web/%2e%2e/secret.txt", "/web/",
        "/web//app.js", "/web/app.js/", "/web/a\\b", "/web/nope.js", "/x", "/webapp.js",
        "/web/lib/../app.js", "/web/\xff"}) {
    const auto res = page.answer(path);
    EXPECT_EQ(res.status, 404) << path;
    EXPECT_EQ(res.body.find("secret"), std::string::npos) << path;
    EXPECT_EQ(res.body.find("hidden"), std::string::npos) << path;
  }
  EXPECT_EQ(page.answer("/web/app.js").status, 200);  // not in the folder: the embedded one
}

TEST(WebPage, DirFilesComeFirst) {
  TempDir dir;
  testing::write_file(dir.file("index.html"), "<p>mine</p>");
  testing::write_file(dir.file("extra.js"), "let x = 1;");
  WebPage page(dir.path());
  auto index = page.answer("/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, "<p>mine</p>");
  auto extra = page.answer("/web/extra.js");
  EXPECT_EQ(extra.status, 200);
  EXPECT_EQ(extra.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(page.answer("/web/app.js").body.find("import"), std::string::npos);
}

}  // namespace
}  // namespace qwen35
