/* An arena for protobuf-c unpacking, with a byte budget.  Unpacking an
 * XSpace allocates once per event and per stat: bump allocation from
 * large chunks, all dropped at once, is several times faster than malloc
 * and free per message.  The budget stops a small hostile message of many
 * empty submessages from making protobuf-c allocate tens of times its
 * size. */
#ifndef RINGPROF_XLA_PBALLOC_H
#define RINGPROF_XLA_PBALLOC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

struct rp_pb_chunk;

struct rp_pb_arena {
	ProtobufCAllocator alloc; /* pass &arena.alloc to *_unpack */
	struct rp_pb_chunk *chunks;
	size_t left;              /* budget left, in bytes */
	bool refused;             /* an allocation was refused: over budget */
};

void rp_pb_arena_init(struct rp_pb_arena *a, size_t budget);
/* Frees everything unpacked with it (no *_free_unpacked needed). */
void rp_pb_arena_free(struct rp_pb_arena *a);

#endif
