/* The hashing and the growth of the open-addressing tables the reader
 * and the exporters keep (names, threads, frames, stacks, tracks), and
 * the growth of their plain arrays, once for all of them instead of a
 * copy in each file: every such table is an
 * array of fixed-size entries, mask + 1 of them (a power of two), probed
 * linearly from hash & mask and kept at most half full.  What makes an
 * entry used, what it hashes and how it is looked up stay with each
 * table; the growth, the same for all, is here. */
#ifndef RINGPROF_TABLE_H
#define RINGPROF_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The size of most tables when their first entry comes. */
#define RP_TABLE_FIRST 256

/* FNV-1a of the string, its high bits folded into the low ones, which
 * pick the slot. */
uint64_t rp_hash_str(const char *s);

/* A 64-bit key (pid << 32 | tid, an address) mixed so that every bit of
 * it moves the low bits (MurmurHash3's finalizer, first half). */
uint64_t rp_hash_u64(uint64_t x);

/* Makes room in the table *table_ptr (table_ptr points to the entries'
 * pointer, NULL while there is no table) for one more entry than the n
 * it holds, keeping it at most half full: a new table has `first` slots
 * (a power of two), and a full one doubles, each used entry moving to
 * the first free slot from hash(entry) & *mask.  Entries are elem bytes;
 * new slots are zero, which used() must take for free.  Pointers into
 * the table are stale once it grew.  0, or -ENOMEM with the table as it
 * was. */
RP_MUST_CHECK int rp_table_reserve(void *table_ptr, size_t *mask, size_t n, size_t elem,
		     bool (*used)(const void *), uint64_t (*hash)(const void *), size_t first);

/* Makes the growable array *array_ptr (of *cap entries of elem bytes,
 * NULL while empty) hold at least need entries: its capacity doubles,
 * from 16.  0, or -ENOMEM with the array as it was. */
RP_MUST_CHECK int rp_array_reserve(void *array_ptr, size_t *cap, size_t need, size_t elem);

#endif
