// serve --cache-dir is one server's (cli/cache_lock.h): a second server on the same folder is
// refused at start with one line naming the first one's pid, before it listens; the kernel
// releases the lock when its holder dies, so a server started after a SIGKILL takes the folder;
// a --cache-dir that is not a directory (or cannot be written) refuses the start with one line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::ServerProcess;

const std::string kLockModel = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";

TEST(CacheDirLock, SecondServerRefusedUntilTheFirstDies) {
  testing::TempDir d;
  const std::string dir = d.file("cache");
  auto first = std::make_unique<ServerProcess>(kLockModel, std::vector<std::string>{"--cache-dir", dir});
  ASSERT_TRUE(first->ready()) << first->log();
  {
    ServerProcess second(kLockModel, {"--cache-dir", dir});
    EXPECT_FALSE(second.ready());
    EXPECT_EQ(second.stop(), 1) << second.log();
    const std::string log = second.log();
    EXPECT_NE(log.find("--cache-dir " + dir + ": in use by another qwen35 serve (pid " +
                       std::to_string(first->pid()) + ")"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("listening on"), std::string::npos) << log;
  }
  // The first server is healthy still and keeps its folder.
  EXPECT_EQ(first->get("/health").first, 200);
  // SIGKILL: no exit handler runs, the kernel drops the lock with the process.
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  for (int i = 0; i < 400 && !first->exited(); ++i) usleep(20000);
  ASSERT_TRUE(first->exited());
  ServerProcess third(kLockModel, {"--cache-dir", dir});
  EXPECT_TRUE(third.ready()) << third.log();
  EXPECT_EQ(third.stop(), 0) << third.log();
  EXPECT_NE(third.log().find("saved "), std::string::npos) << third.log();
}

TEST(CacheDirLock, UnusableFolderRefusedAtStart) {
  testing::TempDir d;
  const std::string file = d.file("plain-file");
  std::ofstream(file) << "not a folder";
  ServerProcess not_dir(kLockModel, {"--cache-dir", file});
  EXPECT_FALSE(not_dir.ready());
  EXPECT_EQ(not_dir.stop(), 1);
  EXPECT_NE(not_dir.log().find("--cache-dir " + file + ": exists and is not a directory"),
            std::string::npos)
      << not_dir.log();
  EXPECT_EQ(not_dir.log().find("listening on"), std::string::npos) << not_dir.log();
  ServerProcess under_file(kLockModel, {"--cache-dir", file + "/sub"});
  EXPECT_EQ(under_file.stop(), 1);
  EXPECT_NE(under_file.log().find("--cache-dir " + file + "/sub: cannot create it"),
            std::string::npos)
      << under_file.log();
  // A read-only folder (root writes anywhere: checked only for other users).
  if (geteuid() != 0) {
    const std::string ro = d.file("read-only");
    ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
    ServerProcess read_only(kLockModel, {"--cache-dir", ro});
    EXPECT_EQ(read_only.stop(), 1);
    EXPECT_NE(read_only.log().find("--cache-dir " + ro + ": cannot write there"), std::string::npos)
        << read_only.log();
  }
  // --no-prefix-cache writes nothing: the folder is neither checked nor locked.
  ServerProcess no_cache(kLockModel, {"--cache-dir", file, "--no-prefix-cache"});
  EXPECT_TRUE(no_cache.ready()) << no_cache.log();
}

}  // namespace
}  // namespace qwen35
