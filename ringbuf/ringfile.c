/* Device ring files (ringfile.h).
 *
 * The writer owns the io_uring and its buffers; everything readers and
 * stats see goes through the slot index, guarded by `lock`.  A slot's index
 * entry is invalidated before its overwrite is submitted and filled again
 * when the write completes, so a reader only ever looks for chunks whose
 * write has finished, and the CRC plus the seq check catch the ones
 * overwritten after it looked. */
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
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define DEFAULT_SLOT_SIZE (128u << 10)
/* A chunk never needs more: RP_CHUNK_RAW_MAX compressed, plus slack. */
#define MAX_SLOT_SIZE (64u << 20)
#define DEFAULT_QUEUE_DEPTH 16u
#define FILE_VERSION 1u
#define CLOCK_ID_MONOTONIC 1u

/* File header layout (docs/ring-format.md). */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_HEADER_SIZE = 12, H_SLOT_SIZE = 16,
	H_SLOT_COUNT = 20, H_DEVICE_ID = 24, H_CLOCK_ID = 28, H_CREATED = 32,
	H_DEVICE = 40, H_CRC = 104, H_END = 108,
};
/* Chunk header fields read before the chunk is checked. */
enum { C_COMP_SIZE = 48 };

struct slot {
	uint64_t seq, first_ts, last_ts;
	uint32_t event_count, comp_size, raw_size, dropped;
	bool valid;
};

struct wbuf {
	unsigned char *mem;      /* slot_size bytes, 4096-aligned */
	struct slot entry;       /* the slot's index entry once written */
	uint32_t slot, len, done; /* len: padded to 4096; done: written so far */
	bool busy;               /* in flight */
	bool direct;             /* submitted while the write fd was O_DIRECT */
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
	uint32_t slot_size, slot_count, device_id;
	char device[RP_DEVICE_NAME_MAX + 1];
	uint64_t file_size;
	/* Index entries: slot_count, or fewer for a read-only file cut short
	 * (the slots past its end are empty). */
	uint32_t nidx;

	/* Writer thread only. */
	struct io_uring ring;
	struct wbuf *bufs;
	unsigned *freelist, nfree, qd;
	unsigned char *pinbuf;
	struct rp_err werr;      /* first failed write not yet reported */
	uint64_t werr_more;

	_Atomic uint64_t next_seq;
	_Atomic uint64_t overwritten_in_read;
	uint64_t recovered_chunks, skipped_corrupt; /* set at open */

	pthread_mutex_t lock;    /* idx, written_chunks, write_errors */
	struct slot *idx;
	uint64_t written_chunks, write_errors;

	/* Held while save functions run, so unpin waits for them. */
	pthread_mutex_t pin_lock;
	struct rp_ringfile_pin *pins;
};

struct it_item {
	uint64_t seq;
	uint32_t slot, comp_size;
};

struct rp_ringfile_iter {
	struct rp_ringfile *rf;
	struct it_item *items;
	size_t n, pos;
	unsigned char *buf;
};

static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static void put32(unsigned char *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

static uint64_t slot_off(const struct rp_ringfile *rf, uint32_t slot)
{
	return RP_RINGFILE_HEADER_SIZE + (uint64_t)slot * rf->slot_size;
}

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
	free(rf->idx);
	free(rf->path);
	free(rf);
}

