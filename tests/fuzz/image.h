/* A fuzz input seen as a process's memory at BASE, for the targets whose
 * parsers read process memory through a read callback; and the check
 * that aborts (a crash libFuzzer reports) when an invariant fails. */
#ifndef RINGPROF_FUZZ_IMAGE_H
#define RINGPROF_FUZZ_IMAGE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BASE 0x10000ull

struct image {
	const uint8_t *data;
	size_t size;
};

static inline int image_read(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len)
{
	const struct image *m = ctx;
	(void)pid;
	if (addr < BASE || addr - BASE > m->size || len > m->size - (addr - BASE))
		return -EFAULT;
	memcpy(buf, m->data + (addr - BASE), len);
	return 0;
}

static inline void check(int ok)
{
	if (!ok)
		abort();
}

#endif
