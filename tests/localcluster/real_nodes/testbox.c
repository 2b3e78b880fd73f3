/* A program that misbehaves on purpose, for tests of what only a real kubelet does (OOMKilled
 * under a memory limit, SIGKILL after the grace period). The real-node back end packs it, like
 * pause.c, into an image of its own (localhost/phalanx-testbox:1, user 65532), so these tests
 * need no image with a shell or an interpreter. Linked statically.
 *   testbox eat-memory MIB   touch MIB MiB of memory one MiB at a time, then wait
 *   testbox ignore-sigterm   ignore SIGTERM, print "ready", wait (only SIGKILL ends it)
 * Either prints what it does to stdout (the pod's log). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void) {
  fputs("usage: testbox eat-memory MIB | testbox ignore-sigterm\n", stderr);
  return 2;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "eat-memory") == 0) {
    long mib = strtol(argv[2], 0, 10);
    if (mib <= 0) return usage();
    for (long i = 0; i < mib; ++i) {
      /* volatile: an allocation nothing reads is otherwise optimized away, memset and all */
      volatile char* chunk = malloc(1 << 20);
      if (chunk == 0) {
        puts("malloc failed");
        return 1;
      }
      for (int b = 0; b < (1 << 20); b += 4096) chunk[b] = 1; /* resident: charged to the cgroup */
    }
    printf("holding %ld MiB\n", mib);
    fflush(stdout);
  } else if (argc == 2 && strcmp(argv[1], "ignore-sigterm") == 0) {
    signal(SIGTERM, SIG_IGN);
    puts("ready");
    fflush(stdout);
  } else {
    return usage();
  }
  for (;;) pause();
}
