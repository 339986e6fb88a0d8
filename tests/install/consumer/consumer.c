/* A C99 program on the installed C API (also built with pkg-config by the install check). */
#include <cudacache/cudacache.h>

#include <stdio.h>

int main(void) {
  cudacache_memory_stats stats;
  void* ptr = cudacache_malloc(4096, 0, NULL);
  if (ptr == NULL) {
    fprintf(stderr, "consumer_c: %s\n", cudacache_last_error());
    return 1;
  }
  stats.size = sizeof stats;
  if (cudacache_get_memory_stats(0, &stats) != CUDACACHE_OK) return 2;
  if (stats.allocated_bytes[CUDACACHE_ALL_POOLS].current != 4096) return 3;
  cudacache_free(ptr, 4096, 0, NULL);
  printf("consumer_c: cudacache %s ok\n", cudacache_version());
  return 0;
}
