/* Ring files: creation, recovery from damage, wrap-around, windows,
 * concurrent readers, pins, and the errors a user can run into.  Chunks
 * are framed payload bytes (rp_chunk_header_write), not encoded events. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ringfile.h"

#define DEV_ID 3u
#define DEV "gpu0"
#define MAX_SLOT (64u << 10)

/* Short enough that every path built from it fits PATH_LEN. */
#define PATH_LEN 1024
static char base[256];

#define path_in(out, name) snprintf(out, sizeof(out), "%s/%s", base, name)

static uint64_t ts_first(uint64_t seq) { return 1000 + seq * 100; }
static uint64_t ts_last(uint64_t seq) { return ts_first(seq) + 50; }
static uint32_t events_of(uint64_t seq) { return 1 + (uint32_t)(seq % 7); }
static uint32_t dropped_of(uint64_t seq) { return (uint32_t)(seq % 3); }
static uint8_t byte_of(uint64_t seq, size_t i) { return (uint8_t)(seq * 131 + i * 7); }

/* Frame a chunk of comp payload bytes for seq; returns its length. */
static size_t make_chunk(unsigned char *out, uint64_t seq, uint32_t comp)
{
	struct rp_chunk_header h = {
		.magic = RP_CHUNK_MAGIC, .version = RP_FORMAT_VERSION,
		.header_size = RP_CHUNK_HEADER_SIZE, .codec = RP_CODEC_LZ4,
		.device_id = DEV_ID, .dropped = dropped_of(seq), .seq = seq,
		.first_ts = ts_first(seq), .last_ts = ts_last(seq),
		.event_count = events_of(seq), .raw_size = comp * 2 + 8, .comp_size = comp,
	};
	for (uint32_t i = 0; i < comp; i++)
		out[RP_CHUNK_HEADER_SIZE + i] = byte_of(seq, i);
	rp_chunk_header_write(&h, out, out + RP_CHUNK_HEADER_SIZE);
	return RP_CHUNK_HEADER_SIZE + comp;
}

/* Payload size of seq in slots of slot_size: varied, 1 .. slot - 64. */
static uint32_t comp_of(uint64_t seq, uint32_t slot_size)
{
	return 1 + (uint32_t)((seq * 2654435761u) % (slot_size - RP_CHUNK_HEADER_SIZE));
}

/* Whether chunk is seq's intact chunk. */
static bool chunk_ok(const void *chunk, size_t len, uint64_t seq)
{
	struct rp_chunk_header h;
	if (rp_chunk_header_check(chunk, len, &h, NULL) != 0 || h.seq != seq ||
	    h.device_id != DEV_ID || len != RP_CHUNK_HEADER_SIZE + h.comp_size ||
	    h.first_ts != ts_first(seq) || h.event_count != events_of(seq))
		return false;
	const unsigned char *p = (const unsigned char *)chunk + RP_CHUNK_HEADER_SIZE;
	for (uint32_t i = 0; i < h.comp_size; i++)
		if (p[i] != byte_of(seq, i))
			return false;
	return true;
}

static struct rp_ringfile_opts opts_for(uint32_t slot_size, uint32_t slots, unsigned qd,
					bool buffered)
{
	return (struct rp_ringfile_opts){
		.device = DEV, .device_id = DEV_ID,
		.budget_bytes = RP_RINGFILE_HEADER_SIZE + (uint64_t)slots * slot_size,
		.slot_size = slot_size, .queue_depth = qd, .buffered = buffered,
	};
}

static struct rp_ringfile *open_ring(const char *path, uint32_t slot_size, uint32_t slots,
				     unsigned qd, bool buffered)
{
	struct rp_ringfile_opts o = opts_for(slot_size, slots, qd, buffered);
	struct rp_err e = { 0 };
	struct rp_ringfile *rf = NULL;
	int r = rp_ringfile_open(path, &o, &rf, &e);
	if (r)
		print_message("open %s: %s\n", path, e.msg);
	assert_int_equal(r, 0);
	return rf;
}

static struct rp_ringfile *open_ro(const char *path)
{
	struct rp_err e = { 0 };
	struct rp_ringfile *rf = NULL;
	int r = rp_ringfile_open_readonly(path, &rf, &e);
	if (r)
		print_message("open %s: %s\n", path, e.msg);
	assert_int_equal(r, 0);
	return rf;
}

static void append_comp(struct rp_ringfile *rf, uint64_t seq, uint32_t comp)
{
	static unsigned char buf[MAX_SLOT];
	size_t len = make_chunk(buf, seq, comp);
	struct rp_err e = { 0 };
	int r = rp_ringfile_append(rf, buf, len, &e);
	if (r)
		print_message("append %llu: %s\n", (unsigned long long)seq, e.msg);
	assert_int_equal(r, 0);
}

static void append_range(struct rp_ringfile *rf, uint64_t from, uint64_t to)
{
	uint32_t slot = (uint32_t)rp_ringfile_max_chunk(rf);
	for (uint64_t s = from; s < to; s++)
		append_comp(rf, s, comp_of(s, slot));
}

