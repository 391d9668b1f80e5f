/* Device ring files (ringfile.h): format version 2, and the reader of
 * version 1.
 *
 * Entries (a 32-byte frame, then one chunk) are packed back to back at
 * 64-byte boundaries and addressed by their position: bytes written since
 * the file was created, never wrapping; position p lives at data offset
 * p % data_size.  The index lists the entries held in position (and seq)
 * order.  Before a write the writer retires every entry the write will
 * cover (pins get it first), so a reader only ever looks for entries whose
 * write has completed, and the frame (position, salted CRC) plus the chunk
 * CRC catch the ones overwritten after it looked.  Writes are whole pages
 * (O_DIRECT): the page an entry starts in is written again with the bytes
 * of the entry before it, which the writer keeps, but never while that
 * page's previous write is in flight (see place). */
#include "ringfile.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define ALIGN 64u  /* entries start at multiples of this */
#define FRAME 32u  /* the entry frame in front of each chunk */
#define ENTRY_MAGIC 0x45525052u /* "RPRE" */
#define DEFAULT_MAX_CHUNK (128u << 10)
/* A chunk never needs more: RP_CHUNK_RAW_MAX compressed, plus slack. */
#define MAX_MAX_CHUNK (64u << 20)
#define DEFAULT_QUEUE_DEPTH 16u
#define FILE_VERSION 2u
#define CLOCK_ID_MONOTONIC 1u
#define SCAN_BLOCK (1u << 20)
#define CONVERT_SUFFIX ".v2new"

/* File header layout (docs/ring-format.md).  Version 1 has slot_size at
 * 16 (read as max_chunk), slot_count at 20 and its CRC at 104. */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_HEADER_SIZE = 12, H_MAX_CHUNK = 16, H_ALIGN = 20,
	H_DEVICE_ID = 24, H_CLOCK_ID = 28, H_CREATED = 32, H_DEVICE = 40, H_DATA_SIZE = 104,
	H_SALT = 112, H_CRC = 120, H_END = 124, H1_SLOT_COUNT = 20, H1_CRC = 104,
};
/* Entry frame layout. */
enum { F_MAGIC = 0, F_LEN = 4, F_POS = 8, F_SEQ = 16, F_RESERVED = 24, F_CRC = 28 };
/* Chunk header fields read before the chunk is checked (version 1). */
enum { C_SEQ = 16, C_COMP_SIZE = 48 };

enum ent_state { E_WRITING, E_DONE, E_FAILED };

/* An index entry: a chunk held, or being written. */
struct ent {
	uint64_t seq, pos, first_ts, last_ts;
	uint64_t off; /* file offset of the entry: its frame, or (version 1) its chunk */
	uint32_t len; /* chunk bytes, header + payload */
	uint32_t event_count, raw_size, dropped;
	enum ent_state state;
};

struct wbuf {
	unsigned char *mem;  /* buf_size bytes, 4096-aligned */
	uint64_t seq;
	uint64_t start, end; /* positions it writes: whole pages */
	uint32_t done;       /* bytes written so far */
	bool busy;           /* in flight */
	bool direct;         /* submitted while the write fd was O_DIRECT */
};

struct rp_ringfile_pin {
	struct rp_ringfile_pin *next;
	uint64_t from, to;
	rp_ringfile_save_fn save;
	void *ctx;
};

struct rp_ringfile {
	char *path;
	int fd;  /* buffered: header, recovery, reads, pin saves */
	int wfd; /* writes: a second, O_DIRECT descriptor, or fd */
	bool readonly, direct, geometry_kept;
	uint32_t version;  /* as found: 1 (read-only) or 2 */
	uint32_t max_chunk, device_id;
	uint32_t v1_slots; /* version 1: slots of max_chunk bytes */
	uint32_t slot_count; /* largest entries the data area holds at least */
	char device[RP_DEVICE_NAME_MAX + 1];
	uint64_t data_size, salt, file_size, max_age_ns;
	uint64_t converted_chunks;
	bool converted;

	/* Writer thread only. */
	struct io_uring ring;
	struct wbuf *bufs;
	unsigned *freelist, nfree, qd;
	size_t buf_size;
	unsigned char *pinbuf;        /* FRAME + max_chunk */
	uint64_t wpos;                /* position of the next entry */
	unsigned char tailpage[PAGE]; /* the page wpos lies in, as written */
	struct rp_err werr;           /* first failed write not yet reported */
	uint64_t werr_more;

	_Atomic uint64_t next_seq;
	_Atomic uint64_t overwritten_in_read;
	uint64_t recovered_chunks, skipped_corrupt; /* set at open */

	pthread_mutex_t lock; /* the index and its sums, written_chunks, write_errors */
	struct ent *q;        /* the index: a ring of qcap (a power of two) */
	size_t qcap, qhead, qn;
	uint64_t held_chunks, held_events, held_bytes, held_raw, held_dropped;
	uint64_t written_chunks, write_errors;

	/* Held while save functions run, so unpin waits for them. */
	pthread_mutex_t pin_lock;
	struct rp_ringfile_pin *pins;
};

struct it_item {
	uint64_t seq, off;
	uint32_t len;
};

struct rp_ringfile_iter {
	struct rp_ringfile *rf;
	struct it_item *items;
	size_t n, pos;
	unsigned char *buf;
};

