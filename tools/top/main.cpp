// cudacache-top: what the allocator of every process on this machine knows, from the stats
// pages they publish (allocator/core/stats_page.h). README.md, "cudacache-top".
#include "formats.h"
#include "http_exporter.h"
#include "live_view.h"
#include "page_scan.h"
#include "stats_page.h"

#include <CLI/CLI.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

using namespace cudacache::top;

// Writes `text` to `path` through a new temporary file beside it (mkstemp: never an existing
// file or a link), flushed to disk, then renamed: a reader (node_exporter's textfile collector)
// never sees half a file.
bool write_atomically(const std::string& path, const std::string& text) {
  const std::size_t slash = path.rfind('/');
  std::string temporary = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
                          ".cudacache-top-XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  const auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "cudacache-top: cannot write %s: %s\n", what.c_str(),
                 std::strerror(errno));
    if (fd >= 0) {
      ::close(fd);
      ::unlink(temporary.c_str());
    }
    return false;
  };
  if (fd < 0) return fail(temporary);
  for (std::size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(temporary);
    written += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) return fail(temporary);
  if (::close(fd) != 0) {
    ::unlink(temporary.c_str());
    std::fprintf(stderr, "cudacache-top: cannot write %s: %s\n", temporary.c_str(),
                 std::strerror(errno));
    return false;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "cudacache-top: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    ::unlink(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cudacache-top: one line per process and device using cudacache, from the stats pages "
      "the allocators publish (live view; --once, --json, --prometheus, --listen)."};
  bool once = false;
  bool as_json = false;
  bool as_prometheus = false;
  bool keep_abandoned = false;
  std::string output;
  std::string listen;
  std::string sort_name = "reserved";
  std::string directory = cudacache::stats_page::stats_directory();
  double interval = 1.0;
  long iterations = 0;
  std::string sort_names;
  for (const auto& key : sort_keys())
    sort_names += std::string(sort_names.empty() ? "" : ", ") + key.name;

  app.add_flag("--once", once, "Print the table once and exit");
  app.add_flag("--json", as_json, "Print the same data once as JSON and exit");
  app.add_flag("--prometheus", as_prometheus,
               "Print the figures once in Prometheus' text exposition format and exit");
  app.add_option("--output", output,
                 "With --once, --json or --prometheus: write to this file (atomically, for "
                 "node_exporter's textfile collector) instead of stdout");
  app.add_option("--listen", listen,
                 "Serve the Prometheus figures over HTTP at ADDRESS:PORT/metrics (e.g. "
                 "127.0.0.1:9400; port 0 picks a free one) until SIGINT or SIGTERM");
  app.add_option("--sort", sort_name, "Sort key: " + sort_names)->capture_default_str();
  app.add_option("--interval", interval, "Seconds between refreshes of the live view")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--iterations", iterations, "Refreshes before the live view exits (0: until q)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dir", directory, "Where the stats pages are ($CUDACACHE_STATS_DIR or /dev/shm)")
      ->capture_default_str();
  app.add_flag("--keep-abandoned", keep_abandoned,
               "Do not remove the pages of processes that have exited (only report them)");
  CLI11_PARSE(app, argc, argv);

  const auto sort = sort_key_named(sort_name);
  if (!sort) {
    std::fprintf(stderr, "cudacache-top: --sort takes one of %s, not '%s'\n", sort_names.c_str(),
                 sort_name.c_str());
    return 2;
  }
  const int modes =
      (once ? 1 : 0) + (as_json ? 1 : 0) + (as_prometheus ? 1 : 0) + (listen.empty() ? 0 : 1);
  if (modes > 1) {
    std::fprintf(stderr,
                 "cudacache-top: --once, --json, --prometheus and --listen are "
                 "alternatives; give one\n");
    return 2;
  }
  if (!output.empty() && !(once || as_json || as_prometheus)) {
    std::fprintf(stderr, "cudacache-top: --output goes with --once, --json or --prometheus\n");
    return 2;
  }
  // A directory that cannot be read is an error at the start, whatever the mode: a typo in
  // --dir would otherwise look like a machine where nothing runs. (Lost later, it is a note
  // and, for Prometheus, cudacache_top_directory_readable 0.)
  if (DIR* dir = ::opendir(directory.c_str()); dir != nullptr) {
    ::closedir(dir);
  } else {
    std::fprintf(stderr, "cudacache-top: cannot open the stats page directory %s: %s\n",
                 directory.c_str(), std::strerror(errno));
    return 1;
  }
  const bool remove_abandoned = !keep_abandoned;
  if (!listen.empty()) {
    return serve_metrics(listen,
                         [&] { return prometheus(scan_pages(directory, remove_abandoned)); });
  }
  if (once || as_json || as_prometheus) {
    const Scan scan = scan_pages(directory, remove_abandoned);
    std::string text;
    if (as_json) {
      text = json(scan);
    } else if (as_prometheus) {
      text = prometheus(scan);
    } else {
      text = table(scan, *sort);
      for (const std::string& note : scan.notes) text += "note: " + note + "\n";
    }
    if (!output.empty()) return write_atomically(output, text) ? 0 : 1;
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  LiveOptions live;
  live.directory = directory;
  live.sort = *sort;
  live.interval_seconds = interval;
  live.iterations = iterations;
  live.remove_abandoned = remove_abandoned;
  return run_live_view(live);
}
