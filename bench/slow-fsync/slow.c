/* bench/speculate-ab.sh: LD_PRELOADed into the three nodes when SLOW_SYNC_US is set. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
#include <stdlib.h>
/* Adds SLOW_SYNC_US (default 1000) microseconds to every fdatasync: a slower disk per process. */
static int (*real)(int);
int fdatasync(int fd) {
  if (!real) real = dlsym(RTLD_NEXT, "fdatasync");
  const char *e = getenv("SLOW_SYNC_US");
  usleep(e ? atoi(e) : 1000);
  return real(fd);
}