/* Read and check the file header into rf (geometry, device). */
static int load_header(struct rp_ringfile *rf, struct rp_err *err)
{
	unsigned char h[H_END];
	ssize_t n = pread_full(rf->fd, h, sizeof(h), 0);
	if (n < 0)
		return rp_err_set(err, (int)n, "ring file %s: cannot read its header: %s", rf->path,
				  strerror((int)-n));
	if (n < 8 || memcmp(h + H_MAGIC, RP_RINGFILE_MAGIC, 8) != 0)
		return not_ring_file(err, rf->path, "bad magic");
	if (n < H_END)
		return not_ring_file(err, rf->path, "truncated header");
	uint32_t version = get32(h + H_VERSION);
	/* Before the CRC: a newer format may checksum its header differently. */
	if (version > FILE_VERSION)
		return rp_err_set(err, -EPROTONOSUPPORT, "ring file %s has format version %u, newer "
				  "than this build reads (%u): upgrade ringprof or move the file away",
				  rf->path, version, FILE_VERSION);
	if (rp_crc32c(h, H_CRC) != get32(h + H_CRC))
		return not_ring_file(err, rf->path, "bad header checksum");
	uint32_t slot_size = get32(h + H_SLOT_SIZE), slot_count = get32(h + H_SLOT_COUNT);
	char device[RP_DEVICE_NAME_MAX + 1];
	memcpy(device, h + H_DEVICE, sizeof(device));
	if (version == 0 || get32(h + H_HEADER_SIZE) != RP_RINGFILE_HEADER_SIZE ||
	    slot_size == 0 || slot_size % PAGE || slot_size > MAX_SLOT_SIZE || slot_count < 2 ||
	    !valid_device_name(device, sizeof(device)))
		return not_ring_file(err, rf->path, "impossible header fields");
	uint32_t clock_id = get32(h + H_CLOCK_ID);
	if (clock_id != CLOCK_ID_MONOTONIC)
		return rp_err_set(err, -EPROTONOSUPPORT, "ring file %s uses clock id %u, which this "
				  "build does not know: upgrade ringprof", rf->path, clock_id);
	rf->slot_size = slot_size;
	rf->slot_count = slot_count;
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
	put32(h + H_SLOT_SIZE, rf->slot_size);
	put32(h + H_SLOT_COUNT, rf->slot_count);
	put32(h + H_DEVICE_ID, rf->device_id);
	put32(h + H_CLOCK_ID, CLOCK_ID_MONOTONIC);
	put64(h + H_CREATED, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
	memcpy(h + H_DEVICE, rf->device, strlen(rf->device));
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

static size_t chunk_len(const struct slot *e) { return RP_CHUNK_HEADER_SIZE + (size_t)e->comp_size; }

static struct slot entry_of(const struct rp_chunk_header *h)
{
	return (struct slot){ .seq = h->seq, .first_ts = h->first_ts, .last_ts = h->last_ts,
			      .event_count = h->event_count, .comp_size = h->comp_size,
			      .raw_size = h->raw_size, .dropped = h->dropped, .valid = true };
}

/* Read slot i at open into *buf (grown as needed): 1 and *h for a good
 * chunk of this ring in its right slot, 0 for an empty slot, -EBADMSG for
 * a bad one, another negative errno when reading fails. */
static int recover_slot(struct rp_ringfile *rf, uint32_t i, unsigned char **buf, size_t *cap,
			struct rp_chunk_header *h)
{
	uint64_t off = slot_off(rf, i);
	if (off >= rf->file_size)
		return 0;
	uint64_t avail = rf->file_size - off < rf->slot_size ? rf->file_size - off : rf->slot_size;
	size_t first = avail < PAGE ? (size_t)avail : PAGE;
	ssize_t n = pread_full(rf->fd, *buf, first, off);
	if (n < 0)
		return (int)n;
	if (n < 4 || get32(*buf) != RP_CHUNK_MAGIC)
		return 0;
	if (n < RP_CHUNK_HEADER_SIZE)
		return -EBADMSG;
	uint64_t len = RP_CHUNK_HEADER_SIZE + (uint64_t)get32(*buf + C_COMP_SIZE);
	if (len > avail)
		return -EBADMSG;
	if (len > (uint64_t)n) {
		if (len > *cap) {
			unsigned char *p = realloc(*buf, len);
			if (!p)
				return -ENOMEM;
			*buf = p;
			*cap = len;
		}
		ssize_t m = pread_full(rf->fd, *buf + n, len - (size_t)n, off + (uint64_t)n);
		if (m < 0)
			return (int)m;
		if ((uint64_t)m < len - (uint64_t)n)
			return -EBADMSG;
	}
	if (rp_chunk_header_check(*buf, len, h, NULL) != 0 || h->device_id != rf->device_id ||
	    h->seq % rf->slot_count != i)
		return -EBADMSG;
	return 1;
}

/* Rebuild the index from the chunks in the file (a new one has none). */
static int recover(struct rp_ringfile *rf, bool scan, struct rp_err *err)
{
	rf->idx = calloc(rf->nidx ? rf->nidx : 1, sizeof(*rf->idx));
	size_t cap = PAGE;
	unsigned char *buf = malloc(cap);
	if (!rf->idx || !buf) {
		free(buf);
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory for the index of %u "
				  "slots", rf->path, rf->nidx);
	}
	uint64_t max_seq = 0;
	bool any = false;
	for (uint32_t i = 0; scan && i < rf->nidx; i++) {
		struct rp_chunk_header h;
		int r = recover_slot(rf, i, &buf, &cap, &h);
		if (r == -EBADMSG) {
			rf->skipped_corrupt++;
		} else if (r < 0) {
			free(buf);
			return rp_err_set(err, r, "ring file %s: cannot read slot %u: %s", rf->path, i,
					  strerror(-r));
		} else if (r == 1) {
			rf->idx[i] = entry_of(&h);
			if (!any || h.seq > max_seq)
				max_seq = h.seq;
			any = true;
		}
	}
	free(buf);
	/* A chunk a whole lap older than the newest is left over from a
	 * failed overwrite: it no longer belongs to the ring. */
	for (uint32_t i = 0; i < rf->nidx; i++) {
		if (rf->idx[i].valid && max_seq - rf->idx[i].seq >= rf->slot_count) {
			rf->idx[i].valid = false;
			rf->skipped_corrupt++;
		}
		rf->recovered_chunks += rf->idx[i].valid;
	}
	atomic_store(&rf->next_seq, any ? max_seq + 1 : 0);
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
	uint64_t present = rf->file_size > RP_RINGFILE_HEADER_SIZE
		? (rf->file_size - RP_RINGFILE_HEADER_SIZE + rf->slot_size - 1) / rf->slot_size : 0;
	rf->nidx = present < rf->slot_count ? (uint32_t)present : rf->slot_count;
	if ((r = recover(rf, true, err)) < 0)
		goto fail;
	*out = rf;
	return 0;
fail:
	rf_free(rf);
	return r;
}

/* Check opts and derive the geometry a new file would get. */
static int check_opts(const char *path, const struct rp_ringfile_opts *o, uint32_t *slot_size,
		      uint32_t *slot_count, struct rp_err *err)
{
	if (!o->device || !valid_device_name(o->device, RP_DEVICE_NAME_MAX + 2))
		return rp_err_set(err, -EINVAL, "ring file %s: invalid device name \"%.80s\": use 1 "
				  "to %d characters from A-Z a-z 0-9 _ . -", path,
				  o->device ? o->device : "(null)", RP_DEVICE_NAME_MAX);
	*slot_size = o->slot_size ? o->slot_size : DEFAULT_SLOT_SIZE;
	if (*slot_size % PAGE || *slot_size > MAX_SLOT_SIZE)
		return rp_err_set(err, -EINVAL, "ring file %s: slot size %u is not a multiple of 4096 "
				  "up to %u: pick e.g. 131072", path, *slot_size, MAX_SLOT_SIZE);
	uint64_t min = RP_RINGFILE_HEADER_SIZE + 2ull * *slot_size;
	char a[32], b[32];
	if (o->budget_bytes < min)
		return rp_err_set(err, -EINVAL, "ring file %s: a budget of %s is too small for two "
				  "slots of %s: raise the ring budget to at least %llu bytes", path,
				  human(o->budget_bytes, a), human(*slot_size, b),
				  (unsigned long long)min);
	uint64_t count = (o->budget_bytes - RP_RINGFILE_HEADER_SIZE) / *slot_size;
	if (count > UINT32_MAX)
		return rp_err_set(err, -EINVAL, "ring file %s: a budget of %s makes more than 2^32 "
				  "slots: raise the slot size", path, human(o->budget_bytes, a));
	*slot_count = (uint32_t)count;
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
	/* Fewer buffers than slots: a slot's previous write has always
	 * completed before it is overwritten (and pin saves read it). */
	unsigned qd = queue_depth ? queue_depth : DEFAULT_QUEUE_DEPTH;
	if (qd > rf->slot_count - 1)
		qd = rf->slot_count - 1;
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
	rf->freelist = calloc(qd, sizeof(*rf->freelist));
	rf->pinbuf = malloc(rf->slot_size);
	bool ok = rf->freelist && rf->pinbuf;
	for (unsigned i = 0; i < qd && ok; i++) {
		void *p;
		ok = posix_memalign(&p, PAGE, rf->slot_size) == 0;
		rf->bufs[i].mem = ok ? p : NULL;
		if (ok)
			rf->freelist[rf->nfree++] = i;
	}
	char a[32];
	if (!ok)
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory for %u write buffers of "
				  "%s: lower the queue depth", rf->path, qd, human(rf->slot_size, a));
	return 0;
}

