// Starts `qwen35 serve` on a free port as a child process and talks to it over HTTP.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/http_client.h"
#include "test_util.h"

namespace qwen35::testing {

using Json = nlohmann::json;

// The device the suite's servers run on: QWEN35_TEST_DEVICE (e.g. vulkan), empty for the CPU.
inline std::string test_device() {
  const char* d = std::getenv("QWEN35_TEST_DEVICE");
  return d ? d : "";
}

class ServerProcess {
 public:
  // Starts the server with extra flags; waits until /health answers 200.
  ServerProcess(const std::string& model_dir, const std::vector<std::string>& flags) {
    log_ = dir_.file("stderr");
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      std::vector<std::string> args = {QWEN35_BINARY, "serve", "-m", model_dir,
                                       "--port",      "0",     "-t", "2"};
      args.insert(args.end(), flags.begin(), flags.end());
      // QWEN35_TEST_DEVICE=vulkan runs a suite's servers on that device (its CTest twin).
      if (!test_device().empty() && std::find(args.begin(), args.end(), "--device") == args.end())
        args.insert(args.end(), {"--device", test_device()});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 600 && port_ == 0 && !exited(); ++i) {
      const std::string log = read_file(log_);
      const size_t p = log.find("listening on http://127.0.0.1:");
      if (p != std::string::npos) {
        const size_t e = log.find('\n', p);
        if (e != std::string::npos) port_ = std::stoi(log.substr(p + 30, e - p - 30));
      }
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Loading ends in ready or in an exit (a device upload can take a while on a loaded machine).
    for (int i = 0; i < 6000 && port_ != 0 && !exited(); ++i) {
      auto r = client().get("/health");
      if (r.status == 200) {
        ready_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() { stop(); }

  bool ready() const { return ready_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_); }

  server::HttpClient client() const { return server::HttpClient("127.0.0.1", port_, 120); }

  // Whether the server has exited by itself (then stop() returns its exit code).
  bool exited() {
    int status = 0;
    if (pid_ <= 0) return true;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = 0;
    return true;
  }

  // SIGTERM, then the exit code (-1 when it did not exit by itself within 20 s).
  int stop() {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 400; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = 0;
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = 0;
    exit_code_ = -1;
    return exit_code_;
  }

  // POST a JSON body; returns status and parsed body (null when not JSON).
  std::pair<int, Json> post(const std::string& path, const std::string& body) const {
    auto r = client().post(path, body);
    if (!r) return {-1, nullptr};
    return {r.status, Json::parse(r.body, nullptr, false)};
  }
  std::pair<int, Json> post(const std::string& path, const Json& body) const {
    return post(path, body.dump());
  }
  std::pair<int, std::string> get(const std::string& path) const {
    auto r = client().get(path);
    if (!r) return {-1, ""};
    return {r.status, r.body};
  }

  // A streamed POST: the `data:` payloads in order.
  std::vector<std::string> stream(const std::string& path, const Json& body,
                                  std::string* raw = nullptr) const {
    std::string all;
    client().send("POST", path, body.dump(), [&](std::string_view d) {
      all.append(d);
      return true;
    });
    if (raw) *raw = all;
    std::vector<std::string> out;
    size_t p = 0, e;
    while ((e = all.find("\n\n", p)) != std::string::npos) {
      const std::string ev = all.substr(p, e - p);
      if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
      p = e + 2;
    }
    return out;
  }

  // A gauge or counter value from /metrics (-1 when absent).
  double metric(const std::string& name) const {
    const std::string text = get("/metrics").second;
    size_t p = 0;
    while ((p = text.find(name + " ", p)) != std::string::npos) {
      if (p == 0 || text[p - 1] == '\n') return std::stod(text.substr(p + name.size() + 1));
      p += name.size();
    }
    return -1;
  }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
  int exit_code_ = -1;
};

}  // namespace qwen35::testing