static void sync_ok(struct rp_ringfile *rf)
{
	struct rp_err e = { 0 };
	int r = rp_ringfile_sync(rf, false, &e);
	if (r)
		print_message("sync: %s\n", e.msg);
	assert_int_equal(r, 0);
}

/* Iterate [t0, t1]; the seqs returned (intact, in order) go to seqs. */
static size_t collect(struct rp_ringfile *rf, uint64_t t0, uint64_t t1, uint64_t *seqs,
		      size_t max)
{
	struct rp_ringfile_iter *it;
	assert_int_equal(rp_ringfile_iter_new(rf, t0, t1, &it), 0);
	const void *chunk;
	size_t len, n = 0;
	struct rp_chunk_header h;
	int r;
	while ((r = rp_ringfile_iter_next(it, &chunk, &len, &h)) == 1) {
		assert_true(n < max);
		assert_true(chunk_ok(chunk, len, h.seq));
		if (n)
			assert_true(h.seq > seqs[n - 1]);
		seqs[n++] = h.seq;
	}
	assert_int_equal(r, 0);
	rp_ringfile_iter_free(it);
	return n;
}

/* Every chunk held is exactly lo .. hi-1. */
static void expect_range(struct rp_ringfile *rf, uint64_t lo, uint64_t hi)
{
	uint64_t seqs[1024];
	size_t n = collect(rf, 0, UINT64_MAX, seqs, 1024);
	assert_int_equal(n, hi - lo);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(seqs[i], lo + i);
}

static void read_file(const char *path, unsigned char **buf, size_t *len)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	*buf = malloc(*len ? *len : 1);
	assert_non_null(*buf);
	assert_int_equal(pread(fd, *buf, *len, 0), (ssize_t)*len);
	close(fd);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
	close(fd);
}

static uint64_t slot_off(uint32_t slot_size, uint32_t i)
{
	return RP_RINGFILE_HEADER_SIZE + (uint64_t)i * slot_size;
}

static void test_create_reopen(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "create.ring");
	struct rp_ringfile *rf = open_ring(path, 16384, 8, 4, false);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_string_equal(st.device, DEV);
	assert_int_equal(st.device_id, DEV_ID);
	assert_int_equal(st.slot_size, 16384);
	assert_int_equal(st.slot_count, 8);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.next_seq, 0);
	assert_int_equal(st.first_ts, 0);
	assert_int_equal(st.last_ts, 0);
	assert_false(st.geometry_kept);
	assert_int_equal(rp_ringfile_max_chunk(rf), 16384);
	append_range(rf, 0, 5);
	sync_ok(rf);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.chunks, 5);
	assert_int_equal(st.written_chunks, 5);
	assert_int_equal(st.write_errors, 0);
	assert_int_equal(st.next_seq, 5);
	assert_int_equal(rp_ringfile_next_seq(rf), 5);
	rp_ringfile_close(rf);

	struct stat fst;
	assert_int_equal(stat(path, &fst), 0);
	assert_int_equal(fst.st_size, RP_RINGFILE_HEADER_SIZE + 8 * 16384);
	assert_int_equal(fst.st_mode & 0777, 0640);

	rf = open_ring(path, 16384, 8, 4, false);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 5);
	assert_int_equal(st.skipped_corrupt, 0);
	assert_int_equal(st.next_seq, 5);
	assert_int_equal(st.written_chunks, 0);
	expect_range(rf, 0, 5);
	append_range(rf, 5, 6);
	rp_ringfile_close(rf);

	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 6);
	assert_int_equal(st.next_seq, 6);
	expect_range(rf, 0, 6);
	rp_ringfile_close(rf);
}

static void test_wraparound(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "wrap.ring");
	const uint32_t slots = 8;
	struct rp_ringfile *rf = open_ring(path, 8192, slots, 4, false);
	append_range(rf, 0, 5 * slots);
	sync_ok(rf);
	for (int pass = 0; pass < 2; pass++) {
		struct rp_ringfile_stats st;
		rp_ringfile_stats(rf, &st);
		assert_int_equal(st.chunks, slots);
		assert_int_equal(st.oldest_seq, 4 * slots);
		assert_int_equal(st.next_seq, 5 * slots);
		assert_int_equal(st.first_ts, ts_first(4 * slots));
		assert_int_equal(st.last_ts, ts_last(5 * slots - 1));
		uint64_t events = 0, bytes = 0, raw = 0, dropped = 0;
		for (uint64_t s = 4 * slots; s < 5 * slots; s++) {
			uint32_t comp = comp_of(s, 8192);
			events += events_of(s);
			bytes += RP_CHUNK_HEADER_SIZE + comp;
			raw += comp * 2 + 8;
			dropped += dropped_of(s);
		}
		assert_int_equal(st.events, events);
		assert_int_equal(st.bytes_used, bytes);
		assert_int_equal(st.raw_bytes, raw);
		assert_int_equal(st.dropped, dropped);
		assert_int_equal(st.skipped_corrupt, 0);
		assert_int_equal(st.recovered_chunks, pass ? slots : 0);
		expect_range(rf, 4 * slots, 5 * slots);
		rp_ringfile_close(rf);
		rf = open_ro(path);
	}
	rp_ringfile_close(rf);
}

