#include "table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint64_t rp_hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h ^ h >> 29;
}

uint64_t rp_hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	return x ^ x >> 33;
}

int rp_table_reserve(void *table_ptr, size_t *mask, size_t n, size_t elem,
		     bool (*used)(const void *), uint64_t (*hash)(const void *), size_t first)
{
	char *old;
	memcpy(&old, table_ptr, sizeof(old)); /* any entry type's pointer */
	if (old && n + 1 <= (*mask + 1) / 2)
		return 0;
	size_t size = old ? 2 * (*mask + 1) : first;
	char *grown = calloc(size, elem);
	if (!grown)
		return -ENOMEM;
	for (size_t i = 0; old && i <= *mask; i++) {
		const char *e = old + i * elem;
		if (!used(e))
			continue;
		size_t j = (size_t)(hash(e) & (size - 1));
		while (used(grown + j * elem))
			j = (j + 1) & (size - 1);
		memcpy(grown + j * elem, e, elem);
	}
	free(old);
	memcpy(table_ptr, &grown, sizeof(grown));
	*mask = size - 1;
	return 0;
}

int rp_array_reserve(void *array_ptr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t grown_cap = *cap ? *cap : 16;
	while (grown_cap < need)
		grown_cap *= 2;
	void *old;
	memcpy(&old, array_ptr, sizeof(old));
	void *grown = realloc(old, grown_cap * elem);
	if (!grown)
		return -ENOMEM;
	memcpy(array_ptr, &grown, sizeof(grown));
	*cap = grown_cap;
	return 0;
}
