// The message layer between the ranks of a model split by layers (docs/design.md "Past one
// machine"): Open MPI, started by mpirun. This header is the whole of MPI the engine sees; only
// comm.cc includes mpi.h.
//
// Failure is loud and bounded: every rank sends every other a heartbeat from a thread of its own
// (kHeartbeatPeriod). When a peer has been silent for longer than the timeout, the rank noticing
// logs it, naming the silent rank, and ends the whole job kGrace later. In between, rank 0's
// sends and receives fail at once (the engine answers its in-flight requests with an error);
// the other ranks wait for the end. A rank that dies is also noticed by mpirun, which then ends
// the others at once (unless Open MPI's orte_enable_recovery is on: then the heartbeat finds it,
// and the rank ending the job signals mpirun, which would otherwise exit 0); a rank that stalls (stopped, swapping, a link down) is noticed by the
// heartbeat. So no rank waits forever: a send or receive ends with the message, or with an
// error on rank 0, or the job ends. What rank 0 knows of a failure (failure()) is what its HTTP
// server answers /health and /ready with during the grace (cmd_serve.cc).
//
// Thread-safety: send/post/flush/recv/allgather from one thread (the engine's); the heartbeat
// runs beside it (MPI_THREAD_MULTIPLE).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"

namespace qwen35::dist {

// The world size mpirun announced to this process in its environment (1 when it was not started
// by mpirun). MPI itself is not touched: a process of one rank never initializes it.
int launched_world_size();
// This process's rank in it (0 when it was not started by mpirun).
int launched_rank();

class Comm {
 public:
  // Initializes MPI, makes MPI calls on the world return errors instead of aborting unnamed, and
  // starts the heartbeat. timeout_s: how long a peer may be silent before the job is ended.
  static core::Result<std::unique_ptr<Comm>> start(double timeout_s);
  // Waits until every rank is here, stops the heartbeat and finalizes MPI.
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // A message of `bytes` to rank `to`. Returns when the buffer may be reused.
  core::Status send(int to, int tag, std::span<const uint8_t> bytes);
  // The same, sent in the background: returns at once, and the Comm keeps the buffer until the
  // send is done (a pipeline stage goes on computing while its last rows travel, and two ranks
  // each sending to the other never wait on each other's receive). Messages to one rank with
  // one tag arrive in the order they were sent or posted (MPI's non-overtaking rule). A posted
  // send that fails is reported by a later post, flush or recv.
  core::Status post(int to, int tag, std::vector<uint8_t> bytes);
  // Waits until every posted message has been sent.
  core::Status flush();
  // The next message from rank `from` with `tag`, whatever its size.
  core::Result<std::vector<uint8_t>> recv(int from, int tag);
  // Every rank's value, by rank. A collective: every rank must call it (an MPI error ends the job).
  std::vector<uint64_t> allgather(uint64_t value);
  // Logs "rank R: why" and ends every rank of the job (exit code 3). For failures that leave the
  // ranks out of step; an error every rank reaches alike is better returned by each.
  [[noreturn]] void abort(const std::string& why);
  // Why this rank can no longer step the pipeline, naming the rank at fault: a peer found silent,
  // or a link that failed under a send or receive; empty while all is well. Once non-empty it
  // stays so (the job ends kGrace after a silent peer is found). Thread-safe: the HTTP server's
  // threads read it beside the engine's.
  std::string failure() const;

 private:
  Comm() = default;
  void heartbeat_loop();

  // The transfers of rank 0 fail once a peer is known silent (see above).
  core::Status check_broken() const;
  // Drops the posted sends that are done; the first failure among them, if any.
  core::Status reap_posted();

  struct Posted;  // a posted send: its MPI request and its buffer (comm.cc)
  std::vector<std::unique_ptr<Posted>> posted_;

  int rank_ = 0, size_ = 1;
  double timeout_s_ = 10;
  std::atomic<int> silent_{-1};  // the peer found silent, or -1
  std::atomic<int> broken_link_{-1};  // the peer a send or receive to or from failed with, or -1
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace qwen35::dist
