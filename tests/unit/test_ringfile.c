/* Ring files: creation, recovery from damage (torn writes at every
 * offset, bit flips, truncation, stale chunks of an older lap), packing
 * and wrap-around, windows, concurrent readers, pins, max_age, the
 * conversion of a version-1 file, and the errors a user can run into.
 * Chunks are framed payload bytes (rp_chunk_header_write), not encoded
 * events. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
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
#include "scratch.h"

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

static void sync_ok(struct rp_ringfile *rf)
{
	struct rp_err e = { 0 };
	int r = rp_ringfile_sync(rf, false, &e);
	if (r)
		print_message("sync: %s\n", e.msg);
	assert_int_equal(r, 0);
}

/* Chunks from .. to-1, each written before the next: where they go does
 * not depend on how fast writes complete. */
static void append_range(struct rp_ringfile *rf, uint64_t from, uint64_t to)
{
	uint32_t slot = (uint32_t)rp_ringfile_max_chunk(rf);
	for (uint64_t s = from; s < to; s++) {
		append_comp(rf, s, comp_of(s, slot));
		sync_ok(rf);
	}
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

/* Each chunk held, of any content: its seq and CRC32C, in order. */
static size_t collect_ids(struct rp_ringfile *rf, uint64_t *ids, size_t max)
{
	struct rp_ringfile_iter *it;
	assert_int_equal(rp_ringfile_iter_new(rf, 0, UINT64_MAX, &it), 0);
	const void *chunk;
	size_t len, n = 0;
	struct rp_chunk_header h;
	while (rp_ringfile_iter_next(it, &chunk, &len, &h) == 1) {
		assert_true(n < max);
		ids[n++] = h.seq << 32 | rp_crc32c(chunk, len);
	}
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

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* An entry of a version-2 file, as docs/ring-format.md section 4 tells a
 * reader to find it: file offset of its frame, position, seq, chunk
 * length. */
struct entry {
	uint64_t off, pos, seq;
	uint32_t len;
};

/* The entries of a file image whose frames are intact, in file order. */
static size_t find_entries(const unsigned char *img, size_t size, struct entry *out, size_t max)
{
	uint64_t data = le64(img + 104);
	size_t n = 0;
	for (uint64_t o = 0; o + 32 <= data && RP_RINGFILE_HEADER_SIZE + o + 32 <= size; o += 64) {
		const unsigned char *f = img + RP_RINGFILE_HEADER_SIZE + o;
		unsigned char salted[8 + 28];
		memcpy(salted, img + 112, 8);
		memcpy(salted + 8, f, 28);
		if (le32(f) != 0x45525052 || rp_crc32c(salted, sizeof(salted)) != le32(f + 28))
			continue;
		assert_true(n < max);
		out[n++] = (struct entry){ RP_RINGFILE_HEADER_SIZE + o, le64(f + 8), le64(f + 16),
					   le32(f + 4) };
	}
	return n;
}

/* The entry of seq in a file image. */
static struct entry entry_of_seq(const unsigned char *img, size_t size, uint64_t seq)
{
	static struct entry all[4096];
	size_t n = find_entries(img, size, all, 4096);
	for (size_t i = 0; i < n; i++)
		if (all[i].seq == seq)
			return all[i];
	fail_msg("no entry of seq %llu", (unsigned long long)seq);
	return all[0];
}

/* The chunks held are exactly a run ending at next - 1; returns its
 * first seq. */
static uint64_t expect_tail(struct rp_ringfile *rf, uint64_t next)
{
	static uint64_t seqs[8192];
	size_t n = collect(rf, 0, UINT64_MAX, seqs, 8192);
	assert_true(n > 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(seqs[i], next - n + i);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.chunks, n);
	assert_int_equal(st.oldest_seq, next - n);
	assert_int_equal(st.next_seq, next);
	return next - n;
}

static uint64_t oldest_of(struct rp_ringfile *rf)
{
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	return st.oldest_seq;
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
	assert_int_equal(st.format_version, 2);
	assert_int_equal(st.slot_size, 16384);
	assert_int_equal(st.capacity_bytes, 8 * 16384);
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

/* Chunks of any size fill the whole budget, oldest overwritten first; the
 * counts describe exactly the chunks held, before and after reopening. */
static void test_wraparound(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "wrap.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 8, 4, false);
	append_range(rf, 0, 200);
	uint64_t lo = 0;
	for (int pass = 0; pass < 2; pass++) {
		struct rp_ringfile_stats st;
		rp_ringfile_stats(rf, &st);
		if (pass == 0)
			lo = expect_tail(rf, 200);
		else
			expect_range(rf, lo, 200);
		assert_true(lo > 0);
		assert_int_equal(st.first_ts, ts_first(lo));
		assert_int_equal(st.last_ts, ts_last(199));
		uint64_t events = 0, bytes = 0, raw = 0, dropped = 0;
		for (uint64_t s = lo; s < 200; s++) {
			uint32_t comp = comp_of(s, 8192);
			events += events_of(s);
			bytes += 32 + RP_CHUNK_HEADER_SIZE + comp;
			raw += comp * 2 + 8;
			dropped += dropped_of(s);
		}
		assert_int_equal(st.events, events);
		assert_int_equal(st.bytes_used, bytes);
		assert_int_equal(st.raw_bytes, raw);
		assert_int_equal(st.dropped, dropped);
		assert_int_equal(st.skipped_corrupt, 0);
		assert_int_equal(st.recovered_chunks, pass ? 200 - lo : 0);
		/* Full: less is free than the largest entry, its page and the
		 * 64-byte rounding of each entry. */
		assert_true(bytes + 8192 + 64 + 4096 + 64 * (200 - lo) >= st.capacity_bytes);
		rp_ringfile_close(rf);
		rf = open_ro(path);
	}
	rp_ringfile_close(rf);
}

/* At a light rate the ring holds many small chunks: the horizon is set
 * by bytes, not by a count of slots (version 1 held 8 here). */
static void test_small_chunks_packed(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "packed.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 16, 4, false);
	for (uint64_t s = 0; s < 3000; s++)
		append_comp(rf, s, 36 + (uint32_t)(s % 5)); /* entries of 192 bytes */
	sync_ok(rf);
	uint64_t lo = expect_tail(rf, 3000);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	print_message("%llu chunks of about 100 bytes held in %llu bytes\n",
		      (unsigned long long)st.chunks, (unsigned long long)st.capacity_bytes);
	/* Less is free than an entry, a page and the 64-byte rounding. */
	assert_true((3000 - lo) * 192 + 192 + 4096 >= st.capacity_bytes);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	expect_range(rf, lo, 3000);
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
	unsigned char *img;
	size_t size;
	read_file(path, &img, &size);
	struct entry e3 = entry_of_seq(img, size, 3), e2 = entry_of_seq(img, size, 2);
	free(img);

	/* Inside chunk 3: 0..2 survive, 3 is torn, the rest gone. */
	assert_int_equal(truncate(path, (off_t)e3.off + 5000), 0);
	expect_recovery(path, 3, 1, 3);
	/* At the start of entry 2: nothing torn. */
	assert_int_equal(truncate(path, (off_t)e2.off), 0);
	expect_recovery(path, 2, 0, 2);
	/* Inside the header. */
	assert_int_equal(truncate(path, 50), 0);
	struct rp_ringfile *bad = NULL;
	struct rp_err e = { 0 };
	assert_int_equal(rp_ringfile_open_readonly(path, &bad, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "truncated header"));
	assert_null(bad);

	/* Opening a truncated file for writing grows it back, keeping what
	 * it holds, and writes on after the last intact chunk. */
	unlink(path);
	rf = open_ring(path, ss, slots, 4, false);
	for (uint64_t s = 0; s < 6; s++)
		append_comp(rf, s, 10000);
	rp_ringfile_close(rf);
	/* Where entry 4 went this time (writes in flight move entries). */
	read_file(path, &img, &size);
	struct entry e4 = entry_of_seq(img, size, 4);
	free(img);
	assert_int_equal(truncate(path, (off_t)e4.off + 100), 0);
	rf = open_ring(path, ss, slots, 4, false);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.recovered_chunks, 4);
	assert_int_equal(st.skipped_corrupt, 1);
	assert_int_equal(st.next_seq, 4);
	struct stat fst;
	assert_int_equal(stat(path, &fst), 0);
	assert_int_equal(fst.st_size, RP_RINGFILE_HEADER_SIZE + slots * ss);
	for (uint64_t s = 4; s < 30; s++)
		append_comp(rf, s, 10000);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.skipped_corrupt, 0);
	uint64_t lo = expect_tail(rf, 30);
	assert_int_equal(st.recovered_chunks, 30 - lo);
	/* Entries of 10112 bytes in 128 KiB, each on a fresh page when the
	 * write before it is still in flight: 12 KiB apiece at worst. */
	assert_true(30 - lo >= 9);
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

/* Which entries of img a changed byte at file offset at belongs to. */
static void mark_entry(const struct entry *all, size_t n, uint64_t at, bool *hit)
{
	for (size_t i = 0; i < n; i++)
		if (at >= all[i].off && at < all[i].off + 32 + all[i].len)
			hit[all[i].seq] = true;
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
	static struct entry all[64];
	size_t nall = find_entries(pristine, size, all, 64);
	assert_int_equal(nall, slots); /* no wrap: every chunk is there */

	/* One bit flipped past the frame magic of ten entries: all ten
	 * caught. */
	memcpy(img, pristine, size);
	bool flipped[64] = { false };
	srand(11);
	for (int k = 0; k < 10;) {
		uint32_t i = (uint32_t)rand() % slots;
		if (flipped[all[i].seq])
			continue;
		flipped[all[i].seq] = true;
		k++;
		size_t at = 4 + (size_t)rand() % (32 + all[i].len - 4);
		img[all[i].off + at] ^= (unsigned char)(1u << (rand() % 8));
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
	 * chunks, every untouched entry found. */
	for (int round = 0; round < 40; round++) {
		memcpy(img, pristine, size);
		memset(flipped, 0, sizeof(flipped));
		int flips = 1 + rand() % 64;
		for (int k = 0; k < flips; k++) {
			size_t at = (size_t)rand() % size;
			img[at] ^= (unsigned char)(1u << (rand() % 8));
			mark_entry(all, nall, at, flipped);
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
		w = open_ro(path);
		rp_ringfile_stats(w, &st);
		assert_int_equal(st.next_seq, next + 3);
		rp_ringfile_close(w);
	}
	free(img);
	free(pristine);
}

/* A ring wrapped several times, written one chunk at a time: its image,
 * the seqs the writer holds, and its next seq. */
static void wrapped_image(const char *path, uint64_t upto, unsigned char **img, size_t *size,
			  uint64_t *lo)
{
	unlink(path);
	struct rp_ringfile *rf = open_ring(path, 8192, 8, 4, false);
	append_range(rf, 0, upto);
	*lo = expect_tail(rf, upto);
	rp_ringfile_close(rf);
	read_file(path, img, size);
}

static void test_zeroed_and_stale(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "zero.ring");
	struct rp_ringfile *rf = open_ring(path, 8192, 8, 4, false);
	append_range(rf, 0, 6);
	rp_ringfile_close(rf);
	unsigned char *img;
	size_t size;
	read_file(path, &img, &size);
	struct entry e2 = entry_of_seq(img, size, 2);
	free(img);
	static unsigned char zeros[8192];
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zeros, 32 + e2.len, (off_t)e2.off), 32 + e2.len);
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

	/* After laps, intact entries of older laps lie where the last lap's
	 * end was skipped (entries never straddle the end of the file):
	 * recovery returns what the writer held, never those. */
	path_in(path, "stale.ring");
	uint64_t lo, lo1;
	unsigned char *old;
	size_t osize;
	wrapped_image(path, 60, &old, &osize, &lo1);
	wrapped_image(path, 200, &img, &size, &lo);
	static struct entry all[4096];
	size_t n = find_entries(img, size, all, 4096);
	size_t stale = 0;
	uint64_t data = le64(img + 104);
	for (size_t i = 0; i < n; i++) {
		stale += all[i].seq < lo;
		/* Never across the end of the data area. */
		assert_true(all[i].off + 32 + all[i].len <= RP_RINGFILE_HEADER_SIZE + data);
	}
	rf = open_ro(path);
	expect_range(rf, lo, 200);
	rp_ringfile_close(rf);

	/* The same, made sure of: a lap of 1 KiB entries, then 12 KiB ones
	 * until one does not fit before the end and goes to the start,
	 * leaving the last pages as they were. */
	path_in(path, "tail.ring");
	rf = open_ring(path, 16384, 4, 4, false);
	uint64_t next = 0;
	for (; next < 64; next++)
		append_comp(rf, next, 928); /* 1024-byte entries: exactly a lap */
	for (; next < 70; next++) {
		append_comp(rf, next, 11900); /* 12032-byte entries: 5 fit */
		sync_ok(rf);
	}
	uint64_t tail_lo = expect_tail(rf, next);
	rp_ringfile_close(rf);
	unsigned char *timg;
	size_t tsize;
	read_file(path, &timg, &tsize);
	size_t tn = find_entries(timg, tsize, all, 4096);
	for (size_t i = 0; i < tn; i++)
		stale += all[i].seq < tail_lo;
	free(timg);
	print_message("%zu intact frames of older laps in the files\n", stale);
	assert_true(stale > 0);
	rf = open_ro(path);
	expect_range(rf, tail_lo, next);
	rp_ringfile_close(rf);
	path_in(path, "stale.ring");

	/* An old entry whose overwrite never reached the disk (its bytes put
	 * back from an earlier lap) does not belong to the ring any more. */
	struct entry e = { 0 };
	uint64_t newest_off = entry_of_seq(img, size, 199).off;
	size_t on = find_entries(old, osize, all, 4096);
	for (size_t i = 0; i < on && !e.len; i++)
		if (all[i].off + 32 + all[i].len + 8192 < newest_off || all[i].off > newest_off + 16384)
			e = all[i];
	assert_true(e.len > 0 && e.seq < lo);
	memcpy(img + e.off, old + e.off, 32 + e.len);
	write_file(path, img, size);
	rf = open_ro(path);
	static uint64_t held[4096];
	n = collect(rf, 0, UINT64_MAX, held, 4096);
	assert_true(n > 0 && held[0] >= lo && held[n - 1] == 199);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.next_seq, 200);
	assert_true(st.skipped_corrupt >= 1);
	rp_ringfile_close(rf);
	free(old);
	free(img);
}

