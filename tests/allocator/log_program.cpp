// Logs one info message and checks that CUDACACHE_LOG_LEVEL gave the level named on the command
// line (argv[1], spdlog's name): the log tests (tests/allocator/CMakeLists.txt) run it under
// several values and check what it writes.
#include "log.h"

#include <spdlog/logger.h>

#include <cstdio>
#include <string_view>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  cudacache::logger().info("log check");
  spdlog::logger& log = cudacache::spdlog_logger();
  log.flush();
  const auto name = spdlog::level::to_string_view(log.level());
  std::printf("level %.*s\n", static_cast<int>(name.size()), name.data());
  return std::string_view(name.data(), name.size()) == argv[1] ? 0 : 1;
}
