/* The fixed 64-byte header in front of every sealed chunk, and its check.
 *
 * Little-endian on disk.  The CRC32C covers the header (with the crc field
 * zero) and the compressed payload, so a torn or bit-flipped chunk is
 * detected before anything is decompressed. */
#ifndef RINGPROF_CHUNKHDR_H
#define RINGPROF_CHUNKHDR_H

#include <stddef.h>
#include <stdint.h>

#include <lz4.h>

#include "err.h"

#define RP_CHUNK_MAGIC 0x4b435052u /* "RPCK" */
#define RP_FORMAT_VERSION 1
#define RP_CHUNK_HEADER_SIZE 64
/* Upper bound on an uncompressed chunk; larger sizes mark corruption. */
#define RP_CHUNK_RAW_MAX (16u << 20)
/* Upper bound on a whole chunk: header and LZ4's worst case of the largest payload. */
#define RP_CHUNK_MAX (RP_CHUNK_HEADER_SIZE + LZ4_COMPRESSBOUND(RP_CHUNK_RAW_MAX))

enum rp_chunk_codec {
	RP_CODEC_LZ4 = 1, /* LZ4 block format */
};

/* On-disk layout, offsets in bytes (all little-endian):
 *  0 magic u32 | 4 version u8 | 5 header_size u8 | 6 codec u8 | 7 flags u8
 *  8 device_id u32 | 12 dropped u32 | 16 seq u64 | 24 first_ts u64
 * 32 last_ts u64 | 40 event_count u32 | 44 raw_size u32 | 48 comp_size u32
 * 52 crc32c u32 | 56 wall_offset_ns i64 */
/* Where comp_size lies: a reader needs it to know how much of a chunk to
 * read before the chunk can be checked. */
#define RP_CHUNK_COMP_SIZE_OFFSET 48
struct rp_chunk_header {
	uint32_t magic;
	uint8_t version;
	uint8_t header_size;    /* RP_CHUNK_HEADER_SIZE */
	uint8_t codec;          /* enum rp_chunk_codec */
	uint8_t flags;          /* none defined yet; must be 0 */
	uint32_t device_id;
	uint32_t dropped;       /* producer drops recorded in this chunk */
	uint64_t seq;           /* per ring, from 0, never reused */
	uint64_t first_ts;      /* smallest event timestamp (host ns) */
	uint64_t last_ts;       /* largest event timestamp (host ns) */
	uint32_t event_count;
	uint32_t raw_size;      /* decompressed payload bytes */
	uint32_t comp_size;     /* payload bytes following the header */
	uint32_t crc32c;
	int64_t wall_offset_ns; /* CLOCK_REALTIME - host clock at sealing */
};
_Static_assert(sizeof(struct rp_chunk_header) == RP_CHUNK_HEADER_SIZE,
	       "chunk header must stay 64 bytes");

/* CRC32C (Castagnoli), standard init/xorout, via ISA-L. */
uint32_t rp_crc32c(const void *buf, size_t len);

/* Serialise hdr into out[64] little-endian, computing crc32c over it and
 * payload (comp_size bytes).  hdr->crc32c is set to the value written. */
void rp_chunk_header_write(struct rp_chunk_header *hdr, void *out,
			   const void *payload);

/* Parse and check a chunk at buf (len bytes available): magic, version,
 * sizes against len and limits, timestamps ordered, CRC.  On success fills
 * *hdr and returns 0; otherwise -EBADMSG (corrupt) or -EPROTONOSUPPORT
 * (newer version) with a message in err. */
RP_MUST_CHECK int rp_chunk_header_check(const void *buf, size_t len,
			  struct rp_chunk_header *hdr, struct rp_err *err);

#endif