/* A crash tears the newest write at any byte: recovery returns a run of
 * intact chunks ending just before it (or with it, once complete), never
 * older than what the writer held before it. */
static void test_torn_every_offset(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "torn.ring");
	unsigned char *before, *after, *img;
	size_t size, asize;
	uint64_t lo, lo_after;
	const uint64_t N = 120;
	wrapped_image(path, N, &before, &size, &lo);
	/* The same ring one chunk further (a bigger one, wider tear). */
	struct rp_ringfile *rf = open_ring(path, 8192, 8, 4, false);
	append_comp(rf, N, 8000);
	sync_ok(rf);
	lo_after = oldest_of(rf);
	rp_ringfile_close(rf);
	read_file(path, &after, &asize);
	assert_int_equal(asize, size);
	struct entry e = entry_of_seq(after, asize, N);
	uint64_t start = e.off / 4096 * 4096, end = (e.off + 32 + e.len + 4095) / 4096 * 4096;
	uint64_t full = e.off + 32 + e.len - start;
	img = malloc(size);
	assert_non_null(img);
	unsigned tries = 0;
	for (uint64_t k = 0; k <= end - start; k += k < 160 || k + 160 > full ? 1 : 23) {
		if (k > full + 160 && k < end - start)
			k = end - start;
		memcpy(img, before, size);
		memcpy(img + start, after + start, k);
		write_file(path, img, size);
		rf = open_ro(path);
		uint64_t seqs[1024];
		size_t n = collect(rf, 0, UINT64_MAX, seqs, 1024);
		assert_true(n > 0);
		for (size_t i = 1; i < n; i++)
			assert_int_equal(seqs[i], seqs[i - 1] + 1);
		assert_true(seqs[0] >= lo);
		if (k >= full) {
			assert_int_equal(seqs[n - 1], N);
			assert_true(seqs[0] >= lo_after);
		} else {
			assert_int_equal(seqs[n - 1], N - 1);
		}
		rp_ringfile_close(rf);
		tries++;
	}
	print_message("%u tears of a %u-byte entry checked\n", tries, 32 + e.len);
	free(img);
	free(before);
	free(after);
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
		put_le(img + 120, rp_crc32c(img, 120), 4);
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

	corrupt_header(path, pristine, size, 8, 0x01, true); /* version 3 */
	assert_int_equal(open_err(path, NULL, &e), -EPROTONOSUPPORT);
	assert_non_null(strstr(e.msg, "upgrade"));
	assert_int_equal(open_err(path, &o, &e), -EPROTONOSUPPORT);

	corrupt_header(path, pristine, size, 16, 0x01, true); /* largest chunk 8193 */
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
	uint64_t lo = expect_tail(rf, 40);
	rp_ringfile_close(rf);
	rf = open_ro(path);
	expect_range(rf, lo, 40);
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
	expect_tail(sh.rf, st.next_seq);
	rp_ringfile_close(sh.rf);
}

