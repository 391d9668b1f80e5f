/* Device ring files: one file per device holding its sealed chunks,
 * whatever their size, packed back to back around the file (format
 * version 2); the oldest are overwritten first, so the span held is the
 * budget divided by the compressed bytes per second, at any rate (or
 * max_age, when set and shorter).  A version-1 file (one chunk per fixed
 * slot) is read, and converted when opened for writing.
 *
 * Writes go through io_uring with several in flight, with O_DIRECT where
 * the file system allows it (buffered I/O otherwise).  Opening an existing
 * file recovers it from its entries (frame and chunk header, found at any
 * 64-byte boundary): torn, truncated, corrupt chunks and those of an older
 * lap are skipped and counted, never returned.  Readers iterate the
 * chunks overlapping a time window while the writer keeps writing; a chunk
 * overwritten under a reader is skipped and counted, never returned torn.
 *
 * Thread model: one writer thread calls append/sync; any number of other
 * threads may iterate and read stats at the same time. */
#ifndef RINGPROF_RINGFILE_H
#define RINGPROF_RINGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunkhdr.h"
#include "err.h"

#define RP_RINGFILE_MAGIC "RPRING01"
#define RP_RINGFILE_HEADER_SIZE 4096
#define RP_DEVICE_NAME_MAX 63

struct rp_ringfile_opts {
	const char *device;     /* "host", "gpu0", ...: [A-Za-z0-9_.-]{1,63} */
	uint32_t device_id;
	uint64_t budget_bytes;  /* whole file, header included */
	uint32_t slot_size;     /* largest chunk: multiple of 4096; 0: 128 KiB */
	unsigned queue_depth;   /* writes in flight; 0: 16 */
	bool buffered;          /* true: never try O_DIRECT */
	uint64_t max_age_ns;    /* 0: chunks stay until overwritten; else older
				 * ones (than the newest's last_ts) leave */
};

struct rp_ringfile_stats {
	char device[RP_DEVICE_NAME_MAX + 1];
	uint32_t device_id;
	uint32_t format_version;  /* of the file as opened (1: read-only) */
	uint32_t slot_size;       /* largest chunk */
	uint32_t slot_count;      /* largest chunks the ring holds at least; also,
				   * once chunk s + slot_count is appended, the
				   * write of chunk s is over (done or failed) */
	uint64_t capacity_bytes;  /* data area: the budget less the header */
	uint64_t max_age_ns;
	uint32_t chunks;         /* valid chunks held now */
	uint64_t oldest_seq, next_seq;
	uint64_t first_ts, last_ts; /* span held now (horizon); 0 when empty */
	uint64_t events;          /* in the chunks held now */
	uint64_t bytes_used;      /* entry frames, chunk headers and compressed
				   * payloads held now (fill: / budget) */
	uint64_t raw_bytes;       /* their uncompressed size */
	uint64_t dropped;         /* producer drops recorded in chunks held */
	uint64_t written_chunks;  /* appended since open */
	uint64_t write_errors;    /* chunks lost to failed writes since open */
	uint64_t recovered_chunks;    /* valid chunks found at open */
	uint64_t skipped_corrupt;     /* bad, torn or stale chunks found at open */
	uint64_t converted_chunks;    /* chunks of a version-1 file converted at open */
	bool converted;               /* a version-1 file was converted at open */
	uint64_t overwritten_in_read; /* chunks lost to wrap-around under a reader */
	bool direct_io;
	bool geometry_kept;       /* file existed with another budget or largest
				   * chunk; kept */
};

struct rp_ringfile;

/* Open path for writing: create it (preallocated) when missing, recover
 * it when present.  A version-1 file is converted: its chunks are written
 * into a new version-2 file that replaces it (stats.converted_chunks).  An
 * existing file with another budget or largest chunk keeps its geometry
 * (stats.geometry_kept) so no recorded data is lost; it also
 * keeps its device id (stats.device_id: seal chunks with that).  Errors
 * name the file and the fix: no space (-ENOSPC), permissions (-EACCES),
 * not a ring file (-EINVAL), a newer format (-EPROTONOSUPPORT), already
 * open for writing elsewhere (-EBUSY: the writer holds a flock), a
 * symbolic link (-ELOOP: never followed), not a regular file (-EINVAL: a
 * FIFO is not waited on). */
