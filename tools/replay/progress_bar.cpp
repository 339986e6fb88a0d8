#include "progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace cudacache::replay {
namespace {

constexpr int kBarWidth = 30;
constexpr std::size_t kMaxLabel = 60;

}  // namespace

ProgressBar::ProgressBar() : enabled_(isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() { clear(); }

void ProgressBar::update(const std::string& label, std::size_t done, std::size_t total) {
  if (!enabled_) return;
  const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
  // Redrawing only on change keeps the terminal traffic negligible.
  if (percent == last_percent_ && label == last_label_) return;
  last_percent_ = percent;
  last_label_ = label;
  const int filled = percent * kBarWidth / 100;
  std::string shown = label.size() > kMaxLabel ? label.substr(0, kMaxLabel - 3) + "..." : label;
  std::fprintf(stderr, "\r\033[K%s [%.*s%*s] %3d%%", shown.c_str(), filled,
               "##############################", kBarWidth - filled, "", percent);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
  last_percent_ = -1;
}

}  // namespace cudacache::replay
