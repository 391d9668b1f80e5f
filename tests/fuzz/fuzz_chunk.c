/* Fuzz target for chunk reading: header check, LZ4, payload decoder.
 *
 * Each input is read three ways, so that mutations get past the CRC:
 *  1. as it is: the header check and CRC;
 *  2. with a valid header over it: the input's own header fields, made
 *     plausible (magic, version, sizes), with the CRC recomputed, so a
 *     mutated LZ4 payload reaches the decompressor and the decoder;
 *  3. with the bytes after the header taken as an uncompressed payload,
 *     compressed and framed here, so the varint decoder sees mutations
 *     directly.  Seeds named *.raw are in this form.
 * Whatever is accepted must obey the reader's promises (checked below). */
#include <endian.h>
#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct rp_chunk_reader *reader;
static volatile uint64_t sink; /* frames are read into it, for ASan to check */

static void check(int ok)
{
	if (!ok)
		abort();
}

/* The head-only read sessions use: a chunk the full read takes gives an
 * identity of a kind this build names, one it refuses is refused here. */
static void device_info(const void *buf, size_t len)
{
	struct rp_device_identity id = { 0 };
	int rc = rp_chunk_reader_device_info(reader, buf, len, &id, NULL);
	check(rc == 0 || rc == 1 || rc == -EBADMSG || rc == -EPROTONOSUPPORT);
	check(rc != 1 || (id.kind >= RP_DEVICE_HOST && id.kind <= RP_DEVICE_OTHER &&
			  strlen(id.uid) <= RP_DEVICE_UID_MAX));
	check(rp_chunk_reader_header(reader) == NULL);
}

static void walk(const void *buf, size_t len)
{
	struct rp_err err;
	device_info(buf, len);
	if (rp_chunk_reader_load(reader, buf, len, &err) < 0)
		return;
	const struct rp_chunk_header *h = rp_chunk_reader_header(reader);
	struct rp_event ev;
	uint32_t n = 0;
	int rc;
	while ((rc = rp_chunk_reader_next(reader, &ev, &err)) == 1) {
		n++;
		check(ev.kind >= 1 && ev.kind <= RP_EV_KIND_MAX);
		check(ev.ts >= h->first_ts && ev.ts <= h->last_ts);
		check(!ev.name || strlen(ev.name) <= RP_NAME_MAX);
		if (ev.kind == RP_EV_CPU_SAMPLE) {
			check(ev.u.sample.nframes <= RP_STACK_MAX &&
			      ev.u.sample.nkernel <= ev.u.sample.nframes);
			for (unsigned k = 0; k < ev.u.sample.nframes; k++)
				sink += ev.u.sample.frames[k];
		}
	}
	check(rc == 0 ? n == h->event_count : rc == -EBADMSG);
	check(rp_chunk_reader_next(reader, &ev, &err) == (rc == 0 ? 0 : -EBADMSG));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

/* The input's header fields, with those the check would reject outright
 * made valid; comp_size and raw_size are left to the caller. */
static struct rp_chunk_header plausible_header(const uint8_t *in)
{
	struct rp_chunk_header h = {
		.magic = RP_CHUNK_MAGIC,
		.version = RP_FORMAT_VERSION,
		.header_size = RP_CHUNK_HEADER_SIZE,
		.codec = RP_CODEC_LZ4,
		.device_id = get32(in + 8),
		.dropped = get32(in + 12),
		.seq = get64(in + 16),
		.first_ts = get64(in + 24),
		.last_ts = get64(in + 32),
		.event_count = get32(in + 40),
		.raw_size = get32(in + 44),
		.wall_offset_ns = (int64_t)get64(in + 56),
	};
	if (h.first_ts > h.last_ts) {
		uint64_t t = h.first_ts;
		h.first_ts = h.last_ts;
		h.last_ts = t;
	}
	return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!reader && rp_chunk_reader_new(&reader) < 0)
		abort();
	walk(data, size);
	if (size < RP_CHUNK_HEADER_SIZE || size - RP_CHUNK_HEADER_SIZE > RP_CHUNK_RAW_MAX)
		return 0;
	size_t payload = size - RP_CHUNK_HEADER_SIZE;

	size_t cap = RP_CHUNK_HEADER_SIZE + (size_t)LZ4_compressBound((int)payload);
	uint8_t *buf = malloc(cap > size ? cap : size);
	check(buf != NULL);

	struct rp_chunk_header h = plausible_header(data);
	if (h.raw_size > RP_CHUNK_RAW_MAX)
		h.raw_size %= RP_CHUNK_RAW_MAX + 1;
	h.comp_size = (uint32_t)payload;
	memcpy(buf + RP_CHUNK_HEADER_SIZE, data + RP_CHUNK_HEADER_SIZE, payload);
	rp_chunk_header_write(&h, buf, buf + RP_CHUNK_HEADER_SIZE);
	walk(buf, size);

	h = plausible_header(data);
	int c = LZ4_compress_default((const char *)data + RP_CHUNK_HEADER_SIZE,
				     (char *)buf + RP_CHUNK_HEADER_SIZE, (int)payload,
				     (int)(cap - RP_CHUNK_HEADER_SIZE));
	check(c > 0 || payload == 0);
	h.raw_size = (uint32_t)payload;
	h.comp_size = (uint32_t)c;
	rp_chunk_header_write(&h, buf, buf + RP_CHUNK_HEADER_SIZE);
	walk(buf, RP_CHUNK_HEADER_SIZE + (size_t)c);
	free(buf);
	return 0;
}
