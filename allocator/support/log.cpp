#include "log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace cudacache {
namespace {

// spdlog's own level names (trace, debug, info, warning/warn, error/err, critical, off), in any
// case. Anything else leaves logging off and says so once on stderr: logging must never break
// a program, nor be silently missing when asked for.
spdlog::level::level_enum level_from_environment() {
  const char* text = std::getenv("CUDACACHE_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return spdlog::level::off;
  std::string name(text);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") {
    std::fprintf(stderr,
                 "cudacache: CUDACACHE_LOG_LEVEL=%s is not a level (trace, debug, info, warn, "
                 "error, critical, off); logging stays off\n",
                 text);
  }
  return level;
}

}  // namespace

spdlog::logger& spdlog_logger() {
  // Not registered in spdlog's global registry: the host program may use spdlog itself, and
  // the static core and the shared library may both be loaded in one process. Leaked on
  // purpose so that logging works during static destruction.
  static spdlog::logger* instance = [] {
    auto* created =
        new spdlog::logger("cudacache", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    created->set_level(level_from_environment());
    // Time and pid: a preloaded program may be one of many processes writing to one stream.
    created->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [cudacache %P] [%l] %v");
    return created;
  }();
  return *instance;
}

namespace {

spdlog::level::level_enum spdlog_level(Logger::Level level) {
  switch (level) {
    case Logger::Level::trace: return spdlog::level::trace;
    case Logger::Level::debug: return spdlog::level::debug;
    case Logger::Level::info: return spdlog::level::info;
    case Logger::Level::warn: return spdlog::level::warn;
    case Logger::Level::error: break;
  }
  return spdlog::level::err;
}

}  // namespace

bool Logger::enabled(Level level) const { return spdlog_logger().should_log(spdlog_level(level)); }

void Logger::write(Level level, fmt::string_view format, fmt::format_args args) noexcept {
  // Logging never fails a call, nor throws from a destructor: a line that cannot be formatted
  // (no host memory left) is dropped, as spdlog drops one it cannot write.
  try {
    const std::string line = fmt::vformat(format, args);
    spdlog_logger().log(spdlog_level(level), spdlog::string_view_t(line.data(), line.size()));
  } catch (...) {
  }
}

Logger& logger() {
  static Logger instance;
  return instance;
}

}  // namespace cudacache
