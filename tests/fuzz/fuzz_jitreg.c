/* Fuzz target for the GDB JIT registrations the daemon reads from a
 * process (collectors/cpu/jitreg): the input is parsed as a symfile, and
 * as the process's memory at BASE holding the descriptor, its entries
 * and their symfiles.  Whatever it holds, the parser and the walk return
 * a bounded count or a negative errno, with NUL-terminated names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "jitreg.h"

#define MAX 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_names(const struct rp_jit_func *f, int n)
{
	for (int i = 0; i < n; i++)
		check(strnlen(f[i].name, RP_JIT_NAME) < RP_JIT_NAME && f[i].start < f[i].end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rp_jit_func out[MAX];
	/* An 8-aligned copy, as the walk reads symfiles into. */
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	int n = rp_jit_parse_symfile(copy, size, out, MAX);
	check(n == -EINVAL || (n >= 0 && n <= MAX));
	check_names(out, n);
	struct image m = {copy, size};
	n = rp_jit_walk(image_read, &m, 1, BASE, out, MAX);
	check(n < 0 || n <= MAX);
	check_names(out, n);
	free(copy);
	return 0;
}