static void test_window(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "window.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 16, 4, false);
	append_range(rf, 0, 12);
	sync_ok(rf);
	uint64_t seqs[32];
	/* Chunk s spans [1000 + 100 s, 1050 + 100 s], ends inclusive. */
	assert_int_equal(collect(rf, 0, 999, seqs, 32), 0);
	assert_int_equal(collect(rf, 1051, 1099, seqs, 32), 0);
	assert_int_equal(collect(rf, 1000, 1000, seqs, 32), 1);
	assert_int_equal(seqs[0], 0);
	assert_int_equal(collect(rf, 1050, 1100, seqs, 32), 2);
	assert_int_equal(seqs[1], 1);
	assert_int_equal(collect(rf, 2050, 5000, seqs, 32), 2);
	assert_int_equal(seqs[0], 10);
	assert_int_equal(seqs[1], 11);
	assert_int_equal(collect(rf, 5, 1, seqs, 32), 0);
	srand(7);
	for (int k = 0; k < 200; k++) {
		uint64_t t0 = 900 + (uint64_t)(rand() % 1400), t1 = t0 + (uint64_t)(rand() % 500);
		size_t n = collect(rf, t0, t1, seqs, 32), want = 0;
		for (uint64_t s = 0; s < 12; s++) {
			if (ts_last(s) < t0 || ts_first(s) > t1)
				continue;
			assert_true(want < n);
			assert_int_equal(seqs[want++], s);
		}
		assert_int_equal(n, want);
	}
	rp_ringfile_close(rf);
}

static void expect_recovery(const char *path, uint64_t recovered, uint64_t corrupt,
			    uint64_t next)
{
	struct rp_ringfile *rf = open_ro(path);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, recovered);
	assert_int_equal(st.skipped_corrupt, corrupt);
	assert_int_equal(st.chunks, recovered);
	assert_int_equal(st.next_seq, next);
	expect_range(rf, 0, recovered);
	rp_ringfile_close(rf);
}

static void test_truncated(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "trunc.ring");
	const uint32_t ss = 16384, slots = 8;
	struct rp_ringfile *rf = open_ring(path, ss, slots, 4, false);
	for (uint64_t s = 0; s < 6; s++)
		append_comp(rf, s, 10000); /* three pages each */
	rp_ringfile_close(rf);

	/* Inside slot 3's chunk: 0..2 survive, 3 is torn, the rest gone. */
	assert_int_equal(truncate(path, (off_t)slot_off(ss, 3) + 5000), 0);
	expect_recovery(path, 3, 1, 3);
	/* At the boundary of slot 2: nothing torn. */
	assert_int_equal(truncate(path, (off_t)slot_off(ss, 2)), 0);
	expect_recovery(path, 2, 0, 2);
	/* Inside the header. */
	assert_int_equal(truncate(path, 50), 0);
	struct rp_ringfile *bad = NULL;
	struct rp_err e = { 0 };
	assert_int_equal(rp_ringfile_open_readonly(path, &bad, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "truncated header"));
	assert_null(bad);

	/* Opening a truncated file for writing grows it back, keeping what
	 * it holds. */
	unlink(path);
	rf = open_ring(path, ss, slots, 4, false);
	for (uint64_t s = 0; s < 6; s++)
		append_comp(rf, s, 10000);
	rp_ringfile_close(rf);
	assert_int_equal(truncate(path, (off_t)slot_off(ss, 4) + 100), 0);
	rf = open_ring(path, ss, slots, 4, false);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 4);
	assert_int_equal(st.skipped_corrupt, 1);
	assert_int_equal(st.next_seq, 4);
	struct stat fst;
	assert_int_equal(stat(path, &fst), 0);
	assert_int_equal(fst.st_size, (off_t)slot_off(ss, slots));
	for (uint64_t s = 4; s < 12; s++)
		append_comp(rf, s, 10000);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, slots);
	assert_int_equal(st.skipped_corrupt, 0);
	uint64_t seqs[16];
	assert_int_equal(collect(rf, 0, UINT64_MAX, seqs, 16), slots);
	assert_int_equal(seqs[0], 4);
	rp_ringfile_close(rf);
	/* Left empty by a crash right after creation: made anew. */
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(rp_ringfile_open_readonly(path, &bad, &e), -EINVAL);
	rf = open_ring(path, ss, slots, 4, false);
	assert_int_equal(rp_ringfile_next_seq(rf), 0);
	append_range(rf, 0, 2);
	rp_ringfile_close(rf);
	expect_recovery(path, 2, 0, 2);
}

