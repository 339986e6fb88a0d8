// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once

#include <cstddef>
#include <string>

namespace cudacache::replay {

class ProgressBar {
 public:
  ProgressBar();
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(const std::string& label, std::size_t done, std::size_t total);
  void clear();  // erases the line, before regular output
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  bool drawn_ = false;
  int last_percent_ = -1;
  std::string last_label_;
};

}  // namespace cudacache::replay
