/* The pod sandbox's process (what registry.k8s.io/pause runs): hold the pod's namespaces, reap children, exit on
 * SIGINT or SIGTERM. Built with the machine's C compiler (gcc -Os -static) into the e2e node's pause image. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  sigaction(SIGCHLD, &child, NULL);
  for (;;) pause();
  return 1;
}