static void test_bitflips(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "flips.ring");
	const uint32_t ss = 8192, slots = 32;
	struct rp_ringfile *rf = open_ring(path, ss, slots, 8, false);
	append_range(rf, 0, slots);
	rp_ringfile_close(rf);
	unsigned char *pristine, *img;
	size_t size;
	read_file(path, &pristine, &size);
	img = malloc(size);
	assert_non_null(img);

	/* One bit flipped past the magic of ten chunks: all ten caught. */
	memcpy(img, pristine, size);
	bool flipped[32] = { false };
	srand(11);
	for (int k = 0; k < 10;) {
		uint32_t i = (uint32_t)rand() % slots;
		if (flipped[i])
			continue;
		flipped[i] = true;
		k++;
		size_t len = RP_CHUNK_HEADER_SIZE + comp_of(i, ss);
		size_t at = 4 + (size_t)rand() % (len - 4);
		img[slot_off(ss, i) + at] ^= (unsigned char)(1u << (rand() % 8));
	}
	write_file(path, img, size);
	rf = open_ro(path);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, slots - 10);
	assert_int_equal(st.skipped_corrupt, 10);
	uint64_t seqs[64];
	size_t n = collect(rf, 0, UINT64_MAX, seqs, 64), j = 0;
	for (uint32_t i = 0; i < slots; i++)
		if (!flipped[i])
			assert_int_equal(seqs[j++], i);
	assert_int_equal(n, j);
	rp_ringfile_close(rf);

	/* Many flips anywhere, header included: never a crash, only intact
	 * chunks, every untouched slot found. */
	for (int round = 0; round < 40; round++) {
		memcpy(img, pristine, size);
		memset(flipped, 0, sizeof(flipped));
		int flips = 1 + rand() % 64;
		for (int k = 0; k < flips; k++) {
			size_t at = (size_t)rand() % size;
			img[at] ^= (unsigned char)(1u << (rand() % 8));
			if (at >= RP_RINGFILE_HEADER_SIZE)
				flipped[(at - RP_RINGFILE_HEADER_SIZE) / ss] = true;
		}
		write_file(path, img, size);
		struct rp_err e = { 0 };
		rf = NULL;
		int r = rp_ringfile_open_readonly(path, &rf, &e);
		if (r) {
			assert_true(r == -EINVAL || r == -EPROTONOSUPPORT);
			assert_true(strlen(e.msg) > 0);
			continue;
		}
		rp_ringfile_stats(rf, &st);
		assert_true(st.recovered_chunks + st.skipped_corrupt <= slots);
		n = collect(rf, 0, UINT64_MAX, seqs, 64);
		assert_int_equal(n, st.recovered_chunks);
		j = 0;
		for (uint32_t i = 0; i < slots; i++) {
			while (j < n && seqs[j] < i)
				j++;
			if (!flipped[i])
				assert_true(j < n && seqs[j] == i);
		}
		rp_ringfile_close(rf);
		/* The writer carries on after the newest intact chunk. */
		struct rp_ringfile *w = open_ring(path, ss, slots, 8, false);
		uint64_t next = rp_ringfile_next_seq(w);
		assert_int_equal(next, n ? seqs[n - 1] + 1 : 0);
		append_range(w, next, next + 3);
		rp_ringfile_close(w);
	}
	free(img);
	free(pristine);
}

static void test_zeroed_and_stale_slots(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "zero.ring");
	const uint32_t ss = 8192;
	struct rp_ringfile *rf = open_ring(path, ss, 8, 4, false);
	append_range(rf, 0, 6);
	rp_ringfile_close(rf);
	static unsigned char zeros[8192];
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zeros, ss, (off_t)slot_off(ss, 2)), ss);
	close(fd);
	rf = open_ro(path);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 5);
	assert_int_equal(st.skipped_corrupt, 0);
	assert_int_equal(st.next_seq, 6);
	uint64_t seqs[8], want[] = { 0, 1, 3, 4, 5 };
	assert_int_equal(collect(rf, 0, UINT64_MAX, seqs, 8), 5);
	assert_memory_equal(seqs, want, sizeof(want));
	rp_ringfile_close(rf);

	/* A chunk a whole lap older than the newest (its overwrite failed)
	 * does not belong to the ring any more. */
	path_in(path, "stale.ring");
	rf = open_ring(path, ss, 4, 2, false);
	append_range(rf, 0, 1);
	rp_ringfile_close(rf);
	unsigned char *old;
	size_t size;
	read_file(path, &old, &size);
	rf = open_ring(path, ss, 4, 2, false);
	append_range(rf, 1, 6); /* slots: 4 5 2 3 */
	rp_ringfile_close(rf);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, old + slot_off(ss, 0), ss, (off_t)slot_off(ss, 0)), ss);
	close(fd);
	free(old);
	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 3);
	assert_int_equal(st.skipped_corrupt, 1);
	assert_int_equal(st.oldest_seq, 2);
	rp_ringfile_close(rf);
}

static int open_err(const char *path, const struct rp_ringfile_opts *o, struct rp_err *e)
{
	struct rp_ringfile *rf = NULL;
	memset(e, 0, sizeof(*e));
	int r = o ? rp_ringfile_open(path, o, &rf, e) : rp_ringfile_open_readonly(path, &rf, e);
	assert_null(rf);
	if (r)
		assert_int_equal(e->code, r);
	return r;
}

static void corrupt_header(const char *path, const unsigned char *pristine, size_t size,
			   size_t at, unsigned char x, bool fix_crc)
{
	unsigned char *img = malloc(size);
	assert_non_null(img);
	memcpy(img, pristine, size);
	img[at] ^= x;
	if (fix_crc) {
		uint32_t crc = rp_crc32c(img, 104);
		for (int i = 0; i < 4; i++)
			img[104 + i] = (unsigned char)(crc >> (8 * i));
	}
	write_file(path, img, size);
	free(img);
}