struct pinrec {
	struct rp_ringfile *rf;
	unsigned saved[256];
	unsigned bad;
	atomic_bool unpinned;
	atomic_ulong late, total;
};

static int save_fn(void *ctx, const void *chunk, size_t len, const struct rp_chunk_header *h)
{
	struct pinrec *p = ctx;
	/* Called before the chunk that overwrites it is queued. */
	if (!chunk_ok(chunk, len, h->seq) || rp_ringfile_next_seq(p->rf) <= h->seq)
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
	struct rp_ringfile_pin *pin;
	assert_int_equal(rp_ringfile_pin(p->rf, 5, 2, save_fn, p, &pin), -EINVAL);
	append_range(p->rf, 0, slots);
	sync_ok(p->rf);
	assert_int_equal(rp_ringfile_pin(p->rf, 2, 5, save_fn, p, &pin), 0);
	uint64_t next = slots;
	for (; oldest_of(p->rf) <= 5; next++)
		append_range(p->rf, next, next + 1);
	rp_ringfile_unpin(p->rf, pin);
	for (unsigned s = 0; s < 256; s++)
		assert_int_equal(p->saved[s], s >= 2 && s <= 5);
	/* A pin reaching past what was written: the chunks gone already are
	 * not saved, those overwritten before unpin are, once. */
	memset(p->saved, 0, sizeof(p->saved));
	uint64_t held_from = oldest_of(p->rf);
	assert_int_equal(rp_ringfile_pin(p->rf, held_from - 2, next + 4, save_fn, p, &pin), 0);
	append_range(p->rf, next, next + 5);
	sync_ok(p->rf);
	uint64_t held_at_unpin = oldest_of(p->rf);
	rp_ringfile_unpin(p->rf, pin);
	append_range(p->rf, next + 5, next + 40);
	assert_true(held_at_unpin > held_from && next + 40 < 256);
	for (unsigned s = 0; s < 256; s++)
		assert_int_equal(p->saved[s], s >= held_from && s < held_at_unpin);
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
	expect_tail(rf, 6);
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
	assert_int_equal(st.capacity_bytes, 8 * 16384);
	assert_int_equal(st.recovered_chunks, 5);
	assert_int_equal(rp_ringfile_max_chunk(rf), 16384);
	append_range(rf, 5, 12);
	rp_ringfile_close(rf);
	rf = open_ring(path, 16384, 8, 4, false);
	rp_ringfile_stats(rf, &st);
	assert_false(st.geometry_kept);
	expect_tail(rf, 12);
	rp_ringfile_close(rf);
}

