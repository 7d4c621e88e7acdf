// The engine's lock is narrow, shown without timing: a test hook holds the engine thread while
// it resumes a request from the prefix cache, with the 27B's recurrent state (synth preset
// 27b-state: 48 Gated DeltaNet layers of 48 value heads, 128 x 128, about 151 MB). Meanwhile
// stats(), submit() and GET /metrics over HTTP all return; an engine that held its lock through
// admission would hang here. Then the hook lets go and the resumed request equals the fresh one
// bit for bit (*resumed == fresh*).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "engine_drain.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "server/http_client.h"
#include "server/server.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using testing::TempDir;

// A gate the engine thread waits at, once armed; the test sees that it arrived.
class Gate {
 public:
  void arm() {
    std::lock_guard lk(mu_);
    armed_ = true;
  }
  void pass() {  // engine thread
    std::unique_lock lk(mu_);
    if (!armed_) return;
    arrived_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return open_; });
  }
  void wait_arrived() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return arrived_; });
  }
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, arrived_ = false, open_ = false;
};

GenerationRequest request(int64_t n, uint64_t seed) {
  GenerationRequest g;
  for (int64_t k = 0; k < n; ++k) g.prompt.push_back(int32_t((k * 29 + 3) % 4000));
  g.max_tokens = 6;
  g.sampling.temperature = 0.9f;
  g.sampling.seed = seed;
  g.sampling.logprobs = 2;
  return g;
}


TEST(EngineLock, NothingWaitsForAResumeInProgress) {
  TempDir dir;
  auto r = testing::run_qwen35("synth --preset 27b-state --quiet --out " + dir.file("m"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto w = model::load_weights(dir.file("m"), core::LoadMode::kMmap);
  ASSERT_TRUE(w.ok()) << w.message();
  core::ThreadPool pool(2);
  model::Model model(std::move(*w), kernels::cpu_ops(), &pool);

  Gate gate;
  EngineOptions eo;
  eo.parallel = 2;
  eo.ctx = 256;
  eo.cache_bytes = int64_t(1) << 30;
  eo.before_resume = [&] { gate.pass(); };
  Engine engine(model, eo);
  ASSERT_GT(engine.stats().state_bytes, int64_t(2 * 150) << 20);  // two 27B-sized states

  server::ServerOptions so;
  so.port = 0;
  so.web = false;
  server::Server srv(so);
  auto port = srv.bind();
  ASSERT_TRUE(port.ok()) << port.message();
  srv.start();
  server::ModelInfo mi;
  mi.name = "27b-state";
  mi.ctx = eo.ctx;
  srv.set_ready(mi, &engine);

  SubmitError err;
  std::string msg;
  // The first request computes its prompt; the cache keeps its state at position 128.
  auto first = engine.submit(request(130, 5), &err, &msg);
  ASSERT_TRUE(first) << msg;
  const testing::EngineOut fresh = testing::drain(*first);
  ASSERT_EQ(engine.stats().cache.snapshots - engine.stats().cache.provisional, 1);

  gate.arm();
  auto resumed = engine.submit(request(130, 5), &err, &msg);
  ASSERT_TRUE(resumed) << msg;
  gate.wait_arrived();  // the engine thread is admitting `resumed`, about to copy its state

  const EngineStats st = engine.stats();
  EXPECT_EQ(st.running, 0);  // published before the admission began
  auto other = engine.submit(request(70, 6), &err, &msg);
  EXPECT_TRUE(other) << msg;
  EXPECT_EQ(engine.stats().queued, 2);  // `other`, and `resumed` until its admission ends
  server::HttpClient http("127.0.0.1", *port, 60);
  const server::ClientResponse m = http.get("/metrics");
  EXPECT_EQ(m.status, 200) << m.error;
  EXPECT_NE(m.body.find("qwen35_"), std::string::npos) << m.body;

  gate.open();
  const testing::EngineOut again = testing::drain(*resumed);
  EXPECT_EQ(resumed->timing().prompt_reused, 128);
  testing::expect_same_bits(again, fresh);
  EXPECT_EQ(testing::drain(*other).finish, "length");
  srv.begin_shutdown();
  srv.stop();
}

}  // namespace
}  // namespace qwen35::runtime
