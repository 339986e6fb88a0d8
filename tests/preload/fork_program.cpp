// A program that forks after using CUDA through the preload; the child does no CUDA work and
// exits normally. The exit summary is the parent's alone: the child inherited the caches and
// their counters, and used to print (or write over) the parent's summary as its own.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main() {
  for (int i = 0; i < 10; ++i) {
    void* p = nullptr;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 1;
    cudaFree(p);
  }
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) std::exit(0);  // exit, not _exit: destructors run as in any child
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 1;
  std::printf("child exited: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}
