/* Chunks: a run of events encoded compactly, compressed with LZ4 and
 * framed by a chunk header (chunkhdr.h).
 *
 * Inside a chunk, timestamps are delta-encoded and strings, stacks and
 * (pid, tid) pairs are interned, each defined on first use, so a chunk
 * decodes on its own.  The exact encoding is docs/ring-format.md. */
#ifndef RINGPROF_CHUNK_H
#define RINGPROF_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "chunkhdr.h"
#include "err.h"
#include "event.h"

struct rp_chunk_builder;

/* A builder for chunks of at most max_chunk_bytes (header + compressed
 * payload, at least 4096: -EINVAL otherwise), for the device device_id. */
RP_MUST_CHECK int rp_chunk_builder_new(uint32_t device_id, size_t max_chunk_bytes,
			 struct rp_chunk_builder **out);
void rp_chunk_builder_free(struct rp_chunk_builder *b);

/* Add one event (copied; names truncated to RP_NAME_MAX, names of kinds
 * without one ignored).  Returns 0, or -ENOSPC when the chunk is full:
 * seal it, then add the event again.  -EINVAL for an event that cannot be
 * encoded (unknown kind, too many frames, nkernel > nframes). */
RP_MUST_CHECK int rp_chunk_builder_add(struct rp_chunk_builder *b, const struct rp_event *ev);
/* Events added and not yet sealed. */
uint32_t rp_chunk_builder_count(const struct rp_chunk_builder *b);
/* Host-clock timestamp of the first event added since the last seal
 * (0 when there is none). */
uint64_t rp_chunk_builder_opened_ts(const struct rp_chunk_builder *b);
/* Raw bytes that can still be added before add returns -ENOSPC (the
 * encoded size of an event is its tag, fields and new definitions). */
size_t rp_chunk_builder_room(const struct rp_chunk_builder *b);

/* Seal the events added so far into out (capacity out_cap, which must be
 * at least max_chunk_bytes) as chunk number seq; *out_len gets its size.
 * Should the compressed events not fit, the longest prefix that fits is
 * sealed and the rest stay in the builder (check count afterwards).
 * -ENODATA when there is nothing to seal. */
RP_MUST_CHECK int rp_chunk_builder_seal(struct rp_chunk_builder *b, uint64_t seq,
			  int64_t wall_offset_ns, void *out, size_t out_cap,
			  size_t *out_len);

/* Reading: check and decompress one chunk, then walk its events. */
struct rp_chunk_reader;
RP_MUST_CHECK int rp_chunk_reader_new(struct rp_chunk_reader **out);
void rp_chunk_reader_free(struct rp_chunk_reader *r);
/* Check (rp_chunk_header_check) and decompress buf.  Copies what it
 * needs; buf may be reused afterwards.  -EBADMSG with a message when the
 * chunk is corrupt. */
RP_MUST_CHECK int rp_chunk_reader_load(struct rp_chunk_reader *r, const void *buf, size_t len,
			 struct rp_err *err);
/* How much of a chunk's payload rp_chunk_reader_device_info decodes: the
 * writer puts the ring's device_info event there (ring-format.md 3.5). */
#define RP_CHUNK_HEAD_BYTES 4096
/* Note the device_info events among the first RP_CHUNK_HEAD_BYTES of the
 * chunk's payload into id (rp_device_identity_note), decompressing no
 * more than that: cheap enough to run on every chunk a session copies.
 * Returns 1 when id changed, 0 when not, or rp_chunk_header_check's
 * error (-EBADMSG corrupt, -EPROTONOSUPPORT newer), -EBADMSG for a payload
 * that does not decompress.  Leaves the reader with nothing loaded. */
RP_MUST_CHECK int rp_chunk_reader_device_info(struct rp_chunk_reader *r, const void *buf, size_t len,
				struct rp_device_identity *id, struct rp_err *err);
/* The loaded chunk's header; NULL unless the last load succeeded. */
const struct rp_chunk_header *rp_chunk_reader_header(const struct rp_chunk_reader *r);
/* Next event: 1 and *ev filled (borrowed pointers valid until the next
 * load), 0 at the end (or when nothing is loaded), -EBADMSG with a
 * message when the encoding is corrupt (the remaining events of the chunk
 * are then unreadable). */
RP_MUST_CHECK int rp_chunk_reader_next(struct rp_chunk_reader *r, struct rp_event *ev,
			 struct rp_err *err);

#endif
