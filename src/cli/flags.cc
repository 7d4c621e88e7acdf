// CLI11, compiled once for every command (flags.h).
#include "cli/flags.h"

#include <CLI/CLI.hpp>

namespace qwen35::cli::flags {

Option* Option::required() {
  o_->required();
  return this;
}

Option* Option::excludes(Option* other) {
  o_->excludes(other->o_);
  return this;
}

size_t Option::count() const { return o_->count(); }

App::App(const std::string& description, const std::string& name)
    : app_(std::make_unique<CLI::App>(description, name)) {}

App::~App() = default;

Option* App::keep(CLI::Option* o) { return &options_.emplace_back(o); }

Option* App::add_option(const std::string& names, std::string& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, int32_t& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, int64_t& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, uint64_t& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, float& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, double& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, std::optional<int32_t>& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, std::optional<uint64_t>& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, std::optional<float>& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_option(const std::string& names, std::vector<std::string>& v, const std::string& help) {
  return keep(app_->add_option(names, v, help));
}
Option* App::add_flag(const std::string& names, bool& v, const std::string& help) {
  return keep(app_->add_flag(names, v, help));
}

void App::parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    throw CallForHelp(std::current_exception(), e.what());
  } catch (const CLI::ParseError& e) {
    throw ParseError(std::current_exception(), e.what());
  }
}

int App::exit(const ParseError& e) {
  try {
    std::rethrow_exception(e.original());
  } catch (const CLI::Error& original) {
    return app_->exit(original);
  }
}

std::string App::help() const { return app_->help(); }

size_t App::count(const std::string& name) const { return app_->count(name); }

core::Result<DeviceChoice> parse_device(const std::string& value) {
  const auto bad = [&]() {
    return core::error("--device '" + value + "': expected cpu, vulkan or vulkan:N (N a device index from `qwen35 devices`)");
  };
  if (value == "cpu") return DeviceChoice{};
  if (value == "vulkan") return DeviceChoice{true, 0};
  const std::string prefix = "vulkan:";
  if (value.rfind(prefix, 0) != 0) return bad();
  const std::string n = value.substr(prefix.size());
  if (n.empty() || n.size() > 4) return bad();
  int index = 0;
  for (char c : n) {
    if (c < '0' || c > '9') return bad();
    index = index * 10 + (c - '0');
  }
  if (index > 4095) return bad();
  return DeviceChoice{true, index};
}

}  // namespace qwen35::cli::flags