static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }
static void put32(unsigned char *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

static const char *human(uint64_t n, char buf[32])
{
	if (n >= (1ull << 30))
		snprintf(buf, 32, "%.1f GiB", (double)n / (1ull << 30));
	else if (n >= (1ull << 20))
		snprintf(buf, 32, "%.1f MiB", (double)n / (1ull << 20));
	else
		snprintf(buf, 32, "%llu KiB", (unsigned long long)(n >> 10));
	return buf;
}

static bool valid_device_name(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	if (n == 0 || n > RP_DEVICE_NAME_MAX || n == max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* pread/pwrite until done, EOF or error: bytes moved or -errno. */
static ssize_t pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static ssize_t pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t put = 0;
	while (put < len) {
		ssize_t n = pwrite(fd, (const char *)buf + put, len - put, (off_t)(off + put));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		put += (size_t)n;
	}
	return (ssize_t)put;
}

static int open_error(struct rp_err *err, int e, const char *path, bool write)
{
	switch (e) {
	case EISDIR:
		return rp_err_set(err, -EISDIR, "ring file %s is a directory: give the path of a file "
				  "inside the state directory", path);
	case EACCES:
	case EPERM:
		return rp_err_set(err, -e, "ring file %s: permission denied: %s", path,
				  write ? "make the file and its directory writable by this user, "
					  "or choose another state directory"
					: "make the file readable by this user");
	case ENOENT:
		if (write)
			return rp_err_set(err, -ENOENT, "ring file %s: its directory does not exist: "
					  "create the state directory first", path);
		return rp_err_set(err, -ENOENT, "ring file %s does not exist: check the state "
				  "directory and the device name", path);
	case ELOOP:
		return rp_err_set(err, -ELOOP, "ring file %s is a symbolic link: ringprofd follows "
				  "no links in its state directory; remove it", path);
	case EROFS:
		return rp_err_set(err, -EROFS, "ring file %s is on a read-only file system: choose "
				  "a writable state directory", path);
	default:
		return rp_err_set(err, -e, "ring file %s: cannot open: %s", path, strerror(e));
	}
}

static int not_ring_file(struct rp_err *err, const char *path, const char *why)
{
	return rp_err_set(err, -EINVAL, "%s is not a ringprof ring file (%s): move it away or "
			  "choose another state directory", path, why);
}

static struct rp_ringfile *rf_alloc(const char *path)
{
	struct rp_ringfile *rf = calloc(1, sizeof(*rf));
	if (!rf)
		return NULL;
	rf->path = strdup(path);
	if (!rf->path) {
		free(rf);
		return NULL;
	}
	rf->fd = rf->wfd = -1;
	pthread_mutex_init(&rf->lock, NULL);
	pthread_mutex_init(&rf->pin_lock, NULL);
	return rf;
}

static void rf_free(struct rp_ringfile *rf)
{
	if (rf->bufs) {
		io_uring_queue_exit(&rf->ring);
		for (unsigned i = 0; i < rf->qd; i++)
			free(rf->bufs[i].mem);
		free(rf->bufs);
	}
	if (rf->wfd >= 0 && rf->wfd != rf->fd)
		close(rf->wfd);
	if (rf->fd >= 0)
		close(rf->fd);
	while (rf->pins) {
		struct rp_ringfile_pin *p = rf->pins;
		rf->pins = p->next;
		free(p);
	}
	pthread_mutex_destroy(&rf->lock);
	pthread_mutex_destroy(&rf->pin_lock);
	free(rf->freelist);
	free(rf->pinbuf);
	free(rf->q);
	free(rf->path);
	free(rf);
}

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

/* Bytes an entry with a chunk of len bytes takes in the data area. */
static uint64_t entry_span(uint64_t len) { return round_up(FRAME + len, ALIGN); }

/* Entries of the largest chunk, each on pages of its own, the data area
 * holds at least. */
static uint32_t largest_entries(const struct rp_ringfile *rf)
{
	return (uint32_t)(rf->data_size / (round_up(entry_span(rf->max_chunk), PAGE) + PAGE));
}

static uint64_t pos_off(const struct rp_ringfile *rf, uint64_t pos)
{
	return RP_RINGFILE_HEADER_SIZE + pos % rf->data_size;
}

/* ---- the index ---- */

static struct ent *q_at(const struct rp_ringfile *rf, size_t i)
{
	return &rf->q[(rf->qhead + i) & (rf->qcap - 1)];
}

static void held_add(struct rp_ringfile *rf, const struct ent *e, int sign)
{
	rf->held_chunks += (uint64_t)sign;
	rf->held_events += (uint64_t)sign * e->event_count;
	rf->held_bytes += (uint64_t)sign * ((rf->version >= 2 ? FRAME : 0) + e->len);
	rf->held_raw += (uint64_t)sign * e->raw_size;
	rf->held_dropped += (uint64_t)sign * e->dropped;
}

/* Append e (seq above every entry's); under lock. */
static int q_push(struct rp_ringfile *rf, const struct ent *e)
{
	if (rf->qn == rf->qcap) {
		size_t cap = rf->qcap ? rf->qcap * 2 : 64;
		struct ent *q = malloc(cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		for (size_t i = 0; i < rf->qn; i++)
			q[i] = *q_at(rf, i);
		free(rf->q);
		rf->q = q;
		rf->qcap = cap;
		rf->qhead = 0;
	}
	*q_at(rf, rf->qn++) = *e;
	if (e->state == E_DONE)
		held_add(rf, e, 1);
	return 0;
}

/* Drop the oldest entry; under lock. */
static void q_pop(struct rp_ringfile *rf)
{
	if (q_at(rf, 0)->state == E_DONE)
		held_add(rf, q_at(rf, 0), -1);
	rf->qhead = (rf->qhead + 1) & (rf->qcap - 1);
	rf->qn--;
}

/* The entry of seq, or NULL; under lock or on the writer thread. */
static struct ent *q_find(const struct rp_ringfile *rf, uint64_t seq)
{
	size_t lo = 0, hi = rf->qn;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (q_at(rf, mid)->seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < rf->qn && q_at(rf, lo)->seq == seq ? q_at(rf, lo) : NULL;
}

static struct ent entry_of(const struct rp_chunk_header *h, uint64_t pos, uint64_t off,
			   enum ent_state state)
{
	return (struct ent){ .seq = h->seq, .pos = pos, .off = off, .first_ts = h->first_ts,
			     .last_ts = h->last_ts, .event_count = h->event_count,
			     .len = RP_CHUNK_HEADER_SIZE + h->comp_size, .raw_size = h->raw_size,
			     .dropped = h->dropped, .state = state };
}

/* ---- entries on disk ---- */

static uint32_t frame_crc(uint64_t salt, const unsigned char *f)
{
	unsigned char b[8 + F_CRC];
	put64(b, salt);
	memcpy(b + 8, f, F_CRC);
	return rp_crc32c(b, sizeof(b));
}

static void frame_write(const struct rp_ringfile *rf, unsigned char *f, uint32_t len,
			uint64_t pos, uint64_t seq)
{
	memset(f, 0, FRAME);
	put32(f + F_MAGIC, ENTRY_MAGIC);
	put32(f + F_LEN, len);
	put64(f + F_POS, pos);
	put64(f + F_SEQ, seq);
	put32(f + F_CRC, frame_crc(rf->salt, f));
}

/* The frame f found at data offset doff: true with *len, *pos, *seq when
 * it is one of this file's (salted CRC), lies where its position says,
 * and its entry ends inside the data area. */
static bool frame_read(const struct rp_ringfile *rf, const unsigned char *f, uint64_t doff,
		       uint32_t *len, uint64_t *pos, uint64_t *seq)
{
	if (get32(f + F_MAGIC) != ENTRY_MAGIC || get32(f + F_RESERVED) != 0 ||
	    frame_crc(rf->salt, f) != get32(f + F_CRC))
		return false;
	*len = get32(f + F_LEN);
	*pos = get64(f + F_POS);
	*seq = get64(f + F_SEQ);
	return *len >= RP_CHUNK_HEADER_SIZE && *len <= rf->max_chunk &&
	       *pos % rf->data_size == doff && doff + entry_span(*len) <= rf->data_size;
}

/* Read the entry of chunk seq (len bytes) at file offset off into buf
 * (FRAME + max_chunk bytes) and check it: 1 with *h when it still is that
 * chunk, 0 when not (overwritten, torn, corrupt), a negative errno when
 * reading fails.  The chunk is left at buf + FRAME. */
static int read_entry(const struct rp_ringfile *rf, uint64_t seq, uint64_t off, uint32_t len,
		      unsigned char *buf, struct rp_chunk_header *h)
{
	size_t frame = rf->version >= 2 ? FRAME : 0;
	ssize_t n = pread_full(rf->fd, buf + FRAME - frame, frame + len, off);
	if (n < 0)
		return (int)n;
	if ((size_t)n != frame + len)
		return 0;
	uint32_t flen;
	uint64_t fpos, fseq;
	if (frame && (!frame_read(rf, buf, (off - RP_RINGFILE_HEADER_SIZE) % rf->data_size,
				  &flen, &fpos, &fseq) ||
		      flen != len || fseq != seq))
		return 0;
	return rp_chunk_header_check(buf + FRAME, len, h, NULL) == 0 && h->seq == seq &&
	       h->device_id == rf->device_id && len == RP_CHUNK_HEADER_SIZE + h->comp_size;
}

/* Read and check the file header into rf (version, geometry, device). */
static int load_header(struct rp_ringfile *rf, struct rp_err *err)
{
	unsigned char h[H_END];
	ssize_t n = pread_full(rf->fd, h, sizeof(h), 0);
	if (n < 0)
		return rp_err_set(err, (int)n, "ring file %s: cannot read its header: %s", rf->path,
				  strerror((int)-n));
	if (n < 8 || memcmp(h + H_MAGIC, RP_RINGFILE_MAGIC, 8) != 0)
		return not_ring_file(err, rf->path, "bad magic");
	uint32_t version = n >= H_HEADER_SIZE ? get32(h + H_VERSION) : 0;
	/* Before the CRC: a newer format may checksum its header differently. */
	if (version > FILE_VERSION)
		return rp_err_set(err, -EPROTONOSUPPORT, "ring file %s has format version %u, newer "
				  "than this build reads (%u): upgrade ringprof or move the file away",
				  rf->path, version, FILE_VERSION);
	size_t crc_at = version == 1 ? H1_CRC : H_CRC;
	if ((size_t)n < crc_at + 4)
		return not_ring_file(err, rf->path, "truncated header");
	if (rp_crc32c(h, crc_at) != get32(h + crc_at))
		return not_ring_file(err, rf->path, "bad header checksum");
	uint32_t max_chunk = get32(h + H_MAX_CHUNK);
	char device[RP_DEVICE_NAME_MAX + 1];
	memcpy(device, h + H_DEVICE, sizeof(device));
	uint64_t data_size = version == 1 ? (uint64_t)get32(h + H1_SLOT_COUNT) * max_chunk
					  : get64(h + H_DATA_SIZE);
	if (version == 0 || get32(h + H_HEADER_SIZE) != RP_RINGFILE_HEADER_SIZE ||
	    max_chunk == 0 || max_chunk % PAGE || max_chunk > MAX_MAX_CHUNK ||
	    data_size < 2ull * max_chunk || data_size % PAGE ||
	    (version == 2 && get32(h + H_ALIGN) != ALIGN) ||
	    !valid_device_name(device, sizeof(device)))
		return not_ring_file(err, rf->path, "impossible header fields");
	uint32_t clock_id = get32(h + H_CLOCK_ID);
	if (clock_id != CLOCK_ID_MONOTONIC)
		return rp_err_set(err, -EPROTONOSUPPORT, "ring file %s uses clock id %u, which this "
				  "build does not know: upgrade ringprof", rf->path, clock_id);
	rf->version = version;
	rf->max_chunk = max_chunk;
	rf->data_size = data_size;
	rf->v1_slots = version == 1 ? get32(h + H1_SLOT_COUNT) : 0;
	rf->slot_count = version == 1 ? rf->v1_slots : largest_entries(rf);
	rf->salt = version == 1 ? 0 : get64(h + H_SALT);
	rf->device_id = get32(h + H_DEVICE_ID);
	memcpy(rf->device, device, sizeof(device));
	return 0;
}

static int write_header(struct rp_ringfile *rf, struct rp_err *err)
{
	unsigned char h[RP_RINGFILE_HEADER_SIZE] = { 0 };
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	memcpy(h + H_MAGIC, RP_RINGFILE_MAGIC, 8);
	put32(h + H_VERSION, FILE_VERSION);
	put32(h + H_HEADER_SIZE, RP_RINGFILE_HEADER_SIZE);
	put32(h + H_MAX_CHUNK, rf->max_chunk);
	put32(h + H_ALIGN, ALIGN);
	put32(h + H_DEVICE_ID, rf->device_id);
	put32(h + H_CLOCK_ID, CLOCK_ID_MONOTONIC);
	put64(h + H_CREATED, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
	memcpy(h + H_DEVICE, rf->device, strlen(rf->device));
	put64(h + H_DATA_SIZE, rf->data_size);
	put64(h + H_SALT, rf->salt);
	put32(h + H_CRC, rp_crc32c(h, H_CRC));
	ssize_t n = pwrite_full(rf->fd, h, sizeof(h), 0);
	if (n < 0 || fdatasync(rf->fd) < 0)
		return rp_err_set(err, n < 0 ? (int)n : -errno, "ring file %s: cannot write its "
				  "header: %s", rf->path, strerror(n < 0 ? (int)-n : errno));
	return 0;
}

/* Allocate the whole file; data already in it stays. */
static int preallocate(struct rp_ringfile *rf, uint64_t size, struct rp_err *err)
{
	int e = posix_fallocate(rf->fd, 0, (off_t)size);
	if (e == 0) {
		rf->file_size = size;
		return 0;
	}
	char want[32], avail[32];
	struct statvfs vfs;
	if ((e == ENOSPC || e == EDQUOT) && fstatvfs(rf->fd, &vfs) == 0)
		return rp_err_set(err, -ENOSPC, "ring file %s: not enough disk space for %s (%s "
				  "free): lower the ring budget or free space", rf->path,
				  human(size, want), human((uint64_t)vfs.f_bavail * vfs.f_frsize, avail));
	return rp_err_set(err, -e, "ring file %s: cannot allocate %s: %s", rf->path,
			  human(size, want), strerror(e));
}


/* ---- recovery ---- */

struct found {
	struct ent *v;
	size_t n, cap;
};

static int found_add(struct found *f, const struct ent *e)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 64;
		struct ent *v = realloc(f->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = *e;
	return 0;
}

static int by_pos(const void *a, const void *b)
{
	uint64_t x = ((const struct ent *)a)->pos, y = ((const struct ent *)b)->pos;
	return (x > y) - (x < y);
}

/* Version 1: slot i holds the chunk whose seq % slots == i; its position
 * is its seq (the order, and the lap rule: a chunk a whole lap older
 * than the newest is left over from a failed overwrite). */
static int scan_v1(struct rp_ringfile *rf, unsigned char *buf, struct found *f)
{
	for (uint32_t i = 0; i < rf->v1_slots; i++) {
		uint64_t off = RP_RINGFILE_HEADER_SIZE + (uint64_t)i * rf->max_chunk;
		if (off + RP_CHUNK_HEADER_SIZE > rf->file_size)
			break;
		ssize_t n = pread_full(rf->fd, buf + FRAME, RP_CHUNK_HEADER_SIZE, off);
		if (n < 0)
			return (int)n;
		if (get32(buf + FRAME) != RP_CHUNK_MAGIC)
			continue;
		uint64_t len = RP_CHUNK_HEADER_SIZE + (uint64_t)get32(buf + FRAME + C_COMP_SIZE);
		struct rp_chunk_header h;
		int r = len <= rf->max_chunk
			? read_entry(rf, get64(buf + FRAME + C_SEQ), off, (uint32_t)len, buf, &h) : 0;
		if (r < 0)
			return r;
		if (r == 0 || h.seq % rf->v1_slots != i) {
			rf->skipped_corrupt++;
			continue;
		}
		struct ent e = entry_of(&h, h.seq, off, E_DONE);
		if ((r = found_add(f, &e)) < 0)
			return r;
	}
	return 0;
}

/* Version 2: every 64-byte boundary of the data area may start a frame. */
static int scan_v2(struct rp_ringfile *rf, unsigned char *buf, struct found *f)
{
	unsigned char *blk = malloc(SCAN_BLOCK);
	if (!blk)
		return -ENOMEM;
	uint64_t present = rf->file_size > RP_RINGFILE_HEADER_SIZE
		? rf->file_size - RP_RINGFILE_HEADER_SIZE : 0;
	uint64_t limit = present < rf->data_size ? present : rf->data_size;
	uint64_t bo = 0, bn = 0;
	int r = 0;
	for (uint64_t o = 0; o + FRAME <= limit;) {
		if (o < bo || o + FRAME > bo + bn) {
			uint64_t want = limit - o < SCAN_BLOCK ? limit - o : SCAN_BLOCK;
			ssize_t n = pread_full(rf->fd, blk, (size_t)want, RP_RINGFILE_HEADER_SIZE + o);
			if (n < 0) {
				r = (int)n;
				break;
			}
			bo = o;
			bn = (uint64_t)n;
			if (bn < FRAME)
				break;
		}
		const unsigned char *fr = blk + (o - bo);
		uint32_t len;
		uint64_t pos, seq;
		if (get32(fr + F_MAGIC) != ENTRY_MAGIC) {
			o += ALIGN;
			continue;
		}
		struct rp_chunk_header h;
		r = frame_read(rf, fr, o, &len, &pos, &seq)
			? read_entry(rf, seq, RP_RINGFILE_HEADER_SIZE + o, len, buf, &h) : 0;
		if (r < 0)
			break;
		if (r == 0) {
			rf->skipped_corrupt++;
			o += ALIGN;
			continue;
		}
		struct ent e = entry_of(&h, pos, RP_RINGFILE_HEADER_SIZE + o, E_DONE);
		if ((r = found_add(f, &e)) < 0)
			break;
		/* What lies inside a good entry was overwritten by it. */
		o += entry_span(len);
	}
	free(blk);
	return r;
}

/* Rebuild the index from the entries in the file (a new one has none):
 * the newest entry and those less than a lap older whose writes did not
 * cover it, in position order with seqs rising; older ones belong to an
 * earlier lap, however intact. */
static int recover(struct rp_ringfile *rf, bool scan, struct rp_err *err)
{
	struct found f = { 0 };
	unsigned char *buf = malloc(FRAME + (size_t)rf->max_chunk);
	int r = buf ? 0 : -ENOMEM;
	if (r == 0 && scan)
		r = rf->version == 1 ? scan_v1(rf, buf, &f) : scan_v2(rf, buf, &f);
	free(buf);
	if (r < 0) {
		free(f.v);
		return rp_err_set(err, r, "ring file %s: cannot recover its chunks: %s", rf->path,
				  strerror(-r));
	}
	if (f.n)
		qsort(f.v, f.n, sizeof(*f.v), by_pos);
	const struct ent *newest = f.n ? &f.v[f.n - 1] : NULL;
	uint64_t reach = !newest ? 0 : rf->version == 1 ? newest->pos + 1
			 : round_up(newest->pos + FRAME + newest->len, PAGE);
	uint64_t lap = rf->version == 1 ? rf->v1_slots : rf->data_size;
	uint64_t oldest_ts = newest && rf->max_age_ns && newest->last_ts > rf->max_age_ns
		? newest->last_ts - rf->max_age_ns : 0;
	size_t keep_from = f.n;
	/* From the newest back: positions within a lap, seqs falling. */
	for (size_t i = f.n; i-- > 0;) {
		if (f.v[i].pos + lap < reach ||
		    (keep_from < f.n && f.v[i].seq >= f.v[keep_from].seq))
			break;
		keep_from = i;
	}
	rf->skipped_corrupt += keep_from;
	for (size_t i = keep_from; i < f.n && r == 0; i++) {
		if (f.v[i].last_ts < oldest_ts)
			continue;
		r = q_push(rf, &f.v[i]);
		rf->recovered_chunks += r == 0;
	}
	if (newest) {
		atomic_store(&rf->next_seq, newest->seq + 1);
		rf->wpos = newest->pos + entry_span(newest->len);
	}
	free(f.v);
	if (r < 0)
		return rp_err_set(err, r, "ring file %s: out of memory for its index", rf->path);
	return 0;
}

int rp_ringfile_open_readonly(const char *path, struct rp_ringfile **out, struct rp_err *err)
{
	struct rp_ringfile *rf = rf_alloc(path);
	if (!rf)
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory", path);
	rf->readonly = true;
	int r;
	struct stat st;
	rf->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (rf->fd < 0) {
		r = open_error(err, errno, path, false);
		goto fail;
	}
	if (fstat(rf->fd, &st) < 0) {
		r = open_error(err, errno, path, false);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		r = S_ISDIR(st.st_mode) ? open_error(err, EISDIR, path, false)
					: not_ring_file(err, path, "not a regular file");
		goto fail;
	}
	if ((r = load_header(rf, err)) < 0)
		goto fail;
	rf->file_size = (uint64_t)st.st_size;
	if ((r = recover(rf, true, err)) < 0)
		goto fail;
	*out = rf;
	return 0;
fail:
	rf_free(rf);
	return r;
}

/* Check opts and derive the geometry a new file would get. */
static int check_opts(const char *path, const struct rp_ringfile_opts *o, uint32_t *max_chunk,
		      uint64_t *data_size, struct rp_err *err)
{
	if (!o->device || !valid_device_name(o->device, RP_DEVICE_NAME_MAX + 2))
		return rp_err_set(err, -EINVAL, "ring file %s: invalid device name \"%.80s\": use 1 "
				  "to %d characters from A-Z a-z 0-9 _ . -", path,
				  o->device ? o->device : "(null)", RP_DEVICE_NAME_MAX);
	*max_chunk = o->slot_size ? o->slot_size : DEFAULT_MAX_CHUNK;
	if (*max_chunk % PAGE || *max_chunk > MAX_MAX_CHUNK)
		return rp_err_set(err, -EINVAL, "ring file %s: maximum chunk size (slot size) %u is "
				  "not a multiple of 4096 up to %u: pick e.g. 131072", path,
				  *max_chunk, MAX_MAX_CHUNK);
	uint64_t min = RP_RINGFILE_HEADER_SIZE + 2ull * *max_chunk;
	char a[32], b[32];
	if (o->budget_bytes < min)
		return rp_err_set(err, -EINVAL, "ring file %s: a budget of %s is too small for two "
				  "chunks of %s: raise the ring budget to at least %llu bytes", path,
				  human(o->budget_bytes, a), human(*max_chunk, b),
				  (unsigned long long)min);
	*data_size = (o->budget_bytes - RP_RINGFILE_HEADER_SIZE) / PAGE * PAGE;
	return 0;
}

/* Open (or create) the file and lock it against a second writer. */
static int open_rw(struct rp_ringfile *rf, bool *created, struct rp_err *err)
{
	/* Never through a link planted in the state directory, and never
	 * blocked by a FIFO: what is not a regular file is refused. */
	rf->fd = open(rf->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		      0640);
	*created = rf->fd >= 0;
	if (rf->fd < 0 && errno == EEXIST)
		rf->fd = open(rf->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (rf->fd < 0)
		return open_error(err, errno, rf->path, true);
	if (flock(rf->fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(rf->fd);
		rf->fd = -1;
		if (e == EWOULDBLOCK)
			return rp_err_set(err, -EBUSY, "ring file %s is already open for writing "
					  "(another ringprof process?): stop it or choose another "
					  "state directory", rf->path);
		return rp_err_set(err, -e, "ring file %s: cannot lock it: %s", rf->path, strerror(e));
	}
	return 0;
}

/* Writes go through a second descriptor opened O_DIRECT when the file
 * system allows it; reads stay buffered on fd. */
static int open_direct(struct rp_ringfile *rf, struct rp_err *err)
{
	int fd = open(rf->path, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EINVAL)
		return 0;
	if (fd < 0)
		return open_error(err, errno, rf->path, true);
	struct stat a, b;
	if (fstat(fd, &a) < 0 || fstat(rf->fd, &b) < 0 || a.st_dev != b.st_dev ||
	    a.st_ino != b.st_ino) {
		close(fd);
		return rp_err_set(err, -ESTALE, "ring file %s was replaced while being opened: "
				  "make sure only one ringprof uses this state directory", rf->path);
	}
	rf->wfd = fd;
	rf->direct = true;
	return 0;
}

static int setup_writer(struct rp_ringfile *rf, unsigned queue_depth, struct rp_err *err)
{
	/* Fewer writes in flight than the largest entries the ring holds: an
	 * entry's write has always completed before the entry is overwritten
	 * (and pin saves read it). */
	rf->slot_count = largest_entries(rf);
	unsigned qd = queue_depth ? queue_depth : DEFAULT_QUEUE_DEPTH;
	if (qd + 1 > rf->slot_count)
		qd = rf->slot_count > 1 ? rf->slot_count - 1 : 1;
	if (rf->slot_count < qd + 1)
		rf->slot_count = qd + 1;
	int r = io_uring_queue_init(qd, &rf->ring, 0);
	if (r < 0)
		return rp_err_set(err, r, "ring file %s: io_uring is not available (%s): enable it "
				  "(sysctl kernel.io_uring_disabled=0) or allow it in the "
				  "container's seccomp profile", rf->path, strerror(-r));
	rf->bufs = calloc(qd, sizeof(*rf->bufs));
	if (!rf->bufs) {
		io_uring_queue_exit(&rf->ring);
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory", rf->path);
	}
	rf->qd = qd;
	/* An entry, after the part of its first page written before. */
	rf->buf_size = PAGE + round_up(entry_span(rf->max_chunk), PAGE);
	rf->freelist = calloc(qd, sizeof(*rf->freelist));
	rf->pinbuf = malloc(FRAME + (size_t)rf->max_chunk);
	bool ok = rf->freelist && rf->pinbuf;
	for (unsigned i = 0; i < qd && ok; i++) {
		void *p;
		ok = posix_memalign(&p, PAGE, rf->buf_size) == 0;
		rf->bufs[i].mem = ok ? p : NULL;
		if (ok)
			rf->freelist[rf->nfree++] = i;
	}
	char a[32];
	if (!ok)
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory for %u write buffers of "
				  "%s: lower the queue depth", rf->path, qd, human(rf->buf_size, a));
	/* The part of wpos's page written before is rewritten with the next
	 * entry. */
	if (rf->wpos % PAGE) {
		ssize_t n = pread_full(rf->fd, rf->tailpage, PAGE, pos_off(rf, rf->wpos / PAGE * PAGE));
		if (n < 0)
			return rp_err_set(err, (int)n, "ring file %s: cannot read it: %s", rf->path,
					  strerror((int)-n));
	}
	return 0;
}

/* Fill a new, empty file: geometry from the options, a fresh salt. */
static int create_file(struct rp_ringfile *rf, uint32_t max_chunk, uint64_t data_size,
		       uint32_t device_id, const char *device, struct rp_err *err)
{
	rf->version = FILE_VERSION;
	rf->max_chunk = max_chunk;
	rf->data_size = data_size;
	rf->device_id = device_id;
	snprintf(rf->device, sizeof(rf->device), "%s", device);
	if (getrandom(&rf->salt, sizeof(rf->salt), 0) != (ssize_t)sizeof(rf->salt))
		return rp_err_set(err, -errno, "ring file %s: no random salt: %s", rf->path,
				  strerror(errno));
	/* Header first: a crash before the preallocation leaves a short file,
	 * which the next open grows back. */
	int r = write_header(rf, err);
	if (r == 0)
		r = preallocate(rf, RP_RINGFILE_HEADER_SIZE + data_size, err);
	if (r == 0)
		r = recover(rf, false, err);
	return r;
}

static int copy_chunks(struct rp_ringfile *rf, struct rp_ringfile *old, struct rp_err *err);

/* Make a rename in path's directory durable (best effort: the rename
 * itself already happened). */
static void sync_parent(const char *path)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = 0;
	else if (slash)
		*slash = 0;
	else
		snprintf(dir, sizeof(dir), ".");
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* A version-1 file at rf->path (locked, rf->fd): write its chunks into a
 * new version-2 file beside it, then rename that over it.  A crash before
 * the rename leaves the old file as it was (and a leftover that the next
 * try replaces); after, the new one.  rf->fd becomes the new file's. */
static int convert_v1(struct rp_ringfile *rf, uint32_t max_chunk, uint64_t data_size,
		      unsigned queue_depth, struct rp_err *err)
{
	struct rp_ringfile *old;
	int r = rp_ringfile_open_readonly(rf->path, &old, err);
	if (r < 0)
		return r;
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s" CONVERT_SUFFIX, rf->path) >= sizeof(tmp)) {
		rp_ringfile_close(old);
		return rp_err_set(err, -ENAMETOOLONG, "ring file %s: path too long", rf->path);
	}
	(void)unlink(tmp);
	int oldfd = rf->fd;
	rf->fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (rf->fd < 0) {
		r = open_error(err, errno, tmp, true);
		goto out;
	}
	rf->wfd = rf->fd;
	/* A chunk of the old file fits however its slots compare. */
	rf->geometry_kept = old->max_chunk > max_chunk;
	if (old->max_chunk > max_chunk)
		max_chunk = old->max_chunk;
	if (flock(rf->fd, LOCK_EX | LOCK_NB) < 0) {
		r = rp_err_set(err, -errno, "ring file %s: cannot lock %s: %s", rf->path, tmp,
			       strerror(errno));
		goto out;
	}
	if ((r = create_file(rf, max_chunk, data_size, old->device_id, old->device, err)) < 0 ||
	    (r = setup_writer(rf, queue_depth, err)) < 0 || (r = copy_chunks(rf, old, err)) < 0 ||
	    (r = rp_ringfile_sync(rf, true, err)) < 0)
		goto out;
	if (rename(tmp, rf->path) < 0) {
		r = rp_err_set(err, -errno, "ring file %s: cannot replace it with its version 2 (%s): "
			       "%s", rf->path, tmp, strerror(errno));
		goto out;
	}
	sync_parent(rf->path);
	rf->converted = true;
	rf->converted_chunks = rf->written_chunks;
	rf->skipped_corrupt += old->skipped_corrupt;
out:
	if (r < 0 && rf->fd >= 0) {
		(void)unlink(tmp);
		close(rf->fd);
	}
	if (r < 0)
		rf->fd = oldfd;
	else
		close(oldfd);
	rf->wfd = rf->fd;
	rp_ringfile_close(old);
	return r;
}

int rp_ringfile_open(const char *path, const struct rp_ringfile_opts *opts,
		     struct rp_ringfile **out, struct rp_err *err)
{
	uint32_t max_chunk = 0;
	uint64_t data_size = 0;
	int r = check_opts(path, opts, &max_chunk, &data_size, err);
	if (r < 0)
		return r;
	struct rp_ringfile *rf = rf_alloc(path);
	if (!rf)
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory", path);
	rf->max_age_ns = opts->max_age_ns;
	bool created = false, initialised = false;
	struct stat st;
	if ((r = open_rw(rf, &created, err)) < 0)
		goto fail;
	if (fstat(rf->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = not_ring_file(err, path, "not a regular file");
		goto fail;
	}
	if (st.st_size == 0) {
		/* New, or left empty by a crash right after its creation. */
		initialised = true;
		if ((r = create_file(rf, max_chunk, data_size, opts->device_id, opts->device,
				     err)) < 0)
			goto fail;
	} else {
		if ((r = load_header(rf, err)) < 0)
			goto fail;
		/* The device id stays the file's (stats.device_id), like its
		 * geometry: its chunks carry it. */
		if (strcmp(rf->device, opts->device) != 0) {
			r = rp_err_set(err, -EINVAL, "ring file %s belongs to device %s, not %s: give "
				       "each device its own ring file", path, rf->device, opts->device);
			goto fail;
		}
		if (rf->version == 1) {
			if ((r = convert_v1(rf, max_chunk, data_size, opts->queue_depth, err)) < 0)
				goto fail;
		} else {
			rf->geometry_kept = rf->max_chunk != max_chunk || rf->data_size != data_size;
			rf->file_size = (uint64_t)st.st_size;
			/* A truncated file grows back; the entries it still
			 * holds stay. */
			uint64_t size = RP_RINGFILE_HEADER_SIZE + rf->data_size;
			if (rf->file_size < size && (r = preallocate(rf, size, err)) < 0)
				goto fail;
			if ((r = recover(rf, true, err)) < 0)
				goto fail;
		}
	}
	rf->wfd = rf->fd;
	if (!rf->bufs && (r = setup_writer(rf, opts->queue_depth, err)) < 0)
		goto fail;
	if (!opts->buffered && (r = open_direct(rf, err)) < 0)
		goto fail;
	*out = rf;
	return 0;
fail:
	if (initialised) {
		/* Leave nothing half-made behind. */
		if (created)
			unlink(path);
		else if (ftruncate(rf->fd, 0) < 0)
			rp_err_prefix(err, "%s could not be emptied again after this", path);
	}
	rf_free(rf);
	return r;
}

size_t rp_ringfile_max_chunk(const struct rp_ringfile *rf) { return rf->max_chunk; }

uint64_t rp_ringfile_next_seq(const struct rp_ringfile *rf) { return atomic_load(&rf->next_seq); }

/* ---- writing ---- */

static int submit(struct rp_ringfile *rf, struct wbuf *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&rf->ring);
	/* Not expected: the SQ has an entry for every buffer. */
	if (!sqe)
		return -EBUSY;
	io_uring_prep_write(sqe, rf->wfd, w->mem + w->done, (unsigned)(w->end - w->start - w->done),
			    pos_off(rf, w->start) + w->done);
	io_uring_sqe_set_data(sqe, w);
	w->direct = rf->direct;
	/* A failed submit leaves the SQE queued; the next submit or wait
	 * (io_uring_submit_and_wait) sends it again and reports a lasting
	 * failure. */
	io_uring_submit(&rf->ring);
	return 0;
}

static void release(struct rp_ringfile *rf, struct wbuf *w)
{
	w->busy = false;
	rf->freelist[rf->nfree++] = (unsigned)(w - rf->bufs);
}

/* Mark w's entry written (or lost); under lock. */
static void settle(struct rp_ringfile *rf, struct wbuf *w, enum ent_state state)
{
	struct ent *e = q_find(rf, w->seq);
	if (e && e->state == E_WRITING) {
		e->state = state;
		if (state == E_DONE)
			held_add(rf, e, 1);
	}
}

static void write_failed(struct rp_ringfile *rf, struct wbuf *w, int res)
{
	pthread_mutex_lock(&rf->lock);
	rf->write_errors++;
	settle(rf, w, E_FAILED);
	pthread_mutex_unlock(&rf->lock);
	if (rf->werr.code) {
		rf->werr_more++;
	} else {
		rp_err_set(&rf->werr, res, "ring file %s: writing chunk seq %llu failed: %s: %s; "
			   "that chunk is lost, the ring stays usable", rf->path,
			   (unsigned long long)w->seq, strerror(-res),
			   res == -ENOSPC || res == -EDQUOT ? "free disk space"
							    : "check the disk (dmesg)");
	}
	release(rf, w);
}

/* One write completed (res: bytes written or -errno). */
static void complete(struct rp_ringfile *rf, struct wbuf *w, int res)
{
	if (res == -EINVAL && w->direct) {
		/* The file system refused O_DIRECT after all: go buffered. */
		if (rf->direct) {
			int fl = fcntl(rf->wfd, F_GETFL);
			if (fl < 0 || fcntl(rf->wfd, F_SETFL, fl & ~O_DIRECT) < 0) {
				write_failed(rf, w, -errno);
				return;
			}
			pthread_mutex_lock(&rf->lock);
			rf->direct = false;
			pthread_mutex_unlock(&rf->lock);
		}
		w->done = 0;
		if (submit(rf, w) < 0)
			write_failed(rf, w, -EBUSY);
		return;
	}
	if (res <= 0) {
		write_failed(rf, w, res < 0 ? res : -EIO);
		return;
	}
	w->done += (uint32_t)res;
	if (w->done < w->end - w->start) {
		if (submit(rf, w) < 0)
			write_failed(rf, w, -EBUSY);
		return;
	}
	pthread_mutex_lock(&rf->lock);
	settle(rf, w, E_DONE);
	rf->written_chunks++;
	pthread_mutex_unlock(&rf->lock);
	release(rf, w);
}

/* Handle the completions there are; with block, wait for one if none. */
static int reap(struct rp_ringfile *rf, bool block, struct rp_err *err)
{
	bool got = false;
	for (;;) {
		struct io_uring_cqe *cqe;
		int r = io_uring_peek_cqe(&rf->ring, &cqe);
		if (r == -EAGAIN) {
			if (got || !block)
				return 0;
			r = io_uring_submit_and_wait(&rf->ring, 1);
			if (r < 0 && r != -EINTR)
				return rp_err_set(err, r, "ring file %s: waiting for writes failed: %s",
						  rf->path, strerror(-r));
			continue;
		}
		if (r < 0)
			return rp_err_set(err, r, "ring file %s: reading write completions failed: %s",
					  rf->path, strerror(-r));
		struct wbuf *w = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&rf->ring, cqe);
		complete(rf, w, res);
		got = true;
	}
}

/* Report (once) the writes that failed since the last report. */
static int take_write_error(struct rp_ringfile *rf, struct rp_err *err)
{
	int code = rf->werr.code;
	if (!code)
		return 0;
	if (err)
		*err = rf->werr;
	if (rf->werr_more)
		rp_err_prefix(err, "%llu more writes failed, the first",
			      (unsigned long long)rf->werr_more);
	rf->werr.code = 0;
	rf->werr_more = 0;
	return code;
}

/* Before entry e leaves the ring, hand its chunk to the pins that cover
 * it.  Only this thread changes the index, so reading e needs no lock. */
static void save_pinned(struct rp_ringfile *rf, const struct ent *e)
{
	if (e->state != E_DONE)
		return;
	pthread_mutex_lock(&rf->pin_lock);
	bool loaded = false;
	struct rp_chunk_header h;
	for (struct rp_ringfile_pin *p = rf->pins; p; p = p->next) {
		if (e->seq < p->from || e->seq > p->to)
			continue;
		if (!loaded && read_entry(rf, e->seq, e->off, e->len, rf->pinbuf, &h) != 1)
			break;
		loaded = true;
		/* The save function's result is its own business: the writer
		 * cannot wait for a pin. */
		p->save(p->ctx, rf->pinbuf + FRAME, e->len, &h);
	}
	pthread_mutex_unlock(&rf->pin_lock);
}

/* Retire the entries a write reaching position end covers (those less
 * than a lap behind it), and with max_age those older than newest_ts
 * allows: pins get them first. */
static int retire(struct rp_ringfile *rf, uint64_t end, uint64_t newest_ts, struct rp_err *err)
{
	uint64_t oldest_ts = rf->max_age_ns && newest_ts > rf->max_age_ns
		? newest_ts - rf->max_age_ns : 0;
	while (rf->qn) {
		const struct ent *e = q_at(rf, 0);
		if (e->pos + rf->data_size >= end && e->last_ts >= oldest_ts)
			break;
		if (e->state == E_WRITING) {
			int r = reap(rf, true, err);
			if (r < 0)
				return r;
			continue;
		}
		save_pinned(rf, e);
		pthread_mutex_lock(&rf->lock);
		q_pop(rf);
		pthread_mutex_unlock(&rf->lock);
	}
	return 0;
}

/* Whether a write still in flight covers the page position pos lies in. */
static bool page_in_flight(const struct rp_ringfile *rf, uint64_t pos)
{
	for (unsigned i = 0; i < rf->qd; i++)
		if (rf->bufs[i].busy && rf->bufs[i].end > pos / PAGE * PAGE)
			return true;
	return false;
}

/* Whether the write of a chunk slot_count or more before seq is still in
 * flight (completions come in any order). */
static bool write_lags(const struct rp_ringfile *rf, uint64_t seq)
{
	for (unsigned i = 0; i < rf->qd; i++)
		if (rf->bufs[i].busy && rf->bufs[i].seq + rf->slot_count <= seq)
			return true;
	return false;
}

/* Queue the entry of chunk (len bytes, header h) at the write position.
 * Once it is queued, no chunk slot_count or more before it is in flight:
 * stats.slot_count lets a reader tell a lost chunk from a slow one. */
static int place(struct rp_ringfile *rf, const void *chunk, uint32_t len,
		 const struct rp_chunk_header *h, struct rp_err *err)
{
	int r;
	while (rf->nfree == 0 || write_lags(rf, h->seq))
		if ((r = reap(rf, true, err)) < 0)
			return r;
	if ((r = reap(rf, false, err)) < 0)
		return r;
	uint64_t span = entry_span(len), p = rf->wpos;
	/* The page p starts in is still being written: an entry of a page or
	 * more starts on the next page (wasting less than itself: waiting
	 * would hold a fast stream behind each write), a smaller one waits
	 * for that write (a page each would waste most of the ring). */
	if (p % PAGE && page_in_flight(rf, p) && span >= PAGE)
		p = round_up(p, PAGE);
	while (p % PAGE && page_in_flight(rf, p))
		if ((r = reap(rf, true, err)) < 0)
			return r;
	/* Entries never straddle the end of the data area: the rest of the
	 * lap is skipped (its entries are retired with the write). */
	if (p % rf->data_size + span > rf->data_size)
		p = round_up(p + 1, rf->data_size);
	struct wbuf *w = &rf->bufs[rf->freelist[--rf->nfree]];
	w->start = p / PAGE * PAGE;
	w->end = round_up(p + span, PAGE);
	if ((r = retire(rf, w->end, h->last_ts, err)) < 0) {
		rf->freelist[rf->nfree++] = (unsigned)(w - rf->bufs);
		return r;
	}
	size_t lead = (size_t)(p - w->start);
	memcpy(w->mem, rf->tailpage, lead);
	frame_write(rf, w->mem + lead, len, p, h->seq);
	memcpy(w->mem + lead + FRAME, chunk, len);
	memset(w->mem + lead + FRAME + len, 0, (size_t)(w->end - w->start) - lead - FRAME - len);
	struct ent e = entry_of(h, p, pos_off(rf, p), E_WRITING);
	pthread_mutex_lock(&rf->lock);
	r = q_push(rf, &e);
	pthread_mutex_unlock(&rf->lock);
	if (r < 0) {
		release(rf, w);
		return rp_err_set(err, r, "ring file %s: out of memory for its index", rf->path);
	}
	if ((p + span) % PAGE)
		memcpy(rf->tailpage, w->mem + (p + span) / PAGE * PAGE - w->start, PAGE);
	rf->wpos = p + span;
	w->seq = h->seq;
	w->busy = true;
	w->done = 0;
	atomic_store(&rf->next_seq, h->seq + 1);
	if (submit(rf, w) < 0) {
		write_failed(rf, w, -EBUSY);
		return take_write_error(rf, err);
	}
	return 0;
}

int rp_ringfile_append(struct rp_ringfile *rf, const void *chunk, size_t len,
		       struct rp_err *err)
{
	if (rf->readonly)
		return rp_err_set(err, -EROFS, "ring file %s is open read-only: open it with "
				  "rp_ringfile_open to append", rf->path);
	if (len > rf->max_chunk)
		return rp_err_set(err, -E2BIG, "ring file %s: a chunk of %zu bytes is larger than "
				  "its maximum of %u bytes: seal chunks of at most "
				  "rp_ringfile_max_chunk() bytes", rf->path, len, rf->max_chunk);
	struct rp_chunk_header h;
	int r = rp_chunk_header_check(chunk, len, &h, err);
	if (r < 0) {
		rp_err_prefix(err, "ring file %s: refusing to append", rf->path);
		return r;
	}
	uint64_t next = atomic_load(&rf->next_seq);
	if (len != RP_CHUNK_HEADER_SIZE + (size_t)h.comp_size || h.device_id != rf->device_id ||
	    h.seq != next)
		return rp_err_set(err, -EINVAL, "ring file %s: refusing chunk seq %llu of device %u "
				  "(%zu bytes, header says %zu): expected seq %llu of device %u and "
				  "the exact chunk length", rf->path, (unsigned long long)h.seq,
				  h.device_id, len, RP_CHUNK_HEADER_SIZE + (size_t)h.comp_size,
				  (unsigned long long)next, rf->device_id);
	return place(rf, chunk, (uint32_t)len, &h, err);
}

/* Converting: the old file's chunks, oldest first, keeping their seqs. */
static int copy_chunks(struct rp_ringfile *rf, struct rp_ringfile *old, struct rp_err *err)
{
	struct rp_ringfile_iter *it;
	int r = rp_ringfile_iter_new(old, 0, UINT64_MAX, &it);
	if (r < 0)
		return rp_err_set(err, r, "ring file %s: out of memory converting it", rf->path);
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	while (r == 0 && (r = rp_ringfile_iter_next(it, &chunk, &len, &h)) == 1)
		r = place(rf, chunk, (uint32_t)len, &h, err);
	rp_ringfile_iter_free(it);
	if (r < 0 && err && !err->code)
		rp_err_set(err, r, "ring file %s: cannot read it to convert it: %s", rf->path,
			   strerror(-r));
	return r;
}

int rp_ringfile_poll(struct rp_ringfile *rf, struct rp_err *err)
{
	if (rf->readonly)
		return 0;
	int r = reap(rf, false, err);
	return r < 0 ? r : take_write_error(rf, err);
}

int rp_ringfile_sync(struct rp_ringfile *rf, bool durable, struct rp_err *err)
{
	if (rf->readonly)
		return 0;
	while (rf->nfree < rf->qd) {
		int r = reap(rf, true, err);
		if (r < 0)
			return r;
	}
	if (durable && fdatasync(rf->wfd) < 0)
		return rp_err_set(err, -errno, "ring file %s: fdatasync failed: %s: check the disk",
				  rf->path, strerror(errno));
	return take_write_error(rf, err);
}

void rp_ringfile_close(struct rp_ringfile *rf)
{
	if (!rf)
		return;
	(void)rp_ringfile_sync(rf, true, NULL); /* closing anyway: recovery handles the rest */
	rf_free(rf);
}

void rp_ringfile_stats(struct rp_ringfile *rf, struct rp_ringfile_stats *st)
{
	memset(st, 0, sizeof(*st));
	memcpy(st->device, rf->device, sizeof(st->device));
	st->device_id = rf->device_id;
	st->format_version = rf->version;
	st->slot_size = rf->max_chunk;
	st->slot_count = rf->slot_count;
	st->capacity_bytes = rf->data_size;
	st->max_age_ns = rf->max_age_ns;
	st->recovered_chunks = rf->recovered_chunks;
	st->skipped_corrupt = rf->skipped_corrupt;
	st->converted_chunks = rf->converted_chunks;
	st->converted = rf->converted;
	st->geometry_kept = rf->geometry_kept;
	st->overwritten_in_read = atomic_load(&rf->overwritten_in_read);
	pthread_mutex_lock(&rf->lock);
	st->next_seq = atomic_load(&rf->next_seq);
	st->direct_io = rf->direct;
	st->chunks = (uint32_t)rf->held_chunks;
	st->events = rf->held_events;
	st->bytes_used = rf->held_bytes;
	st->raw_bytes = rf->held_raw;
	st->dropped = rf->held_dropped;
	const struct ent *oldest = NULL, *newest = NULL;
	for (size_t i = 0; i < rf->qn && !oldest; i++)
		if (q_at(rf, i)->state == E_DONE)
			oldest = q_at(rf, i);
	for (size_t i = rf->qn; i-- > 0 && !newest;)
		if (q_at(rf, i)->state == E_DONE)
			newest = q_at(rf, i);
	st->oldest_seq = oldest ? oldest->seq : st->next_seq;
	st->first_ts = oldest ? oldest->first_ts : 0;
	st->last_ts = newest ? newest->last_ts : 0;
	st->written_chunks = rf->written_chunks;
	st->write_errors = rf->write_errors;
	pthread_mutex_unlock(&rf->lock);
}

int rp_ringfile_iter_new(struct rp_ringfile *rf, uint64_t t0, uint64_t t1,
			 struct rp_ringfile_iter **out)
{
	struct rp_ringfile_iter *it = calloc(1, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->rf = rf;
	uint32_t maxlen = 0;
	pthread_mutex_lock(&rf->lock);
	it->items = malloc((rf->qn ? rf->qn : 1) * sizeof(*it->items));
	for (size_t i = 0; it->items && i < rf->qn; i++) {
		const struct ent *e = q_at(rf, i);
		if (e->state != E_DONE || e->last_ts < t0 || e->first_ts > t1)
			continue;
		it->items[it->n++] = (struct it_item){ e->seq, e->off, e->len };
		if (e->len > maxlen)
			maxlen = e->len;
	}
	pthread_mutex_unlock(&rf->lock);
	it->buf = malloc(FRAME + (size_t)maxlen);
	if (!it->items || !it->buf) {
		rp_ringfile_iter_free(it);
		return -ENOMEM;
	}
	*out = it;
	return 0;
}

int rp_ringfile_iter_next(struct rp_ringfile_iter *it, const void **chunk, size_t *len,
			  struct rp_chunk_header *hdr)
{
	struct rp_ringfile *rf = it->rf;
	struct rp_chunk_header h;
	while (it->pos < it->n) {
		const struct it_item *x = &it->items[it->pos++];
		int r = read_entry(rf, x->seq, x->off, x->len, it->buf, &h);
		if (r < 0)
			return r;
		/* Overwritten (or torn by an overwrite) since the snapshot. */
		if (r == 0) {
			atomic_fetch_add(&rf->overwritten_in_read, 1);
			continue;
		}
		*chunk = it->buf + FRAME;
		*len = x->len;
		if (hdr)
			*hdr = h;
		return 1;
	}
	return 0;
}

void rp_ringfile_iter_skip_below(struct rp_ringfile_iter *it, uint64_t seq)
{
	while (it->pos < it->n && it->items[it->pos].seq < seq)
		it->pos++;
}

void rp_ringfile_iter_free(struct rp_ringfile_iter *it)
{
	if (!it)
		return;
	free(it->items);
	free(it->buf);
	free(it);
}

int rp_ringfile_pin(struct rp_ringfile *rf, uint64_t from_seq, uint64_t to_seq,
		    rp_ringfile_save_fn save, void *ctx, struct rp_ringfile_pin **out)
{
	if (!save || from_seq > to_seq)
		return -EINVAL;
	struct rp_ringfile_pin *p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = (struct rp_ringfile_pin){ .from = from_seq, .to = to_seq, .save = save, .ctx = ctx };
	pthread_mutex_lock(&rf->pin_lock);
	p->next = rf->pins;
	rf->pins = p;
	pthread_mutex_unlock(&rf->pin_lock);
	*out = p;
	return 0;
}

void rp_ringfile_unpin(struct rp_ringfile *rf, struct rp_ringfile_pin *pin)
{
	if (!pin)
		return;
	pthread_mutex_lock(&rf->pin_lock);
	for (struct rp_ringfile_pin **pp = &rf->pins; *pp; pp = &(*pp)->next) {
		if (*pp == pin) {
			*pp = pin->next;
			break;
		}
	}
	pthread_mutex_unlock(&rf->pin_lock);
	free(pin);
}
