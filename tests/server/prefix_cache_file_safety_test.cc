// The prefix cache's files against an attacker and a crash (issue 32): files that are huge,
// sparse, lying about their size or not files at all are skipped with a warning, without
// blocking and without memory for them, while valid files beside them load; a save killed at
// any of its steps leaves every prefix its old snapshot or its new one, whole, and the next save
// cleans up after it. A tiny geometry (one Gated DeltaNet layer, one attention layer, 4 KiB
// blocks) and made-up state: no model is run. Nothing waits for time: children are killed at a
// step of save() by its hook and waited for.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

namespace sfs = std::filesystem;
using Step = PrefixCache::SaveStep;

constexpr uint64_t kFp = 0x1234abcd5678ef00ull, kOtherFp = 0x0badc0ffee000001ull;
constexpr size_t kBound = 4 << 20;  // --cache-mb of the caches here
constexpr int64_t kPoolBlocks = 64;

std::string fp_prefix(uint64_t fp) {  // how save() names a fingerprint's files
  char s[18];
  std::snprintf(s, sizeof s, "%016llx-", (unsigned long long)fp);
  return s;
}

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.n_k_heads = 1;
  c.n_v_heads = 1;
  c.d_k = 4;
  c.d_v = 4;
  c.layers = {model::LayerKind::kLinearAttention, model::LayerKind::kFullAttention};
  return c;
}

// `n` tokens of sequence `s`: different sequences differ from their first token.
std::vector<int32_t> seq(int s, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(s * 1000 + (i * 37) % 991));
  return t;
}

uint64_t mix(std::span<const int32_t> t) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : t) h = (h ^ uint64_t(uint32_t(x))) * 1099511628211ull;
  return h;
}

// Runs `body` in a child process and returns its waitpid status; the child never comes back.
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 100;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

// name -> bytes of the directory's files whose names start with `prefix`.
std::map<std::string, std::string> files_of(const std::string& dir, const std::string& prefix) {
  std::map<std::string, std::string> out;
  for (const auto& e : sfs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out[name] = testing::read_file(e.path().string());
  }
  return out;
}

class CacheFileSafetyTest : public ::testing::Test {
 protected:
  CacheFileSafetyTest() : pool_(config_, kPoolBlocks), state_(config_, 1024, &pool_) {}

  int64_t recurrent_floats() const { return int64_t(state_.recurrent_bytes() / 4); }
  // The made-up state: KV depends on the tokens alone (as computed KV does, so nested
  // snapshots agree on the blocks they share), the recurrent state on `version` too, so a test
  // can tell an old snapshot from a new one.
  static float kv_value(std::span<const int32_t> upto, int64_t i) {
    return float((mix(upto) + uint64_t(i) * 7) % 10007);
  }
  std::vector<float> recurrent(std::span<const int32_t> tokens, int version) const {
    std::vector<float> r(static_cast<size_t>(recurrent_floats()));
    for (size_t i = 0; i < r.size(); ++i) r[i] = float(version * 100000 + (mix(tokens) + i) % 997);
    return r;
  }
  void fill_block(int32_t b, std::span<const int32_t> upto) {
    for (int64_t i = 0; i < pool_.block_floats(); ++i) {
      pool_.k_f32(0, b)[i] = kv_value(upto, i);
      pool_.v_f32(0, b)[i] = kv_value(upto, i + pool_.block_floats());
    }
  }
  // Puts `tokens` (a multiple of 64) in `cache` as a snapshot of the made-up state.
  void insert(PrefixCache& cache, const std::vector<int32_t>& tokens, int version) {
    std::vector<int32_t> blocks;
    for (size_t d = 0; d * 64 < tokens.size(); ++d) {
      blocks.push_back(pool_.allocate());
      fill_block(blocks.back(), std::span(tokens).first((d + 1) * 64));
    }
    state_.reset();
    state_.adopt(blocks, int64_t(tokens.size()));
    for (int32_t b : blocks) pool_.release(b);  // the state holds them now
    state_.load_recurrent(recurrent(tokens, version).data());
    cache.insert(tokens, state_);
    state_.reset();
  }
  // The version of `tokens`' snapshot that `cache` resumes, -1 when it resumes fewer positions;
  // fails the test when the bits are neither version's.
  int resumed_version(PrefixCache& cache, const std::vector<int32_t>& tokens) {
    state_.reset();
    std::vector<int32_t> prompt = tokens;
    prompt.push_back(7);
    int version = -1;
    if (cache.resume(prompt, &state_) == int64_t(tokens.size())) {
      int64_t wrong = 0;
      for (size_t d = 0; d < state_.blocks().size(); ++d) {
        const auto upto = std::span(tokens).first((d + 1) * 64);
        const int32_t b = state_.blocks()[d];
        for (int64_t i = 0; i < pool_.block_floats(); ++i)
          wrong += pool_.k_f32(0, b)[i] != kv_value(upto, i) ||
                   pool_.v_f32(0, b)[i] != kv_value(upto, i + pool_.block_floats());
      }
      EXPECT_EQ(wrong, 0) << "KV bits that are not the tokens'";
      std::vector<float> r(static_cast<size_t>(recurrent_floats()));
      state_.save_recurrent(r.data());
      version = int(r[0]) / 100000;
      EXPECT_EQ(r, recurrent(tokens, version)) << "a torn recurrent state";
    }
    state_.reset();
    return version;
  }

