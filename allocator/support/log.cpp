#include "log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <memory>
#include <string_view>

namespace cudacache {
namespace {

spdlog::level::level_enum level_from_environment() {
  const char* text = std::getenv("CUDACACHE_LOG_LEVEL");
  if (text == nullptr) return spdlog::level::off;
  const std::string_view name(text);
  if (name == "trace") return spdlog::level::trace;
  if (name == "debug") return spdlog::level::debug;
  if (name == "info") return spdlog::level::info;
  if (name == "warn") return spdlog::level::warn;
  if (name == "error") return spdlog::level::err;
  return spdlog::level::off;  // "off" and anything unknown: logging must never break a program
}

}  // namespace

spdlog::logger& logger() {
  // Not registered in spdlog's global registry: the host program may use spdlog itself, and
  // the static core and the shared library may both be loaded in one process. Leaked on
  // purpose so that logging works during static destruction.
  static spdlog::logger* instance = [] {
    auto* created =
        new spdlog::logger("cudacache", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    created->set_level(level_from_environment());
    created->set_pattern("[cudacache %l] %v");
    return created;
  }();
  return *instance;
}

}  // namespace cudacache
