#include "scoped_flag.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cudacache {
namespace {

TEST(ScopedFlag, SetForTheScopeAndClearedAfter) {
  bool flag = false;
  {
    const ScopedFlag scope(flag, true);
    EXPECT_TRUE(flag);
  }
  EXPECT_FALSE(flag);
  {
    const ScopedFlag scope(flag, false);  // a scope may also set it false
    EXPECT_FALSE(flag);
  }
  EXPECT_FALSE(flag);
}

TEST(ScopedFlag, ClearedWhenTheScopeEndsByAnException) {
  bool flag = false;
  EXPECT_THROW(
      {
        const ScopedFlag scope(flag, true);
        EXPECT_TRUE(flag);
        throw std::runtime_error("a CUDA error in the growth");
      },
      std::runtime_error);
  EXPECT_FALSE(flag);
}

}  // namespace
}  // namespace cudacache
