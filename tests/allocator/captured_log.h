// CapturedLog: the lines cudacache logs at `level` and above while it lives, for tests that
// check what the allocator says; the logger's level and sinks are as before once it goes.
// A header of its own: spdlog's logger costs each file that includes it seconds of build.
#pragma once

#include "log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace cudacache::testing {

class CapturedLog {
 public:
  // Keeps the last `lines` lines.
  CapturedLog(spdlog::level::level_enum level, std::size_t lines)
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(lines)),
        log_(spdlog_logger()),
        level_(log_.level()) {
    log_.sinks().push_back(sink_);
    log_.set_level(level);
  }
  ~CapturedLog() {
    log_.sinks().pop_back();
    log_.set_level(level_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::vector<std::string> lines() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  spdlog::logger& log_;
  spdlog::level::level_enum level_;
};

}  // namespace cudacache::testing
