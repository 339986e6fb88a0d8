// The interposed runtime functions (runtime_hooks.cpp) as the dlsym hook hands them out.
#pragma once

namespace cudacache::preload {

// Our hook for the runtime function `name`, or nullptr if we do not interpose it.
void* runtime_hook(const char* name);

}  // namespace cudacache::preload
