// Symbols the preload exports (also listed in exports.map). Everything else is hidden.
#pragma once

#define CUDACACHE_PRELOAD_EXPORT extern "C" __attribute__((visibility("default")))