  const model::ModelConfig config_ = tiny_config();
  model::KvPool pool_;
  model::SequenceState state_;
};

// A file of `size` bytes (sparse: nothing is written past the header) whose header is this
// geometry's, claiming `n_tokens`.
void write_header(const std::string& path, uint64_t fp, uint64_t n_tokens,
                  const model::KvPool& pool, int64_t recurrent, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const uint64_t h[6] = {fp,
                         PrefixCache::kv_tag(pool),
                         n_tokens,
                         uint64_t(pool.n_layers()),
                         uint64_t(pool.k_block_bytes() + pool.v_block_bytes()),
                         uint64_t(recurrent)};
  ASSERT_EQ(::write(fd, "Q35PCv2", 8), 8);
  ASSERT_EQ(::write(fd, h, sizeof h), ssize_t(sizeof h));
  ASSERT_EQ(::ftruncate(fd, off_t(size)), 0) << "no sparse file of " << size << " bytes here";
  ::close(fd);
}

// The size a header with these fields implies (see prefix_cache_file.cc).
uint64_t implied_size(uint64_t n_tokens, const model::KvPool& pool, int64_t recurrent) {
  return 56 + n_tokens * 4 +
         n_tokens / 64 * uint64_t(pool.n_layers()) * 2 * uint64_t(pool.block_floats()) * 4 +
         uint64_t(recurrent) * 4 + 8;
}

uint64_t vm_size() {  // this process's address space, bytes
  std::ifstream f("/proc/self/status");
  for (std::string l; std::getline(f, l);)
    if (l.rfind("VmSize:", 0) == 0) return std::stoull(l.substr(7)) * 1024;
  return 0;
}

bool said(const std::vector<std::string>& log, const std::string& file, const std::string& why) {
  for (const auto& l : log)
    if (l.find(file) != std::string::npos && l.find(why) != std::string::npos) return true;
  return false;
}

TEST_F(CacheFileSafetyTest, HugeAndLyingFilesAreSkippedWithoutMemory) {
  testing::TempDir d;
  const std::string dir = d.file("cache");
  {
    PrefixCache cache(&pool_, kBound);
    insert(cache, seq(1, 128), 1);
    insert(cache, seq(2, 64), 1);
    ASSERT_TRUE(cache.save(dir, kFp).ok());
  }
  const int64_t rec = recurrent_floats();
  const uint64_t k100g = uint64_t(100) << 30;
  // 100 GiB of zeros; a valid header on 100 GiB; a valid header claiming the most tokens on a
  // file of exactly the size it implies (1 GiB here: over the cache's bound, and the pool's);
  // a valid header of one block with a body of zeros (the checksum fails).
  {
    const int fd = ::open((dir + "/zeros.q35pc").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t(k100g)), 0);
    ::close(fd);
  }
  write_header(dir + "/liar.q35pc", kFp, 1 << 24, pool_, rec, k100g);
  write_header(dir + "/huge.q35pc", kFp, 1 << 24, pool_, rec, implied_size(1 << 24, pool_, rec));
  write_header(dir + "/hollow.q35pc", kFp, 64, pool_, rec, implied_size(64, pool_, rec));
  // Loaded in a child whose address space may grow by 256 MiB only: reading any of these files
  // whole (or sizing a buffer by its header) throws or dies there.
  const std::string out = d.file("result");
  const int status = in_child([&] {
    const uint64_t vm = vm_size();
    if (vm == 0) return 2;
    const rlimit lim{vm + (256 << 20), vm + (256 << 20)};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) return 3;
    PrefixCache cache(&pool_, kBound);
    std::vector<std::string> warnings;
    const int64_t n = cache.load(dir, kFp, recurrent_floats(), &warnings);
    std::ofstream f(out);
    f << n << "\n" << pool_.used_blocks() << "\n";
    for (const auto& w : warnings) f << w << "\n";
    return f ? 0 : 4;
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  const auto lines = lines_of(out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], "2");  // the valid files
  EXPECT_EQ(lines[1], "3");  // their blocks, and none of the hollow file's
  const std::vector<std::string> warnings(lines.begin() + 2, lines.end());
  EXPECT_EQ(warnings.size(), 4u) << ::testing::PrintToString(warnings);
  EXPECT_TRUE(said(warnings, "zeros.q35pc", "not a snapshot file (magic); skipped"));
  EXPECT_TRUE(said(warnings, "liar.q35pc", "truncated or padded"));
  EXPECT_TRUE(said(warnings, "huge.q35pc", "over --cache-mb"));
  EXPECT_TRUE(said(warnings, "hollow.q35pc", "checksum mismatch"));
}

