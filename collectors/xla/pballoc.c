/* Bump allocation from chunks, under a budget (see pballoc.h). */
#include <stdint.h>
#include <stdlib.h>

#include "pballoc.h"

#define CHUNK_SIZE ((size_t)1 << 20)
#define ALIGN _Alignof(max_align_t)

struct rp_pb_chunk {
	struct rp_pb_chunk *next;
	size_t used, size;
	_Alignas(max_align_t) unsigned char data[];
};

/* A new chunk goes in front, where allocation continues, unless it only
 * holds one large block: then behind the front, which keeps its room. */
static struct rp_pb_chunk *new_chunk(struct rp_pb_arena *a, size_t size, bool large)
{
	size_t total = sizeof(struct rp_pb_chunk) + size;
	if (total < size || total > a->left) {
		a->refused = true;
		return NULL;
	}
	struct rp_pb_chunk *c = malloc(total);
	if (!c)
		return NULL;
	a->left -= total;
	struct rp_pb_chunk **link = large && a->chunks ? &a->chunks->next : &a->chunks;
	*c = (struct rp_pb_chunk){.next = *link, .size = size};
	*link = c;
	return c;
}

static void *arena_alloc(void *data, size_t size)
{
	struct rp_pb_arena *a = data;
	size = (size + ALIGN - 1) & ~(ALIGN - 1);
	if (!size)
		size = ALIGN;
	struct rp_pb_chunk *c = a->chunks;
	if (!c || c->size - c->used < size) {
		bool large = size > CHUNK_SIZE / 4;
		c = new_chunk(a, large ? size : CHUNK_SIZE, large);
		if (!c)
			return NULL;
	}
	void *p = c->data + c->used;
	c->used += size;
	return p;
}

/* Blocks go back with the arena, all at once. */
static void arena_free(void *data, void *ptr)
{
	(void)data, (void)ptr;
}

void rp_pb_arena_init(struct rp_pb_arena *a, size_t budget)
{
	*a = (struct rp_pb_arena){.alloc = {arena_alloc, arena_free, a}, .left = budget};
}

void rp_pb_arena_free(struct rp_pb_arena *a)
{
	while (a->chunks) {
		struct rp_pb_chunk *next = a->chunks->next;
		free(a->chunks);
		a->chunks = next;
	}
}
