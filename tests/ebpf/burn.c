#include "burn.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"

static volatile uint64_t sink_value;

__attribute__((noinline)) static void burn_user(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sink_value += (uint64_t)i * i;
}

__attribute__((noinline)) static void burn_syscalls(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		syscall(SYS_getppid);
}

void burn_until(uint64_t end_ns, unsigned syscalls)
{
	while (rp_clock_now_ns() < end_ns) {
		burn_user(20000);
		burn_syscalls(syscalls);
	}
}