int rp_ringfile_open(const char *path, const struct rp_ringfile_opts *opts,
		     struct rp_ringfile **out, struct rp_err *err)
{
	uint32_t slot_size = 0, slot_count = 0;
	int r = check_opts(path, opts, &slot_size, &slot_count, err);
	if (r < 0)
		return r;
	struct rp_ringfile *rf = rf_alloc(path);
	if (!rf)
		return rp_err_set(err, -ENOMEM, "ring file %s: out of memory", path);
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
		rf->slot_size = slot_size;
		rf->slot_count = slot_count;
		rf->device_id = opts->device_id;
		snprintf(rf->device, sizeof(rf->device), "%s", opts->device);
		initialised = true;
		/* Header first: a crash before the preallocation leaves a
		 * short file, which the next open grows back. */
		r = write_header(rf, err);
		if (r == 0)
			r = preallocate(rf, slot_off(rf, slot_count), err);
		if (r < 0)
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
		rf->geometry_kept = rf->slot_size != slot_size || rf->slot_count != slot_count;
		rf->file_size = (uint64_t)st.st_size;
		/* A truncated file grows back; the chunks it still holds stay. */
		if (rf->file_size < slot_off(rf, rf->slot_count) &&
		    (r = preallocate(rf, slot_off(rf, rf->slot_count), err)) < 0)
			goto fail;
	}
	rf->nidx = rf->slot_count;
	if ((r = recover(rf, !initialised, err)) < 0)
		goto fail;
	rf->wfd = rf->fd;
	if (!opts->buffered && (r = open_direct(rf, err)) < 0)
		goto fail;
	if ((r = setup_writer(rf, opts->queue_depth, err)) < 0)
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

