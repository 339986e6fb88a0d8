#include "live_view.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>

namespace cudacache::top {
namespace {

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }

// Puts the terminal in non-canonical, no-echo mode and restores it when destroyed.
class RawTerminal {
 public:
  RawTerminal() {
    if (::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

std::size_t terminal_width() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

std::string screen(const Scan& scan, SortKey key, bool terminal) {
  std::string keys;
  for (const auto& entry : sort_keys()) {
    keys += entry.letter;
    keys += '=';
    keys += entry.name;
    keys += ' ';
  }
  std::string text = "cudacache-top ";
  text += clock_text();
  text += "  " + std::to_string(scan.processes) + " processes, ";
  text += std::to_string(scan.rows.size()) + " devices in use  (";
  text += scan.directory;
  text += ")  sorted by ";
  text += info(key).name;
  text += '\n';
  if (terminal) text += "sort: " + keys + " q=quit\n";
  text += '\n';
  text += table(scan, key, terminal ? terminal_width() : 0);
  for (const std::string& note : scan.notes) text += "note: " + note + "\n";
  return text;
}

}  // namespace

int run_live_view(const LiveOptions& options) {
  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  const bool keyboard = terminal && ::isatty(STDIN_FILENO) != 0;
  struct sigaction action {};
  action.sa_handler = request_stop;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  SortKey key = options.sort;
  std::optional<RawTerminal> raw;
  if (keyboard) raw.emplace();
  if (terminal) std::fputs("\x1b[?25l", stdout);  // hide the cursor
  for (long refresh = 0; !g_stop.load(); ++refresh) {
    const Scan scan = scan_pages(options.directory, options.remove_abandoned);
    const std::string text = screen(scan, key, terminal);
    if (terminal) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    std::fputs(text.c_str(), stdout);
    if (!terminal) std::fputs("\n", stdout);
    std::fflush(stdout);
    if (options.iterations > 0 && refresh + 1 >= options.iterations) break;
    // Wait for the interval, or a key.
    const auto deadline_ms = static_cast<long>(options.interval_seconds * 1000.0);
    pollfd input{keyboard ? STDIN_FILENO : -1, POLLIN, 0};
    const int ready = ::poll(&input, 1, static_cast<int>(deadline_ms));
    if (ready > 0 && (input.revents & POLLIN) != 0) {
      char pressed = 0;
      if (::read(STDIN_FILENO, &pressed, 1) == 1) {
        if (pressed == 'q' || pressed == 'Q') break;
        if (const auto chosen = sort_key_of_letter(pressed)) key = *chosen;
      }
    }
  }
  if (terminal) std::fputs("\x1b[?25h", stdout);  // show the cursor
  std::fflush(stdout);
  return 0;
}

}  // namespace cudacache::top
