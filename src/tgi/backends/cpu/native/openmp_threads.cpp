// The calling thread's OpenMP worker threads, released (see release_openmp_threads in ops.h).
#include <omp.h>

#include "ops.h"

bool release_openmp_threads() {
  // A soft pause frees the calling thread's pool of idle workers (libgomp: gomp_pause_host) and lowers the
  // count of threads the runtime manages; it fails (non-zero) inside a parallel region.
  return omp_pause_resource_all(omp_pause_soft) == 0;
}