static void test_bad_files(void **state)
{
	(void)state;
	char path[PATH_LEN], other[PATH_LEN];
	path_in(path, "hdr.ring");
	struct rp_ringfile_opts o = opts_for(8192, 4, 2, false);
	struct rp_ringfile *rf = open_ring(path, 8192, 4, 2, false);
	append_range(rf, 0, 3);
	/* One writer per file. */
	struct rp_err e;
	assert_int_equal(open_err(path, &o, &e), -EBUSY);
	assert_non_null(strstr(e.msg, "already open for writing"));
	rp_ringfile_close(rf);
	unsigned char *pristine, *now;
	size_t size, nsize;
	read_file(path, &pristine, &size);

	corrupt_header(path, pristine, size, 0, 0x20, false);
	assert_int_equal(open_err(path, NULL, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "is not a ringprof ring file (bad magic): move it away"));
	assert_non_null(strstr(e.msg, path));
	assert_int_equal(open_err(path, &o, &e), -EINVAL);
	read_file(path, &now, &nsize); /* a write open must not touch it */
	assert_int_equal(nsize, size);
	assert_int_equal(memcmp(now + 8, pristine + 8, size - 8), 0);
	free(now);

	corrupt_header(path, pristine, size, 41, 0x01, false);
	assert_int_equal(open_err(path, NULL, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "bad header checksum"));

	corrupt_header(path, pristine, size, 8, 0x03, true); /* version 2 */
	assert_int_equal(open_err(path, NULL, &e), -EPROTONOSUPPORT);
	assert_non_null(strstr(e.msg, "upgrade"));
	assert_int_equal(open_err(path, &o, &e), -EPROTONOSUPPORT);

	corrupt_header(path, pristine, size, 16, 0x01, true); /* slot size 8193 */
	assert_int_equal(open_err(path, NULL, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "impossible header fields"));

	write_file(path, "hello, world\n", 13);
	assert_int_equal(open_err(path, NULL, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "bad magic"));

	write_file(path, pristine, size);
	struct rp_ringfile_opts wrong = o;
	wrong.device = "gpu1";
	assert_int_equal(open_err(path, &wrong, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "belongs to device gpu0"));
	/* Another device id (devices numbered in another order): the file's
	 * stays, with its chunks. */
	wrong = o;
	wrong.device_id = DEV_ID + 1;
	rf = NULL;
	assert_int_equal(rp_ringfile_open(path, &wrong, &rf, &e), 0);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.device_id, DEV_ID);
	assert_int_equal(st.recovered_chunks, 3);
	append_range(rf, 3, 4);
	rp_ringfile_close(rf);
	free(pristine);

	assert_int_equal(open_err(base, NULL, &e), -EISDIR);
	assert_int_equal(open_err(base, &o, &e), -EISDIR);
	assert_non_null(strstr(e.msg, "is a directory"));
	path_in(other, "missing.ring");
	assert_int_equal(open_err(other, NULL, &e), -ENOENT);
	path_in(other, "no/such/dir.ring");
	assert_int_equal(open_err(other, &o, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "create the state directory"));

	path_in(other, "new.ring");
	const char *bad_names[] = { "", "gpu 0", "a/b", "gpü",
		"0123456789012345678901234567890123456789012345678901234567890123" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(*bad_names); i++) {
		struct rp_ringfile_opts b = o;
		b.device = bad_names[i];
		assert_int_equal(open_err(other, &b, &e), -EINVAL);
		assert_non_null(strstr(e.msg, "invalid device name"));
	}
	struct rp_ringfile_opts b = o;
	b.budget_bytes = 4096 + 8192;
	assert_int_equal(open_err(other, &b, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "too small"));
	b = o;
	b.slot_size = 5000;
	assert_int_equal(open_err(other, &b, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "multiple of 4096"));
	assert_int_equal(access(other, F_OK), -1);

	if (geteuid() != 0) {
		assert_int_equal(chmod(path, 0), 0);
		assert_int_equal(open_err(path, NULL, &e), -EACCES);
		assert_int_equal(open_err(path, &o, &e), -EACCES);
		assert_non_null(strstr(e.msg, "permission denied"));
	} else {
		print_message("running as root: permission errors not checked\n");
	}
}

/* A link or a FIFO planted where a ring file goes: never followed, never
 * waited on, the link's target untouched. */
static void test_links_and_fifos(void **state)
{
	(void)state;
	char path[PATH_LEN], target[PATH_LEN];
	struct rp_ringfile_opts o = opts_for(8192, 4, 2, false);
	struct rp_err e;
	path_in(target, "victim");
	write_file(target, "secret\n", 7);
	path_in(path, "link.ring");
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(open_err(path, &o, &e), -ELOOP);
	assert_non_null(strstr(e.msg, "symbolic link"));
	unsigned char *now;
	size_t size;
	read_file(target, &now, &size);
	assert_int_equal(size, 7);
	assert_memory_equal(now, "secret\n", 7);
	free(now);
	unlink(path);

	path_in(target, "nowhere");
	path_in(path, "dangling.ring");
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(open_err(path, &o, &e), -ELOOP);
	assert_int_equal(access(target, F_OK), -1); /* not created through the link */
	unlink(path);

	path_in(path, "fifo.ring");
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(open_err(path, &o, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "not a regular file"));
	unlink(path);
}

