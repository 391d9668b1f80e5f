/* Fuzz target for what the daemon reads of a Python process's memory:
 * the input is the process's memory at BASE, holding a code object there
 * (seeds: one of each version's layout, with its strings and line
 * table), described as each CPython version would be; and a line table,
 * decoded in both formats.  Whatever it holds, the reader returns
 * -EINVAL or a NUL-terminated name within RP_NAME_MAX. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "pyframes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image m = {data, size};
	uint32_t lasti = size ? data[0] : 0;
	for (unsigned minor = 10; minor <= 13; minor++) {
		struct rp_py_code c;
		int rc = rp_py_describe(minor, image_read, &m, 1, BASE, 0, lasti, &c);
		check(rc == 0 || rc == -EINVAL);
		if (rc == 0)
			check(strlen(c.name) <= RP_NAME_MAX && strchr(c.name, '\t'));
		(void)rp_py_line(minor, data, size, 1, lasti);
	}
	return 0;
}
