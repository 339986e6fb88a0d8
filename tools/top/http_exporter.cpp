#include "http_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cudacache::top {
namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

constexpr std::size_t kMaxRequestBytes = 8192;

void send_all(int fd, const std::string& text) {
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away
    sent += static_cast<std::size_t>(n);
  }
}

std::string response(int status, const char* reason, const char* type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

// Reads the request head (up to the blank line) within kRequestSeconds in all: a slow client
// gets a 408, and the server goes back to the others.
constexpr int kRequestMilliseconds = 3000;

void answer(int client, const std::function<std::string()>& metrics) {
  timeval send_timeout{2, 0};
  ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestMilliseconds);
  std::string head;
  char buffer[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd waiting{client, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&waiting, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) {
      if (g_stop.load()) return;
      continue;
    }
    if (ready == 0) {
      send_all(client, response(408, "Request Timeout", "text/plain", "request head too slow\n"));
      return;
    }
    const ssize_t n = ::recv(client, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    head.append(buffer, static_cast<std::size_t>(n));
    if (head.size() > kMaxRequestBytes) {
      send_all(client, response(431, "Request Header Fields Too Large", "text/plain",
                                "request head over 8 KiB\n"));
      return;
    }
  }
  const std::size_t line_end = head.find_first_of("\r\n");
  const std::string line = head.substr(0, line_end);
  const std::size_t first_space = line.find(' ');
  const std::size_t second_space =
      first_space == std::string::npos ? std::string::npos : line.find(' ', first_space + 1);
  if (second_space == std::string::npos || line.compare(second_space + 1, 5, "HTTP/") != 0) {
    send_all(client, response(400, "Bad Request", "text/plain", "not an HTTP request\n"));
    return;
  }
  const std::string method = line.substr(0, first_space);
  std::string target = line.substr(first_space + 1, second_space - first_space - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_all(client, response(405, "Method Not Allowed", "text/plain", "GET only\n"));
    return;
  }
  std::string answer_text;
  if (target == "/metrics") {
    answer_text = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", metrics());
  } else if (target == "/") {
    answer_text =
        response(200, "OK", "text/plain", "cudacache-top: the allocator metrics are at /metrics\n");
  } else {
    answer_text = response(404, "Not Found", "text/plain", "no such page: " + target + "\n");
  }
  if (method == "HEAD") answer_text = answer_text.substr(0, answer_text.find("\r\n\r\n") + 4);
  send_all(client, answer_text);
}

}  // namespace

int serve_metrics(const std::string& listen, const std::function<std::string()>& metrics) {
  const std::size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? std::string() : listen.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? listen : listen.substr(colon + 1);
  if (host == "localhost") host = "127.0.0.1";
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (colon == std::string::npos || port_text.empty() || *end != '\0' || port < 0 || port > 65535 ||
      ::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    std::fprintf(stderr,
                 "cudacache-top: --listen takes ADDRESS:PORT with an IPv4 address (e.g. "
                 "127.0.0.1:9400), not '%s'\n",
                 listen.c_str());
    return 2;
  }
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  // Non-blocking: a connection that goes away between poll and accept cannot hang accept.
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int yes = 1;
  if (server < 0 || ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0 ||
      ::bind(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(server, 16) != 0) {
    std::fprintf(stderr, "cudacache-top: cannot listen on %s: %s\n", listen.c_str(),
                 std::strerror(errno));
    if (server >= 0) ::close(server);
    return 2;
  }
  socklen_t length = sizeof address;
  ::getsockname(server, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("serving http://%s:%u/metrics\n", host.c_str(), ntohs(address.sin_port));
  std::fflush(stdout);

  struct sigaction action {};
  action.sa_handler = request_stop;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  while (!g_stop.load()) {
    pollfd waiting{server, POLLIN, 0};
    const int ready = ::poll(&waiting, 1, 200);
    if (ready <= 0) continue;  // timeout or a signal: look at g_stop
    const int client = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    answer(client, metrics);
    ::close(client);
  }
  ::close(server);
  return 0;
}

}  // namespace cudacache::top
