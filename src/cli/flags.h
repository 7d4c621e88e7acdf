// The commands' flag parser: CLI11 behind a facade, so that CLI11's headers (a large share of a
// command file's compile time) are compiled in flags.cc alone. The calls keep CLI11's shapes
// (add_option / add_flag / ->required() / parse / exit), and every one forwards to CLI11 with the
// same arguments: flags, help text, defaults and error messages are CLI11's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace qwen35::cli::flags {

// A registered flag. Owned by its App; pointers stay valid for the App's life.
class Option {
 public:
  explicit Option(CLI::Option* o) : o_(o) {}
  Option* required();
  // Giving both this and `other` is an error.
  Option* excludes(Option* other);
  // How many times the flag was given.
  size_t count() const;

 private:
  CLI::Option* o_;
};

// What App::parse throws: CLI11's error (kept, for App::exit to format) and its message.
class ParseError : public std::exception {
 public:
  ParseError(std::exception_ptr original, std::string message)
      : original_(std::move(original)), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::exception_ptr& original() const { return original_; }

 private:
  std::exception_ptr original_;
  std::string message_;
};
// -h / --help was given.
class CallForHelp : public ParseError {
 public:
  using ParseError::ParseError;
};

class App {
 public:
  App(const std::string& description, const std::string& name);
  ~App();
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  Option* add_option(const std::string& names, std::string& v, const std::string& help);
  Option* add_option(const std::string& names, int32_t& v, const std::string& help);
  Option* add_option(const std::string& names, int64_t& v, const std::string& help);
  Option* add_option(const std::string& names, uint64_t& v, const std::string& help);
  Option* add_option(const std::string& names, float& v, const std::string& help);
  Option* add_option(const std::string& names, double& v, const std::string& help);
  Option* add_option(const std::string& names, std::optional<int32_t>& v, const std::string& help);
  Option* add_option(const std::string& names, std::optional<uint64_t>& v, const std::string& help);
  Option* add_option(const std::string& names, std::optional<float>& v, const std::string& help);
  Option* add_option(const std::string& names, std::vector<std::string>& v, const std::string& help);
  Option* add_flag(const std::string& names, bool& v, const std::string& help);

  // Throws CallForHelp for -h / --help and ParseError for anything CLI11 rejects.
  void parse(int argc, char** argv);
  // Prints what CLI11 prints for `e` (the help, or the error and a hint) and returns its exit code.
  int exit(const ParseError& e);
  std::string help() const;
  // How many times the named flag was given (e.g. "--prompt").
  size_t count(const std::string& name) const;

 private:
  Option* keep(CLI::Option* o);

  std::unique_ptr<CLI::App> app_;
  std::deque<Option> options_;  // a deque: the Option* handed out stay valid as it grows
};

// --device, shared by the commands that run a model: where the forward pass runs.
inline constexpr const char* kDeviceHelp =
    "where the model runs: cpu (default), or vulkan[:N] (Vulkan device N of `qwen35 devices`, "
    "default 0; exact mode, every --kv-type); under mpirun, `vulkan` gives rank r device r mod "
    "their count, and a comma-separated list (cpu,vulkan:0 or vulkan:0,1) gives rank r item r "
    "mod its length";

struct DeviceChoice {
  bool vulkan = false;
  int index = 0;  // the Vulkan device (vulkan:N)
};

// Parses a --device value: "cpu", "vulkan" or "vulkan:N" (N a device index, 0 to 4095). The
// error is one line naming the value.
core::Result<DeviceChoice> parse_device(const std::string& value);

}  // namespace qwen35::cli::flags