size_t rp_ringfile_max_chunk(const struct rp_ringfile *rf) { return rf->slot_size; }

uint64_t rp_ringfile_next_seq(const struct rp_ringfile *rf) { return atomic_load(&rf->next_seq); }

static int submit(struct rp_ringfile *rf, struct wbuf *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&rf->ring);
	/* Not expected: the SQ has an entry for every buffer. */
	if (!sqe)
		return -EBUSY;
	io_uring_prep_write(sqe, rf->wfd, w->mem + w->done, w->len - w->done,
			    slot_off(rf, w->slot) + w->done);
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

static bool slot_in_flight(const struct rp_ringfile *rf, uint32_t slot)
{
	for (unsigned i = 0; i < rf->qd; i++)
		if (rf->bufs[i].busy && rf->bufs[i].slot == slot)
			return true;
	return false;
}

static void write_failed(struct rp_ringfile *rf, struct wbuf *w, int res)
{
	pthread_mutex_lock(&rf->lock);
	rf->write_errors++;
	pthread_mutex_unlock(&rf->lock);
	if (rf->werr.code) {
		rf->werr_more++;
	} else {
		rp_err_set(&rf->werr, res, "ring file %s: writing chunk seq %llu failed: %s: %s; "
			   "that chunk is lost, the ring stays usable", rf->path,
			   (unsigned long long)w->entry.seq, strerror(-res),
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
	if (w->done < w->len) {
		if (submit(rf, w) < 0)
			write_failed(rf, w, -EBUSY);
		return;
	}
	pthread_mutex_lock(&rf->lock);
	rf->idx[w->slot] = w->entry;
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

/* Before slot `slot` is overwritten, hand its chunk to the pins that
 * cover it.  Only this thread writes the index, so reading it here needs
 * no lock. */
static void save_pinned(struct rp_ringfile *rf, uint32_t slot)
{
	const struct slot e = rf->idx[slot];
	if (!e.valid)
		return;
	pthread_mutex_lock(&rf->pin_lock);
	bool loaded = false;
	struct rp_chunk_header h;
	for (struct rp_ringfile_pin *p = rf->pins; p; p = p->next) {
		if (e.seq < p->from || e.seq > p->to)
			continue;
		if (!loaded) {
			ssize_t n = pread_full(rf->fd, rf->pinbuf, chunk_len(&e), slot_off(rf, slot));
			if (n != (ssize_t)chunk_len(&e) ||
			    rp_chunk_header_check(rf->pinbuf, chunk_len(&e), &h, NULL) != 0 ||
			    h.seq != e.seq)
				break;
			loaded = true;
		}
		/* The save function's result is its own business: the writer
		 * cannot wait for a pin. */
		p->save(p->ctx, rf->pinbuf, chunk_len(&e), &h);
	}
	pthread_mutex_unlock(&rf->pin_lock);
}

int rp_ringfile_append(struct rp_ringfile *rf, const void *chunk, size_t len,
		       struct rp_err *err)
{
	if (rf->readonly)
		return rp_err_set(err, -EROFS, "ring file %s is open read-only: open it with "
				  "rp_ringfile_open to append", rf->path);
	if (len > rf->slot_size)
		return rp_err_set(err, -E2BIG, "ring file %s: a chunk of %zu bytes does not fit its "
				  "slots of %u bytes: seal chunks of at most rp_ringfile_max_chunk() "
				  "bytes", rf->path, len, rf->slot_size);
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
	/* Completions come in any order: the slot's previous write may still
	 * be in flight behind later ones. */
	uint32_t slot = (uint32_t)(h.seq % rf->slot_count);
	while (rf->nfree == 0 || slot_in_flight(rf, slot))
		if ((r = reap(rf, true, err)) < 0)
			return r;
	if ((r = reap(rf, false, err)) < 0)
		return r;

	struct wbuf *w = &rf->bufs[rf->freelist[--rf->nfree]];
	size_t padded = (len + PAGE - 1) / PAGE * PAGE;
	memcpy(w->mem, chunk, len);
	memset(w->mem + len, 0, padded - len);
	w->entry = entry_of(&h);
	w->slot = slot;
	w->busy = true;
	w->len = (uint32_t)padded;
	w->done = 0;
	save_pinned(rf, w->slot);
	pthread_mutex_lock(&rf->lock);
	rf->idx[w->slot].valid = false;
	pthread_mutex_unlock(&rf->lock);
	atomic_store(&rf->next_seq, next + 1);
	if (submit(rf, w) < 0) {
		write_failed(rf, w, -EBUSY);
		return take_write_error(rf, err);
	}
	return 0;
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
	rp_ringfile_sync(rf, true, NULL);
	rf_free(rf);
}

void rp_ringfile_stats(struct rp_ringfile *rf, struct rp_ringfile_stats *st)
{
	memset(st, 0, sizeof(*st));
	memcpy(st->device, rf->device, sizeof(st->device));
	st->device_id = rf->device_id;
	st->slot_size = rf->slot_size;
	st->slot_count = rf->slot_count;
	st->recovered_chunks = rf->recovered_chunks;
	st->skipped_corrupt = rf->skipped_corrupt;
	st->geometry_kept = rf->geometry_kept;
	st->overwritten_in_read = atomic_load(&rf->overwritten_in_read);
	const struct slot *oldest = NULL, *newest = NULL;
	pthread_mutex_lock(&rf->lock);
	st->next_seq = atomic_load(&rf->next_seq);
	st->direct_io = rf->direct;
	for (uint32_t i = 0; i < rf->nidx; i++) {
		const struct slot *e = &rf->idx[i];
		if (!e->valid)
			continue;
		st->chunks++;
		st->events += e->event_count;
		st->bytes_used += chunk_len(e);
		st->raw_bytes += e->raw_size;
		st->dropped += e->dropped;
		if (!oldest || e->seq < oldest->seq)
			oldest = e;
		if (!newest || e->seq > newest->seq)
			newest = e;
	}
	st->oldest_seq = oldest ? oldest->seq : st->next_seq;
	st->first_ts = oldest ? oldest->first_ts : 0;
	st->last_ts = newest ? newest->last_ts : 0;
	st->written_chunks = rf->written_chunks;
	st->write_errors = rf->write_errors;
	pthread_mutex_unlock(&rf->lock);
}

static int by_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct it_item *)a)->seq, y = ((const struct it_item *)b)->seq;
	return (x > y) - (x < y);
}

