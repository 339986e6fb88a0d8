// The one logger of cudacache. Silent unless CUDACACHE_LOG_LEVEL is set to one of
// trace, debug, info, warn, error, off (read once, at first use).
//
// logger().error("{} failed: {}", what, why) formats with fmt (the format checked at compile
// time, nothing formatted while the level is off) and hands the line to spdlog's logger in
// log.cpp. Only log.cpp compiles spdlog and fmt's formatting: each file that logged took about
// 12 s more to build at -O3 when it included spdlog's logger.
#pragma once

#include <fmt/format.h>

#include <utility>

namespace spdlog {
class logger;
}

namespace cudacache {

class Logger {
 public:
  enum class Level { trace, debug, info, warn, error };

  template <typename... Args>
  void trace(fmt::format_string<Args...> format, Args&&... args) {
    log(Level::trace, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void debug(fmt::format_string<Args...> format, Args&&... args) {
    log(Level::debug, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) {
    log(Level::info, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    log(Level::warn, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void error(fmt::format_string<Args...> format, Args&&... args) {
    log(Level::error, format, std::forward<Args>(args)...);
  }

  bool enabled(Level level) const;

 private:
  template <typename... Args>
  void log(Level level, fmt::format_string<Args...> format, Args&&... args) {
    if (!enabled(level)) return;
    write(level, format, fmt::make_format_args(args...));
  }
  // Formats in log.cpp, so that the files that log do not each compile fmt's formatting.
  void write(Level level, fmt::string_view format, fmt::format_args args) noexcept;
};

Logger& logger();

// spdlog's logger behind logger(): for tests that add a sink or change the level.
spdlog::logger& spdlog_logger();

}  // namespace cudacache
