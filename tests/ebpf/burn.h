/* The CPU sampler's test workload: user-space work and system calls in
 * turns, so that samples land both in user mode and in the kernel. */
#ifndef RINGPROF_TEST_BURN_H
#define RINGPROF_TEST_BURN_H

#include <stdint.h>

/* Burn until the host clock reaches end_ns, with `syscalls` getppid()
 * calls after every round of user-space work. */
void burn_until(uint64_t end_ns, unsigned syscalls);

#endif
