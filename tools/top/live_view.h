// The live view: the table redrawn every interval like top, sorted by a key the user presses
// (the letters of sort_keys(), q to quit). On a terminal the screen is cleared and keys are
// read without echo; otherwise (a pipe, a file) each refresh is printed below the last, like
// `top -b`. Ends after `iterations` refreshes (0: until q, SIGINT or SIGTERM).
#pragma once

#include "formats.h"

#include <string>

namespace cudacache::top {

struct LiveOptions {
  std::string directory;
  SortKey sort = SortKey::kReserved;
  double interval_seconds = 1.0;
  long iterations = 0;
  bool remove_abandoned = true;
};

int run_live_view(const LiveOptions& options);

}  // namespace cudacache::top
