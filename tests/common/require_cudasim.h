// CUDACACHE_REQUIRE_CUDASIM(): skips the current test when it does not run on the simulated
// runtime (cudasim's controls are absent). For every test directory, public-library tests and
// the cudasim tests included; tests/CMakeLists.txt puts tests/common on the include path.
#pragma once

#include <cudasim.h>
#include <gtest/gtest.h>

#define CUDACACHE_REQUIRE_CUDASIM()                                        \
  do {                                                                     \
    if (!cudasim_available()) GTEST_SKIP() << "needs the cudasim runtime"; \
  } while (0)
