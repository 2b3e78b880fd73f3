/* The pod sandbox's process on the local cluster's real nodes (what registry.k8s.io/pause is on
 * a real cluster): it holds the pod's namespaces, reaps zombies, and ends on SIGTERM/SIGINT.
 * Linked statically: its image (oci_archive.h) holds this one file. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  signal(SIGINT, stop);
  signal(SIGTERM, stop);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