// A FIFO (which no one writes: opening it to read would block for ever), a directory and a link
// to a device, each named like a snapshot: skipped unopened, the valid file beside them loads.
TEST_F(CacheFileSafetyTest, NonFilesAreSkippedWithoutBlocking) {
  testing::TempDir d;
  const std::string dir = d.file("cache");
  {
    PrefixCache cache(&pool_, kBound);
    insert(cache, seq(1, 64), 1);
    ASSERT_TRUE(cache.save(dir, kFp).ok());
  }
  ASSERT_EQ(::mkfifo((dir + "/pipe.q35pc").c_str(), 0644), 0);
  sfs::create_directory(dir + "/folder.q35pc");
  sfs::create_symlink("/dev/zero", dir + "/device.q35pc");
  PrefixCache cache(&pool_, kBound);
  std::vector<std::string> warnings;
  EXPECT_EQ(cache.load(dir, kFp, recurrent_floats(), &warnings), 1);
  EXPECT_EQ(warnings.size(), 3u) << ::testing::PrintToString(warnings);
  for (const char* f : {"pipe.q35pc", "folder.q35pc", "device.q35pc"})
    EXPECT_TRUE(said(warnings, f, "not a regular file; skipped")) << f;
  EXPECT_EQ(resumed_version(cache, seq(1, 64)), 1);
}

// A save killed at step k of its hook, for every k. On disk before it: an earlier complete
// save's snapshots (version 1), another checkpoint's files and a crashed save's temporary; in
// the cache being saved: version 2 of two of those prefixes, two new prefixes, and not the
// third old one, which that save removes as stale.
class KilledSaveTest : public CacheFileSafetyTest {
 protected:
  using Tokens = std::vector<int32_t>;
  const std::vector<Tokens> both_ = {seq(1, 64), seq(1, 192)};
  const std::vector<Tokens> old_only_ = {seq(2, 128)};
  const std::vector<Tokens> new_only_ = {seq(1, 256), seq(3, 64)};
  const size_t n_new_ = both_.size() + new_only_.size();