/* A version-1 ring file as ringprof 0.1 wrote it (docs/ring-format.md,
 * version history): slot i of slot_size bytes holds the chunk whose
 * seq % slots == i.  Chunks from..to-1 of comp bytes each. */
static void make_v1(const char *path, uint32_t slot_size, uint32_t slots, uint64_t from,
		    uint64_t to, uint32_t comp)
{
	size_t size = RP_RINGFILE_HEADER_SIZE + (size_t)slots * slot_size;
	unsigned char *img = calloc(1, size);
	assert_non_null(img);
	memcpy(img, "RPRING01", 8);
	put_le(img + 8, 1, 4);
	put_le(img + 12, RP_RINGFILE_HEADER_SIZE, 4);
	put_le(img + 16, slot_size, 4);
	put_le(img + 20, slots, 4);
	put_le(img + 24, DEV_ID, 4);
	put_le(img + 28, 1, 4);
	put_le(img + 32, 1700000000000000000ull, 8);
	memcpy(img + 40, DEV, strlen(DEV));
	put_le(img + 104, rp_crc32c(img, 104), 4);
	for (uint64_t s = from; s < to; s++)
		make_chunk(img + RP_RINGFILE_HEADER_SIZE + (s % slots) * slot_size, s, comp);
	write_file(path, img, size);
	free(img);
}

