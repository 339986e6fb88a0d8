// The one logger of cudacache. Silent unless CUDACACHE_LOG_LEVEL is set to one of
// trace, debug, info, warn, error, off (read once, at first use).
#pragma once

#include <spdlog/logger.h>

namespace cudacache {

spdlog::logger& logger();

}  // namespace cudacache
