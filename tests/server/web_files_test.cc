// The web chat page's file serving, without a server: content types, the embedded files (the
// page's own and the Debian libraries), names that try to leave the page's folder, --web-dir's
// files taking precedence, and ETags. Runs under ASan + UBSan in scripts/test
// (server_unit_test).
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

// Revalidation: the same bytes have the same ETag, and a request that holds it gets 304 and no
// body; other bytes have another.
TEST(WebPage, ETags) {
  WebPage page;
  auto header = [](const server::HttpResponse& r, const std::string& name) {
    for (const auto& [k, v] : r.headers)
      if (k == name) return v;
    return std::string();
  };
  const auto first = page.answer("/web/lib/highlight.min.js");
  const std::string etag = header(first, "ETag");
  ASSERT_EQ(first.status, 200);
  ASSERT_GE(etag.size(), 3u);
  EXPECT_EQ(etag.front(), '"');
  const auto again = page.answer("/web/lib/highlight.min.js", etag);
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(header(again, "ETag"), etag);
  EXPECT_EQ(page.answer("/web/lib/highlight.min.js", "\"other\"").status, 200);
  EXPECT_NE(header(page.answer("/web/app.js"), "ETag"), etag);

  TempDir dir;
  testing::write_file(dir.file("app.js"), "let a = 1;");
  WebPage from_dir(dir.path());
  const std::string e1 = header(from_dir.answer("/web/app.js"), "ETag");
  EXPECT_EQ(from_dir.answer("/web/app.js", e1).status, 304);
  testing::write_file(dir.file("app.js"), "let a = 2;");
  EXPECT_EQ(from_dir.answer("/web/app.js", e1).status, 200);  // edited: served again
}

}  // namespace
}  // namespace qwen35