int rp_ringfile_iter_new(struct rp_ringfile *rf, uint64_t t0, uint64_t t1,
			 struct rp_ringfile_iter **out)
{
	struct rp_ringfile_iter *it = calloc(1, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->rf = rf;
	it->items = malloc((rf->nidx ? rf->nidx : 1) * sizeof(*it->items));
	if (!it->items) {
		free(it);
		return -ENOMEM;
	}
	uint32_t maxlen = 0;
	pthread_mutex_lock(&rf->lock);
	for (uint32_t i = 0; i < rf->nidx; i++) {
		const struct slot *e = &rf->idx[i];
		if (!e->valid || e->last_ts < t0 || e->first_ts > t1)
			continue;
		it->items[it->n++] = (struct it_item){ e->seq, i, e->comp_size };
		if (e->comp_size > maxlen)
			maxlen = e->comp_size;
	}
	pthread_mutex_unlock(&rf->lock);
	qsort(it->items, it->n, sizeof(*it->items), by_seq);
	it->buf = malloc(RP_CHUNK_HEADER_SIZE + (size_t)maxlen);
	if (!it->buf) {
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
		size_t want = RP_CHUNK_HEADER_SIZE + (size_t)x->comp_size;
		ssize_t n = pread_full(rf->fd, it->buf, want, slot_off(rf, x->slot));
		if (n < 0)
			return (int)n;
		/* Overwritten (or torn by an overwrite) since the snapshot. */
		if ((size_t)n != want || rp_chunk_header_check(it->buf, want, &h, NULL) != 0 ||
		    h.seq != x->seq || h.device_id != rf->device_id) {
			atomic_fetch_add(&rf->overwritten_in_read, 1);
			continue;
		}
		*chunk = it->buf;
		*len = want;
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
