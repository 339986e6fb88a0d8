/* Compiled as C99 with -pedantic -Werror: the C header must be valid C99. Runs a few calls. */
#include <cudacache/cudacache.h>

#include <stdio.h>
#include <string.h>

static bool never_retry(const cudacache_oom_context* context) { return context == NULL; }

int main(void) {
  void* ptr = NULL;
  char json[64];
  int handle = cudacache_register_retry_hook(never_retry, NULL);
  cudacache_status status = cudacache_allocate(&ptr, 4096, 0, NULL);
  if (status != CUDACACHE_OK || ptr == NULL) {
    fprintf(stderr, "allocate: %s %s\n", cudacache_status_string(status), cudacache_last_error());
    return 1;
  }
  if (cudacache_memory_allocated(0) != 4096) return 2;
  if (cudacache_memory_stats_json(0, json, sizeof json) <= (int)sizeof json) return 3;
  if (strncmp(json, "{\"", 2) != 0) return 4;
  {
    cudacache_memory_stats stats;
    stats.size = sizeof stats;
    if (cudacache_get_memory_stats(0, &stats) != CUDACACHE_OK) return 9;
    if (stats.allocated_bytes[CUDACACHE_ALL_POOLS].current != 4096) return 10;
  }
  cudacache_free(ptr, 4096, 0, NULL);
  if (cudacache_memory_allocated(0) != 0) return 5;
  if (cudacache_malloc(-1, 0, NULL) != NULL) return 6;
  if (strstr(cudacache_last_error(), "negative size") == NULL) return 7;
  if (cudacache_unregister_retry_hook(handle) != CUDACACHE_OK) return 8;
  cudacache_empty_cache();
  puts("c99 ok");
  return 0;
}