/* A version-1 file is read as it is, and converted when a writer opens
 * it: its history stays, the writer goes on after it, nothing is left
 * behind. */
static void test_v1_converted(void **state)
{
	(void)state;
	char path[PATH_LEN], tmp[PATH_LEN + 8];
	path_in(path, "v1.ring");
	make_v1(path, 8192, 4, 3, 9, 3000); /* 3 and 4 overwritten by 7 and 8 */
	struct rp_ringfile *rf = open_ro(path);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.format_version, 1);
	expect_range(rf, 5, 9);
	rp_ringfile_close(rf);

	/* A leftover of a conversion cut short is replaced. */
	snprintf(tmp, sizeof(tmp), "%s.v2new", path);
	write_file(tmp, "junk", 4);
	rf = open_ring(path, 8192, 16, 4, false);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.format_version, 2);
	assert_int_equal(st.converted_chunks, 4);
	assert_int_equal(st.capacity_bytes, 16 * 8192);
	assert_false(st.geometry_kept);
	expect_range(rf, 5, 9);
	append_range(rf, 9, 12);
	rp_ringfile_close(rf);
	assert_int_equal(access(tmp, F_OK), -1);
	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.format_version, 2);
	assert_int_equal(st.converted_chunks, 0);
	expect_range(rf, 5, 12);
	rp_ringfile_close(rf);

	/* Slots larger than the new largest chunk: their chunks fit still,
	 * and into a smaller budget the newest go. */
	make_v1(path, 16384, 8, 0, 8, 12000);
	rf = open_ring(path, 8192, 4, 4, false);
	rp_ringfile_stats(rf, &st);
	assert_true(st.geometry_kept);
	assert_int_equal(st.slot_size, 16384);
	assert_int_equal(st.converted_chunks, 8);
	uint64_t lo = expect_tail(rf, 8);
	assert_int_equal(lo, 6); /* two entries of 12 KiB in 32 KiB */
	rp_ringfile_close(rf);

	/* Files ringprof 0.1 wrote (the fuzz corpus): the same chunks, byte
	 * for byte, before and after. */
	const char *corpus = getenv("RINGPROF_RINGFILE_CORPUS");
	const char *released[] = { "eight.ring", "wrapped.ring", "truncated.ring", "corrupt.ring" };
	for (size_t i = 0; corpus && i < sizeof(released) / sizeof(*released); i++) {
		char src[PATH_LEN];
		snprintf(src, sizeof(src), "%s/%s", corpus, released[i]);
		unsigned char *img;
		size_t size;
		read_file(src, &img, &size);
		write_file(path, img, size);
		free(img);
		rf = open_ro(path);
		uint64_t want[64], got[64];
		size_t n = collect_ids(rf, want, 64);
		rp_ringfile_close(rf);
		struct rp_ringfile_opts ro = opts_for(4096, 64, 4, false);
		ro.device_id = 1;
		assert_int_equal(rp_ringfile_open(path, &ro, &rf, NULL), 0);
		rp_ringfile_stats(rf, &st);
		assert_true(st.converted);
		assert_int_equal(st.converted_chunks, n);
		assert_int_equal(collect_ids(rf, got, 64), n);
		assert_memory_equal(got, want, n * sizeof(*got));
		rp_ringfile_close(rf);
		print_message("%s: %zu chunks of ringprof 0.1 converted\n", released[i], n);
	}
	if (!corpus)
		print_message("RINGPROF_RINGFILE_CORPUS unset: released files not tried\n");

	/* A version-1 file of another device is refused, untouched. */
	make_v1(path, 8192, 4, 0, 2, 100);
	struct rp_ringfile_opts o = opts_for(8192, 8, 4, false);
	o.device = "gpu1";
	struct rp_err e;
	assert_int_equal(open_err(path, &o, &e), -EINVAL);
	rf = open_ro(path);
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.format_version, 1);
	rp_ringfile_close(rf);
}

