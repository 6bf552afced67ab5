/* SIGSEGV handler for a C-level backtrace (LD_PRELOAD): prints each frame's object and offset. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static void handler(int sig) {
  void *frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; i++) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname)
      fprintf(stderr, "FRAME %d %s +0x%lx %s\n", i, info.dli_fname,
              (unsigned long)((char *)frames[i] - (char *)info.dli_fbase), info.dli_sname ? info.dli_sname : "?");
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) { signal(SIGSEGV, handler); }