/* Whether dir's file system takes O_DIRECT writes. */
static bool direct_works(const char *dir)
{
	char p[PATH_LEN];
	snprintf(p, sizeof(p), "%s/.direct-probe-XXXXXX", dir);
	int fd = mkstemp(p);
	if (fd < 0)
		return false;
	close(fd);
	fd = open(p, O_WRONLY | O_DIRECT);
	bool ok = false;
	void *buf;
	if (fd >= 0 && posix_memalign(&buf, 4096, 4096) == 0) {
		memset(buf, 0, 4096);
		ok = pwrite(fd, buf, 4096, 0) == 4096;
		free(buf);
	}
	if (fd >= 0)
		close(fd);
	unlink(p);
	return ok;
}

static void roundtrip(const char *path, bool buffered, bool want_direct)
{
	struct rp_ringfile *rf = open_ring(path, 16384, 16, 8, buffered);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.direct_io, want_direct);
	append_range(rf, 0, 40);
	struct rp_err e = { 0 };
	assert_int_equal(rp_ringfile_sync(rf, true, &e), 0);
	expect_range(rf, 24, 40);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	expect_range(rf, 24, 40);
	rp_ringfile_close(rf);
	unlink(path);
}

static void test_buffered(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "buffered.ring");
	roundtrip(path, true, false);

	snprintf(path, sizeof(path), "/dev/shm/ringprof-test-%d.ring", (int)getpid());
	if (access("/dev/shm", W_OK) == 0)
		roundtrip(path, false, direct_works("/dev/shm"));

	/* ramfs has no O_DIRECT at all: the fallback must kick in. */
	char dir[PATH_LEN / 2];
	path_in(dir, "ramfs");
	assert_int_equal(mkdir(dir, 0700), 0);
	if (geteuid() != 0 || mount("ramfs", dir, "ramfs", 0, NULL) != 0) {
		rmdir(dir);
		skip();
	}
	snprintf(path, sizeof(path), "%s/dev.ring", dir);
	roundtrip(path, false, false);
	umount(dir);
	rmdir(dir);
}

static void test_direct(void **state)
{
	(void)state;
	const char *env = getenv("RINGPROF_TEST_DIR");
	const char *dirs[] = { env ? env : base, base, ".", "/var/tmp", "/work" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(*dirs); i++) {
		if (!direct_works(dirs[i]))
			continue;
		char path[PATH_LEN];
		snprintf(path, sizeof(path), "%s/ringprof-direct-%d.ring", dirs[i], (int)getpid());
		roundtrip(path, false, true);
		return;
	}
	skip();
}

struct shared {
	struct rp_ringfile *rf;
	atomic_bool stop;
	atomic_ulong bad, chunks, appended, iterations;
};

static void *writer_main(void *arg)
{
	struct shared *sh = arg;
	unsigned char *buf = malloc(8192);
	uint64_t seq = 0;
	while (!atomic_load(&sh->stop)) {
		size_t len = make_chunk(buf, seq, comp_of(seq, 8192));
		if (rp_ringfile_append(sh->rf, buf, len, NULL) != 0 ||
		    (seq % 64 == 0 && rp_ringfile_poll(sh->rf, NULL) != 0))
			atomic_fetch_add(&sh->bad, 1);
		seq++;
	}
	if (rp_ringfile_sync(sh->rf, false, NULL) != 0)
		atomic_fetch_add(&sh->bad, 1);
	atomic_store(&sh->appended, seq);
	free(buf);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct shared *sh = arg;
	unsigned seed = (unsigned)(uintptr_t)&seed;
	while (!atomic_load(&sh->stop)) {
		struct rp_ringfile_stats st;
		rp_ringfile_stats(sh->rf, &st);
		uint64_t span = st.last_ts > st.first_ts ? st.last_ts - st.first_ts : 1;
		uint64_t t0 = st.first_ts + (uint64_t)rand_r(&seed) % span;
		uint64_t t1 = t0 + (uint64_t)rand_r(&seed) % span;
		struct rp_ringfile_iter *it;
		if (rp_ringfile_iter_new(sh->rf, t0, t1, &it) != 0) {
			atomic_fetch_add(&sh->bad, 1);
			continue;
		}
		const void *chunk;
		size_t len;
		struct rp_chunk_header h;
		uint64_t last = 0;
		bool first = true;
		int r;
		while ((r = rp_ringfile_iter_next(it, &chunk, &len, &h)) == 1) {
			if (!chunk_ok(chunk, len, h.seq) || (!first && h.seq <= last) ||
			    h.last_ts < t0 || h.first_ts > t1)
				atomic_fetch_add(&sh->bad, 1);
			first = false;
			last = h.seq;
			atomic_fetch_add(&sh->chunks, 1);
		}
		if (r != 0)
			atomic_fetch_add(&sh->bad, 1);
		rp_ringfile_iter_free(it);
		atomic_fetch_add(&sh->iterations, 1);
	}
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "concurrent.ring");
	struct shared sh = { .rf = open_ring(path, 8192, 16, 8, false) };
	pthread_t w, r[2];
	assert_int_equal(pthread_create(&w, NULL, writer_main, &sh), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&r[i], NULL, reader_main, &sh), 0);
	struct timespec two = { 2, 0 };
	nanosleep(&two, NULL);
	atomic_store(&sh.stop, true);
	pthread_join(w, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(r[i], NULL);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(sh.rf, &st);
	print_message("%lu appended, %lu reads in %lu windows, %llu overwritten under a reader\n",
		      atomic_load(&sh.appended), atomic_load(&sh.chunks),
		      atomic_load(&sh.iterations), (unsigned long long)st.overwritten_in_read);
	assert_int_equal(atomic_load(&sh.bad), 0);
	assert_true(atomic_load(&sh.appended) > 16);
	assert_true(atomic_load(&sh.chunks) > 0);
	assert_int_equal(st.written_chunks, atomic_load(&sh.appended));
	expect_range(sh.rf, st.next_seq - 16, st.next_seq);
	rp_ringfile_close(sh.rf);
}