RP_MUST_CHECK int rp_ringfile_open(const char *path, const struct rp_ringfile_opts *opts,
		     struct rp_ringfile **out, struct rp_err *err);
/* Open an existing ring file read-only (recovery scan, no writes). */
RP_MUST_CHECK int rp_ringfile_open_readonly(const char *path, struct rp_ringfile **out,
			      struct rp_err *err);
/* Flushes (as rp_ringfile_sync) and frees. */
void rp_ringfile_close(struct rp_ringfile *rf);

/* Largest chunk (header + payload) the file takes. */
size_t rp_ringfile_max_chunk(const struct rp_ringfile *rf);
/* seq the next appended chunk must carry. */
uint64_t rp_ringfile_next_seq(const struct rp_ringfile *rf);

/* Queue one sealed chunk (copied) for writing after the previous one.
 * Blocks only while queue_depth writes are already in flight (or, rarely,
 * while a write of the chunks it overwrites still is).  The chunk's seq must be
 * rp_ringfile_next_seq().  The chunk becomes visible to readers once its
 * write has completed.  A write that fails later (-EIO, -ENOSPC) loses
 * only its chunk; poll and sync report it (stats.write_errors counts). */
RP_MUST_CHECK int rp_ringfile_append(struct rp_ringfile *rf, const void *chunk, size_t len,
		       struct rp_err *err);
/* Reap completed writes without waiting. */
RP_MUST_CHECK int rp_ringfile_poll(struct rp_ringfile *rf, struct rp_err *err);
/* Wait until every queued write has completed (and fdatasync when
 * durable is true). */
RP_MUST_CHECK int rp_ringfile_sync(struct rp_ringfile *rf, bool durable, struct rp_err *err);

void rp_ringfile_stats(struct rp_ringfile *rf, struct rp_ringfile_stats *st);

/* Chunks overlapping [t0, t1] (host ns, inclusive), ordered by seq. */
struct rp_ringfile_iter;
RP_MUST_CHECK int rp_ringfile_iter_new(struct rp_ringfile *rf, uint64_t t0, uint64_t t1,
			 struct rp_ringfile_iter **out);
/* 1 with *chunk (borrowed until the next call) and *len, 0 at the end,
 * a negative errno when reading the file fails.  hdr may be NULL.
 * Chunks overwritten or corrupt since the iteration began are skipped
 * and counted in stats.overwritten_in_read. */
RP_MUST_CHECK int rp_ringfile_iter_next(struct rp_ringfile_iter *it, const void **chunk,
			  size_t *len, struct rp_chunk_header *hdr);
void rp_ringfile_iter_free(struct rp_ringfile_iter *it);
/* Pass over, without reading them, the chunks below seq (a reader that
 * already has them). */
void rp_ringfile_iter_skip_below(struct rp_ringfile_iter *it, uint64_t seq);

/* Pins keep chunks from being lost to wrap-around while a snapshot copies
 * them out.  Before the writer overwrites a chunk whose seq lies in
 * [from_seq, to_seq] of any pin, it hands the chunk to that pin's save
 * function (on the writer thread), which must copy it and must not pin
 * or unpin itself.  Pinning and unpinning may happen on any thread; save
 * is never called after unpin returns (unpin waits for a running save).
 * Close frees the pins still held. */
typedef int (*rp_ringfile_save_fn)(void *ctx, const void *chunk, size_t len,
				   const struct rp_chunk_header *hdr);
struct rp_ringfile_pin;
RP_MUST_CHECK int rp_ringfile_pin(struct rp_ringfile *rf, uint64_t from_seq, uint64_t to_seq,
		    rp_ringfile_save_fn save, void *ctx,
		    struct rp_ringfile_pin **out);
void rp_ringfile_unpin(struct rp_ringfile *rf, struct rp_ringfile_pin *pin);

#endif