  // The directory after a save killed once it had logged `events` ("<step> <path>" each):
  // every prefix has its old snapshot or its new one, whole; the new ones are exactly those
  // renamed, the old-only ones gone exactly those removed; nothing else is read.
  void expect_old_or_new(const std::string& dir, const std::vector<std::string>& events) {
    int renamed = 0, removed = 0;
    bool removing = false;
    for (const auto& e : events) {
      const int step = std::stoi(e);
      renamed += step == int(Step::kRenamed);
      removing |= step == int(Step::kRemoving);
      removed += step == int(Step::kRemoved) && e.ends_with(".q35pc");
    }
    // Removal starts only once every new file is in place.
    if (removing) {
      EXPECT_EQ(renamed, int(n_new_));
    }
    PrefixCache cache(&pool_, kBound);
    std::vector<std::string> warnings;
    const int64_t loaded = cache.load(dir, kFp, recurrent_floats(), &warnings);
    // The other checkpoint's files only: no temporary is read, no file is torn.
    EXPECT_EQ(warnings.size(), 3u) << ::testing::PrintToString(warnings);
    for (const auto& w : warnings) EXPECT_NE(w.find("another checkpoint"), std::string::npos) << w;
    // Each set with the versions its prefixes may show (-1: none).
    const std::pair<const std::vector<Tokens>*, std::set<int>> sets[] = {
        {&both_, {1, 2}}, {&new_only_, {-1, 2}}, {&old_only_, {-1, 1}}};
    int present = 0, fresh = 0, gone = 0;
    for (const auto& [set, allowed] : sets)
      for (const auto& t : *set) {
        const int v = resumed_version(cache, t);
        EXPECT_TRUE(allowed.count(v)) << "prefix of " << t.size() << " tokens: version " << v;
        present += v > 0;
        fresh += v == 2;
        gone += set == &old_only_ && v == -1;
      }
    EXPECT_EQ(fresh, renamed);
    EXPECT_EQ(gone, removed);
    EXPECT_EQ(loaded, present);
  }
  // The directory after a complete save: the new snapshots alone, no temporary.
  void expect_saved(const std::string& dir) {
    const auto ours = files_of(dir, fp_prefix(kFp));
    EXPECT_EQ(ours.size(), n_new_);
    for (const auto& [name, bytes] : ours) EXPECT_TRUE(name.ends_with(".q35pc")) << name;
    PrefixCache cache(&pool_, kBound);
    std::vector<std::string> warnings;
    EXPECT_EQ(cache.load(dir, kFp, recurrent_floats(), &warnings), int64_t(n_new_));
    for (const auto& t : both_) EXPECT_EQ(resumed_version(cache, t), 2);
    for (const auto& t : new_only_) EXPECT_EQ(resumed_version(cache, t), 2);
    for (const auto& t : old_only_) EXPECT_EQ(resumed_version(cache, t), -1);
  }
};

TEST_F(KilledSaveTest, EveryPrefixKeepsItsOldOrNewSnapshot) {
  PrefixCache old_cache(&pool_, kBound), new_cache(&pool_, kBound);
  for (const auto& t : both_) {
    insert(old_cache, t, 1);
    insert(new_cache, t, 2);
  }
  for (const auto& t : old_only_) insert(old_cache, t, 1);
  for (const auto& t : new_only_) insert(new_cache, t, 2);
  testing::TempDir d;
  const std::string before = d.file("before");
  ASSERT_TRUE(old_cache.save(before, kFp).ok());
  ASSERT_TRUE(old_cache.save(before, kOtherFp).ok());
  testing::write_file(before + "/" + fp_prefix(kFp) + "0123.q35pc.tmp", "a crashed save's");
  const auto foreign = files_of(before, fp_prefix(kOtherFp));
  ASSERT_EQ(foreign.size(), 3u);
  // Writing, written and renamed for each new file; removing and removed for the stale
  // snapshot and the temporary. Step k = steps + 1 never comes: that save completes.
  const int steps = 3 * int(n_new_) + 2 * 2;
  for (int k = 1; k <= steps + 1; ++k) {
    SCOPED_TRACE("killed at step " + std::to_string(k));
    const std::string dir = d.file("k" + std::to_string(k)), log = dir + ".log";
    sfs::copy(before, dir, sfs::copy_options::recursive);
    const int status = in_child([&] {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int n = 0;
      const auto st = new_cache.save(dir, kFp, [&](Step s, const std::string& path) {
        const std::string line = std::to_string(int(s)) + " " + path + "\n";
        if (::write(fd, line.data(), line.size()) != ssize_t(line.size())) ::_exit(5);
        if (++n == k) ::raise(SIGKILL);
      });
      return st.ok() ? 0 : 6;
    });
    const auto events = lines_of(log);
    if (k <= steps) {
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
      ASSERT_EQ(events.size(), size_t(k));
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
      ASSERT_EQ(events.size(), size_t(steps));
    }
    expect_old_or_new(dir, events);
    EXPECT_EQ(files_of(dir, fp_prefix(kOtherFp)), foreign);
    // The next save completes the job and cleans up after the killed one.
    ASSERT_TRUE(new_cache.save(dir, kFp).ok());
    expect_saved(dir);
    EXPECT_EQ(files_of(dir, fp_prefix(kOtherFp)), foreign);
  }
}

}  // namespace
}  // namespace qwen35::runtime
