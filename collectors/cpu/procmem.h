/* Reading a workload's memory: process_vm_readv, with no ptrace stop.
 * The readers of process memory (pyframes, jitreg) take a function of
 * this shape, so that tests can hand them memory of their own. */
#ifndef RINGPROF_PROCMEM_H
#define RINGPROF_PROCMEM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* len bytes at addr of process pid into buf: 0, or a negative errno
 * (-EIO when only part could be read).  ctx is unused. */
static inline int rp_procmem_read(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

#endif
