#include "dist/comm.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace qwen35::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(100);
constexpr int kHeartbeatTag = 1;
// From a silent peer's discovery to the end of the job: time for rank 0 to answer its requests.
constexpr double kGrace = 2.0;

// The heartbeat's own communicator, so that its messages never match the engine's receives.
MPI_Comm g_beat = MPI_COMM_NULL;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

// Whether mpirun runs this job with orte_enable_recovery (it passes its --mca settings to the
// ranks as OMPI_MCA_* variables).
bool recovery_on() {
  const char* v = std::getenv("OMPI_MCA_orte_enable_recovery");
  if (v == nullptr) return false;
  const std::string s = v;
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

// Ends the job as failed. Under orte_enable_recovery, Open MPI 4's mpirun exits 0 whatever its
// ranks do: MPI_Abort and non-zero exits alike are taken as recoverable (orte_abort_on_non_zero_status
// does not change it), so a job that lost a rank would look like one that finished. The rank
// ending the job then first sends SIGTERM to its launcher, mpirun (or, on another machine, its
// orted, whose loss mpirun reports), which ends every rank and exits non-zero. Only a parent
// that is Open MPI's launcher is signalled: a rank started otherwise has nobody to tell.
[[noreturn]] void end_job() {
  if (recovery_on()) {
    const pid_t parent = getppid();
    std::ifstream f("/proc/" + std::to_string(parent) + "/comm");
    std::string name;
    std::getline(f, name);
    if (name == "mpirun" || name == "mpiexec" || name == "orterun" || name == "orted") {
      std::fprintf(stderr, "qwen35: orte_enable_recovery is on: asking %s (pid %d) to end the job as failed\n",
                   name.c_str(), int(parent));
      std::fflush(stderr);
      kill(parent, SIGTERM);
    }
  }
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace

struct Comm::Posted {
  MPI_Request req = MPI_REQUEST_NULL;
  int to = 0;
  std::vector<uint8_t> bytes;
};

int launched_world_size() {
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (s == nullptr) return 1;
  const int n = std::atoi(s);
  return n > 0 ? n : 1;
}

int launched_rank() {
  const char* s = std::getenv("OMPI_COMM_WORLD_RANK");
  return s == nullptr ? 0 : std::atoi(s);
}

core::Result<std::unique_ptr<Comm>> Comm::start(double timeout_s) {
  int provided = 0;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); rc != MPI_SUCCESS)
    return core::error("MPI_Init_thread failed: " + mpi_error(rc));
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return core::error("this MPI library has no MPI_THREAD_MULTIPLE support (the heartbeat needs it)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_beat);
  MPI_Comm_set_errhandler(g_beat, MPI_ERRORS_RETURN);
  std::unique_ptr<Comm> c(new Comm());
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size_);
  c->timeout_s_ = timeout_s;
  c->heartbeat_ = std::thread([p = c.get()] { p->heartbeat_loop(); });
  return c;
}

Comm::~Comm() {
  (void)flush();  // a failure here ends in the barrier's error or the heartbeat's end of the job
  // Every rank stops beating only once every rank is done: a rank that finished first must not
  // look stalled to one still at work.
  MPI_Barrier(MPI_COMM_WORLD);
  stop_ = true;
  heartbeat_.join();
  MPI_Barrier(g_beat);
  for (;;) {  // beats still queued here are read and dropped
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, g_beat, &flag, &st);
    if (!flag) break;
    char b;
    MPI_Recv(&b, 1, MPI_BYTE, st.MPI_SOURCE, kHeartbeatTag, g_beat, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&g_beat);
  MPI_Finalize();
}

void Comm::heartbeat_loop() {
  std::vector<Clock::time_point> last(size_t(size_), Clock::now());
  std::vector<MPI_Request> pending;
  static const char beat = 1;
  Clock::time_point found;  // when silent_ was found
  while (!stop_) {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r;
      if (MPI_Isend(&beat, 1, MPI_BYTE, p, kHeartbeatTag, g_beat, &r) == MPI_SUCCESS) pending.push_back(r);
    }
    for (size_t i = 0; i < pending.size();) {  // sends done are dropped; a stalled peer's stay
      int done = 0;
      MPI_Test(&pending[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        pending[i] = pending.back();
        pending.pop_back();
      } else {
        ++i;
      }
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, g_beat, &flag, &st) != MPI_SUCCESS || !flag) break;
      char b;
      MPI_Recv(&b, 1, MPI_BYTE, st.MPI_SOURCE, kHeartbeatTag, g_beat, MPI_STATUS_IGNORE);
      last[size_t(st.MPI_SOURCE)] = Clock::now();
    }
    const auto now = Clock::now();
    for (int p = 0; p < size_ && silent_ < 0; ++p) {
      const double silent = std::chrono::duration<double>(now - last[size_t(p)]).count();
      if (p != rank_ && silent > timeout_s_) {
        std::fprintf(stderr, "qwen35: rank %d: no heartbeat from rank %d for %.1f s (it died or stalls): ending the "
                     "job in %.0f s\n", rank_, p, silent, kGrace);
        std::fflush(stderr);
        silent_ = p;
        found = now;
      }
    }
    if (silent_ >= 0 && std::chrono::duration<double>(now - found).count() > kGrace) end_job();
    std::this_thread::sleep_for(kHeartbeatPeriod);
  }
  for (MPI_Request& r : pending) MPI_Request_free(&r);
}