/* With max_age, chunks older than it (behind the newest) leave the ring
 * before the budget is used up; pins still get them. */
static void test_max_age(void **state)
{
	(void)state;
	char path[PATH_LEN];
	path_in(path, "age.ring");
	struct rp_ringfile_opts o = opts_for(8192, 64, 4, false);
	o.max_age_ns = 500; /* chunk s spans [1000 + 100 s, 1050 + 100 s] */
	struct rp_ringfile *rf = NULL;
	assert_int_equal(rp_ringfile_open(path, &o, &rf, NULL), 0);
	struct pinrec *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->rf = rf;
	struct rp_ringfile_pin *pin;
	assert_int_equal(rp_ringfile_pin(rf, 0, 3, save_fn, p, &pin), 0);
	append_range(rf, 0, 20);
	sync_ok(rf);
	rp_ringfile_unpin(rf, pin);
	/* Newest 19 ends at 2950: kept are those ending at 2450 or later. */
	expect_range(rf, 14, 20);
	for (unsigned s = 0; s < 8; s++)
		assert_int_equal(p->saved[s], s <= 3);
	assert_int_equal(p->bad, 0);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.max_age_ns, 500);
	rp_ringfile_close(rf);
	assert_int_equal(rp_ringfile_open(path, &o, &rf, NULL), 0);
	expect_range(rf, 14, 20);
	rp_ringfile_close(rf);
	free(p);
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
	for (uint64_t s = 0; s < 100; s++) /* many writes in flight */
		append_comp(rf, s, comp_of(s, 8192));
	sync_ok(rf);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	assert_int_equal(st.written_chunks, 100);
	expect_tail(rf, 100);
	rp_ringfile_close(rf);
	unlink(path);
	/* A queue deeper than the ring holds is capped below that. */
	rf = open_ring(path, 8192, 4, 64, false);
	for (uint64_t s = 0; s < 21; s++)
		append_comp(rf, s, comp_of(s, 8192));
	sync_ok(rf);
	expect_tail(rf, 21);
	rp_ringfile_close(rf);
}

static int setup(void **state)
{
	(void)state;
	return scratch_make(base, sizeof(base), "ringfile");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_reopen),
		cmocka_unit_test(test_wraparound),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_bitflips),
		cmocka_unit_test(test_zeroed_and_stale),
		cmocka_unit_test(test_torn_every_offset),
		cmocka_unit_test(test_small_chunks_packed),
		cmocka_unit_test(test_v1_converted),
		cmocka_unit_test(test_max_age),
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