struct pinrec {
	struct rp_ringfile *rf;
	uint32_t slots;
	unsigned saved[256];
	unsigned bad;
	atomic_bool unpinned;
	atomic_ulong late, total;
};

static int save_fn(void *ctx, const void *chunk, size_t len, const struct rp_chunk_header *h)
{
	struct pinrec *p = ctx;
	/* Called before the chunk that replaces it is queued. */
	if (!chunk_ok(chunk, len, h->seq) || rp_ringfile_next_seq(p->rf) != h->seq + p->slots)
		p->bad++;
	if (h->seq < 256)
		p->saved[h->seq]++;
	return 0;
}

static int save_count(void *ctx, const void *chunk, size_t len, const struct rp_chunk_header *h)
{
	struct pinrec *p = ctx;
	if (atomic_load(&p->unpinned))
		atomic_fetch_add(&p->late, 1);
	if (!chunk_ok(chunk, len, h->seq))
		p->bad++;
	atomic_fetch_add(&p->total, 1);
	return 0;
}

static void *pin_writer(void *arg)
{
	struct shared *sh = arg;
	unsigned char *buf = malloc(8192);
	uint64_t seq = rp_ringfile_next_seq(sh->rf);
	while (!atomic_load(&sh->stop)) {
		size_t len = make_chunk(buf, seq, comp_of(seq, 8192));
		if (rp_ringfile_append(sh->rf, buf, len, NULL) != 0)
			atomic_fetch_add(&sh->bad, 1);
		seq++;
	}
	free(buf);
	return NULL;
}

static void test_pins(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "pins.ring");
	const uint32_t slots = 8;
	struct pinrec *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->rf = open_ring(path, 8192, slots, 4, false);
	p->slots = slots;
	struct rp_ringfile_pin *pin;
	assert_int_equal(rp_ringfile_pin(p->rf, 5, 2, save_fn, p, &pin), -EINVAL);
	append_range(p->rf, 0, slots);
	sync_ok(p->rf);
	assert_int_equal(rp_ringfile_pin(p->rf, 2, 5, save_fn, p, &pin), 0);
	append_range(p->rf, slots, 31);
	rp_ringfile_unpin(p->rf, pin);
	for (unsigned s = 0; s < 256; s++)
		assert_int_equal(p->saved[s], s >= 2 && s <= 5);

	/* A pin reaching past what was written: 20..22 are gone already,
	 * 23..27 get overwritten by 31..35, the rest stay. */
	memset(p->saved, 0, sizeof(p->saved));
	assert_int_equal(rp_ringfile_pin(p->rf, 20, 40, save_fn, p, &pin), 0);
	append_range(p->rf, 31, 36);
	rp_ringfile_unpin(p->rf, pin);
	append_range(p->rf, 36, 60);
	for (unsigned s = 0; s < 256; s++)
		assert_int_equal(p->saved[s], s >= 23 && s <= 27);
	assert_int_equal(p->bad, 0);

	/* Unpin on another thread while the writer saves. */
	struct shared sh = { .rf = p->rf };
	assert_int_equal(rp_ringfile_pin(p->rf, 0, UINT64_MAX, save_count, p, &pin), 0);
	pthread_t w;
	assert_int_equal(pthread_create(&w, NULL, pin_writer, &sh), 0);
	struct timespec ms = { 0, 100 * 1000 * 1000 };
	nanosleep(&ms, NULL);
	rp_ringfile_unpin(p->rf, pin);
	atomic_store(&p->unpinned, true);
	nanosleep(&ms, NULL);
	atomic_store(&sh.stop, true);
	pthread_join(w, NULL);
	assert_int_equal(atomic_load(&sh.bad), 0);
	assert_true(atomic_load(&p->total) > 0);
	assert_int_equal(atomic_load(&p->late), 0);
	assert_int_equal(p->bad, 0);
	/* Pins still held at close are freed by it. */
	assert_int_equal(rp_ringfile_pin(p->rf, 0, 1, save_fn, p, &pin), 0);
	rp_ringfile_close(p->rf);
	free(p);
}

