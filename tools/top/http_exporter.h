// `cudacache-top --listen ADDRESS:PORT`: serves the Prometheus text of a fresh scan at
// /metrics, one request at a time, until SIGINT or SIGTERM. Meant for 127.0.0.1 (the
// scraper runs on the node); any IPv4 address may be given.
#pragma once

#include <functional>
#include <string>

namespace cudacache::top {

// Parses "A.B.C.D:PORT" or "localhost:PORT" (PORT 0: any free port). On success binds,
// prints "serving http://ADDRESS:PORT/metrics" on stdout and serves; returns the exit code
// (0 after a signal, 2 for a bad address or a failed bind, with the reason on stderr).
int serve_metrics(const std::string& listen, const std::function<std::string()>& metrics);

}  // namespace cudacache::top