std::string Comm::failure() const {
  if (const int p = silent_; p >= 0) return "rank " + std::to_string(p) + " of the pipeline is silent (it died or stalls)";
  if (const int p = broken_link_; p >= 0) return "the link to rank " + std::to_string(p) + " of the pipeline failed";
  return "";
}

core::Status Comm::check_broken() const {
  const int p = silent_;
  if (p < 0 || rank_ != 0) return core::Status();
  return core::error("rank " + std::to_string(p) + " of the pipeline is silent (it died or stalls)");
}

namespace {
// Waits for `req` as recv() waits for a message, giving up when `broken` says so.
template <class Broken>
int wait_polled(MPI_Request* req, const Broken& broken) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    if (int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || done) return rc;
    if (!broken().ok()) {
      MPI_Cancel(req);
      MPI_Request_free(req);
      return MPI_ERR_OTHER;
    }
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 1000 : 50));
  }
}
}  // namespace

core::Status Comm::send(int to, int tag, std::span<const uint8_t> bytes) {
  if (bytes.size() > size_t(INT_MAX))
    return core::error("a message of " + std::to_string(bytes.size()) + " bytes is over MPI's 2 GiB");
  QWEN35_RETURN_IF_ERROR(check_broken());
  MPI_Request req;
  int rc = MPI_Isend(bytes.data(), int(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD, &req);
  if (rc == MPI_SUCCESS) rc = wait_polled(&req, [this] { return check_broken(); });
  QWEN35_RETURN_IF_ERROR(check_broken());
  if (rc != MPI_SUCCESS) {
    broken_link_ = to;
    return core::error("send to rank " + std::to_string(to) + ": " + mpi_error(rc));
  }
  return core::Status();
}

core::Status Comm::post(int to, int tag, std::vector<uint8_t> bytes) {
  if (bytes.size() > size_t(INT_MAX))
    return core::error("a message of " + std::to_string(bytes.size()) + " bytes is over MPI's 2 GiB");
  QWEN35_RETURN_IF_ERROR(check_broken());
  QWEN35_RETURN_IF_ERROR(reap_posted());
  auto p = std::make_unique<Posted>();
  p->to = to;
  p->bytes = std::move(bytes);
  if (int rc = MPI_Isend(p->bytes.data(), int(p->bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD, &p->req);
      rc != MPI_SUCCESS) {
    broken_link_ = to;
    return core::error("send to rank " + std::to_string(to) + ": " + mpi_error(rc));
  }
  posted_.push_back(std::move(p));
  return core::Status();
}

core::Status Comm::reap_posted() {
  core::Status first;
  for (size_t i = 0; i < posted_.size();) {
    int done = 0;
    const int rc = MPI_Test(&posted_[i]->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      broken_link_ = posted_[i]->to;
      if (first.ok()) first = core::error("send to rank " + std::to_string(posted_[i]->to) + ": " + mpi_error(rc));
      (void)posted_[i].release();  // MPI may still read the buffer: left to the job's end
    }
    if (done || rc != MPI_SUCCESS) {
      posted_.erase(posted_.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  return first;
}

core::Status Comm::flush() {
  core::Status first;
  for (auto& p : posted_) {
    const int rc = wait_polled(&p->req, [this] { return check_broken(); });
    if (rc != MPI_SUCCESS) {
      broken_link_ = p->to;
      if (first.ok()) first = core::error("send to rank " + std::to_string(p->to) + ": " + mpi_error(rc));
    }
  }
  posted_.clear();
  QWEN35_RETURN_IF_ERROR(check_broken());
  return first;
}

core::Result<std::vector<uint8_t>> Comm::recv(int from, int tag) {
  QWEN35_RETURN_IF_ERROR(reap_posted());
  // Polled rather than blocking in MPI_Probe, sleeping more the longer the wait: ranks
  // oversubscribed on one machine leave the cores to the rank computing.
  MPI_Status st;
  int flag = 0;
  for (int spins = 0;; ++spins) {
    if (int rc = MPI_Iprobe(from, tag, MPI_COMM_WORLD, &flag, &st); rc != MPI_SUCCESS) {
      broken_link_ = from;
      return core::error("receive from rank " + std::to_string(from) + ": " + mpi_error(rc));
    }
    if (flag) break;
    QWEN35_RETURN_IF_ERROR(check_broken());
    // About a second at 50 µs (a step's latency stays small), then 1 ms (an idle rank).
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 1000 : 50));
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  std::vector<uint8_t> out(static_cast<size_t>(count));
  if (int rc = MPI_Recv(out.data(), count, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
    broken_link_ = from;
    return core::error("receive from rank " + std::to_string(from) + ": " + mpi_error(rc));
  }
  return out;
}

std::vector<uint64_t> Comm::allgather(uint64_t value) {
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  const int rc = MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) abort("allgather: " + mpi_error(rc));
  return all;
}

void Comm::abort(const std::string& why) {
  std::fprintf(stderr, "qwen35: rank %d: %s\n", rank_, why.c_str());
  std::fflush(stderr);
  end_job();
}

}  // namespace qwen35::dist