static void test_enospc(void **state)
{
	(void)state;
	char dir[PATH_LEN / 2], path[PATH_LEN];
	path_in(dir, "tiny");
	assert_int_equal(mkdir(dir, 0700), 0);
	if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0) {
		rmdir(dir);
		skip();
	}
	snprintf(path, sizeof(path), "%s/host.ring", dir);
	struct rp_ringfile_opts o = opts_for(65536, 64, 4, false);
	struct rp_err e;
	assert_int_equal(open_err(path, &o, &e), -ENOSPC);
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "not enough disk space for 4.0 MiB"));
	assert_non_null(strstr(e.msg, "lower the ring budget"));
	assert_int_equal(access(path, F_OK), -1); /* no partial file left */
	/* A budget that fits works. */
	struct rp_ringfile *rf = open_ring(path, 65536, 4, 4, false);
	append_range(rf, 0, 6);
	sync_ok(rf);
	expect_range(rf, 2, 6);
	rp_ringfile_close(rf);
	umount(dir);
	rmdir(dir);
}

static void test_geometry_kept(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "geometry.ring");
	struct rp_ringfile *rf = open_ring(path, 16384, 8, 4, false);
	append_range(rf, 0, 5);
	rp_ringfile_close(rf);
	rf = open_ring(path, 32768, 20, 4, false);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_true(st.geometry_kept);
	assert_int_equal(st.slot_size, 16384);
	assert_int_equal(st.slot_count, 8);
	assert_int_equal(st.recovered_chunks, 5);
	assert_int_equal(rp_ringfile_max_chunk(rf), 16384);
	append_range(rf, 5, 12);
	rp_ringfile_close(rf);
	rf = open_ring(path, 16384, 8, 4, false);
	rp_ringfile_stats(rf, &st);
	assert_false(st.geometry_kept);
	expect_range(rf, 4, 12);
	rp_ringfile_close(rf);
}

static void test_readonly_append(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "ro.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 4, 2, false);
	append_range(rf, 0, 2);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	unsigned char buf[8192];
	size_t len = make_chunk(buf, 2, 100);
	struct rp_err e = { 0 };
	assert_int_equal(rp_ringfile_append(rf, buf, len, &e), -EROFS);
	assert_non_null(strstr(e.msg, "read-only"));
	assert_int_equal(rp_ringfile_poll(rf, &e), 0);
	assert_int_equal(rp_ringfile_sync(rf, true, &e), 0);
	expect_range(rf, 0, 2);
	rp_ringfile_close(rf);
}

static void test_append_checks(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "checks.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 4, 2, false);
	append_range(rf, 0, 2);
	static unsigned char buf[3 * 8192];
	struct rp_err e = { 0 };
	size_t len = make_chunk(buf, 5, 100);
	assert_int_equal(rp_ringfile_append(rf, buf, len, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "expected seq 2"));
	len = make_chunk(buf, 2, 100);
	assert_int_equal(rp_ringfile_append(rf, buf, len + 10, &e), -EINVAL);
	buf[RP_CHUNK_HEADER_SIZE] ^= 1;
	assert_int_equal(rp_ringfile_append(rf, buf, len, &e), -EBADMSG);
	assert_non_null(strstr(e.msg, "refusing to append"));
	len = make_chunk(buf, 2, 8192);
	assert_int_equal(rp_ringfile_append(rf, buf, len, &e), -E2BIG);
	struct rp_chunk_header h = {
		.magic = RP_CHUNK_MAGIC, .version = 1, .header_size = 64, .codec = RP_CODEC_LZ4,
		.device_id = DEV_ID + 1, .seq = 2, .first_ts = 1, .last_ts = 2,
		.event_count = 1, .raw_size = 10, .comp_size = 10,
	};
	rp_chunk_header_write(&h, buf, buf + 64);
	assert_int_equal(rp_ringfile_append(rf, buf, 74, &e), -EINVAL);
	assert_int_equal(rp_ringfile_next_seq(rf), 2);
	append_range(rf, 2, 3);
	sync_ok(rf);
	expect_range(rf, 0, 3);
	rp_ringfile_close(rf);
}

static void test_queue_depth(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "qd.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 128, 32, false);
	append_range(rf, 0, 100);
	sync_ok(rf);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.written_chunks, 100);
	assert_int_equal(st.chunks, 100);
	expect_range(rf, 0, 100);
	rp_ringfile_close(rf);
	unlink(path);
	/* A queue deeper than the ring is capped below the slot count. */
	rf = open_ring(path, 8192, 4, 64, false);
	append_range(rf, 0, 21);
	sync_ok(rf);
	expect_range(rf, 17, 21);
	rp_ringfile_close(rf);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/ringprof-test-XXXXXX", tmp ? tmp : "/tmp");
	return mkdtemp(base) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_reopen),
		cmocka_unit_test(test_wraparound),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_bitflips),
		cmocka_unit_test(test_zeroed_and_stale_slots),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_links_and_fifos),
		cmocka_unit_test(test_buffered),
		cmocka_unit_test(test_direct),
		cmocka_unit_test(test_concurrent_readers),
		cmocka_unit_test(test_pins),
		cmocka_unit_test(test_enospc),
		cmocka_unit_test(test_geometry_kept),
		cmocka_unit_test(test_readonly_append),
		cmocka_unit_test(test_append_checks),
		cmocka_unit_test(test_queue_depth),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
