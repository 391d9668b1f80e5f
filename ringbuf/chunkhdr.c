#include "chunkhdr.h"

#include <endian.h>
#include <errno.h>
#include <isa-l/crc.h>
#include <string.h>

uint32_t rp_crc32c(const void *buf, size_t len)
{
	uint32_t crc = 0xffffffffu;
	const unsigned char *p = buf;
	/* crc32_iscsi takes an int length: feed huge buffers in pieces. */
	while (len > 0) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len;
		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= (size_t)n;
	}
	return ~crc;
}

static void put32(unsigned char *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

enum { OFF_CRC = 52 };

static void encode(const struct rp_chunk_header *h, unsigned char *o)
{
	put32(o + 0, h->magic);
	o[4] = h->version;
	o[5] = h->header_size;
	o[6] = h->codec;
	o[7] = h->flags;
	put32(o + 8, h->device_id);
	put32(o + 12, h->dropped);
	put64(o + 16, h->seq);
	put64(o + 24, h->first_ts);
	put64(o + 32, h->last_ts);
	put32(o + 40, h->event_count);
	put32(o + 44, h->raw_size);
	put32(o + RP_CHUNK_COMP_SIZE_OFFSET, h->comp_size);
	put32(o + OFF_CRC, h->crc32c);
	put64(o + 56, (uint64_t)h->wall_offset_ns);
}

static void decode(const unsigned char *o, struct rp_chunk_header *h)
{
	h->magic = get32(o + 0);
	h->version = o[4];
	h->header_size = o[5];
	h->codec = o[6];
	h->flags = o[7];
	h->device_id = get32(o + 8);
	h->dropped = get32(o + 12);
	h->seq = get64(o + 16);
	h->first_ts = get64(o + 24);
	h->last_ts = get64(o + 32);
	h->event_count = get32(o + 40);
	h->raw_size = get32(o + 44);
	h->comp_size = get32(o + RP_CHUNK_COMP_SIZE_OFFSET);
	h->crc32c = get32(o + OFF_CRC);
	h->wall_offset_ns = (int64_t)get64(o + 56);
}

static uint32_t chunk_crc(const unsigned char *hdr64, const void *payload, size_t plen)
{
	unsigned char tmp[RP_CHUNK_HEADER_SIZE];
	memcpy(tmp, hdr64, sizeof(tmp));
	put32(tmp + OFF_CRC, 0);
	uint32_t crc = 0xffffffffu;
	crc = crc32_iscsi(tmp, (int)sizeof(tmp), crc);
	if (plen)
		crc = crc32_iscsi((unsigned char *)payload, (int)plen, crc);
	return ~crc;
}

void rp_chunk_header_write(struct rp_chunk_header *hdr, void *out, const void *payload)
{
	hdr->crc32c = 0;
	encode(hdr, out);
	hdr->crc32c = chunk_crc(out, payload, hdr->comp_size);
	put32((unsigned char *)out + OFF_CRC, hdr->crc32c);
}

int rp_chunk_header_check(const void *buf, size_t len, struct rp_chunk_header *hdr,
			  struct rp_err *err)
{
	struct rp_chunk_header h;
	if (len < RP_CHUNK_HEADER_SIZE)
		return rp_err_set(err, -EBADMSG, "chunk truncated: %zu bytes, a header alone is %d",
				  len, RP_CHUNK_HEADER_SIZE);
	decode(buf, &h);
	if (h.magic != RP_CHUNK_MAGIC)
		return rp_err_set(err, -EBADMSG, "no chunk here (bad magic 0x%08x)", h.magic);
	if (h.version > RP_FORMAT_VERSION)
		return rp_err_set(err, -EPROTONOSUPPORT,
				  "chunk format version %u is newer than this build reads (%u): "
				  "upgrade ringprof", h.version, RP_FORMAT_VERSION);
	if (h.version == 0 || h.header_size != RP_CHUNK_HEADER_SIZE || h.codec != RP_CODEC_LZ4 ||
	    h.flags != 0)
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk header (version %u, header size %u, codec %u, flags %u)",
				  h.version, h.header_size, h.codec, h.flags);
	if (h.raw_size > RP_CHUNK_RAW_MAX || h.comp_size > len - RP_CHUNK_HEADER_SIZE ||
	    (h.raw_size == 0) != (h.event_count == 0) || (h.comp_size == 0 && h.raw_size))
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk seq %llu: impossible sizes (raw %u, compressed %u, %zu available)",
				  (unsigned long long)h.seq, h.raw_size, h.comp_size,
				  len - RP_CHUNK_HEADER_SIZE);
	if (h.first_ts > h.last_ts || h.event_count > h.raw_size)
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk seq %llu: %u events in %u bytes, time %llu..%llu",
				  (unsigned long long)h.seq, h.event_count, h.raw_size,
				  (unsigned long long)h.first_ts, (unsigned long long)h.last_ts);
	uint32_t crc = chunk_crc(buf, (const unsigned char *)buf + RP_CHUNK_HEADER_SIZE, h.comp_size);
	if (crc != h.crc32c)
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk seq %llu: CRC32C 0x%08x, header says 0x%08x",
				  (unsigned long long)h.seq, crc, h.crc32c);
	if (hdr)
		*hdr = h;
	return 0;
}
