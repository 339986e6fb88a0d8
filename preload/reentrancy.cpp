#include "reentrancy.h"

namespace cudacache::preload {
namespace {

__attribute__((tls_model("initial-exec"))) thread_local bool t_inside = false;

}  // namespace

bool inside_cudacache() { return t_inside; }

InsideCudacache::InsideCudacache() : previous_(t_inside) { t_inside = true; }

InsideCudacache::~InsideCudacache() { t_inside = previous_; }

}  // namespace cudacache::preload
