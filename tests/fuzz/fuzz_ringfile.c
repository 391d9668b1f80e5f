/* Fuzz the ring file reader: the input is a whole ring file, version 1
 * (slots) or 2 (packed entries).  It is opened read-only (recovery), every
 * chunk is iterated and the stats are taken; whatever the bytes, nothing
 * may crash, hang or leak, only intact chunks may come out, in seq order,
 * and the counts must describe exactly what came out. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ringfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ring(struct rp_ringfile *rf)
{
	struct rp_ringfile_iter *it;
	if (rp_ringfile_iter_new(rf, 0, UINT64_MAX, &it) != 0)
		return;
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	uint64_t n = 0, last = 0, bytes = 0;
	while (rp_ringfile_iter_next(it, &chunk, &len, &h) == 1) {
		if (rp_chunk_header_check(chunk, len, NULL, NULL) != 0 || (n && h.seq <= last))
			abort();
		last = h.seq;
		bytes += len;
		n++;
	}
	rp_ringfile_iter_free(it);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	/* Nothing changes the file meanwhile: every chunk held is returned.
	 * Version 1 finds at most a chunk per slot, version 2 at most one per
	 * 64 bytes, within the budget. */
	uint64_t most = st.format_version == 1 ? st.slot_count : st.capacity_bytes / 64;
	uint64_t frames = st.format_version == 1 ? 0 : 32 * n;
	if (st.chunks != n || st.recovered_chunks != n ||
	    st.recovered_chunks + st.skipped_corrupt > most ||
	    st.bytes_used != bytes + frames || st.bytes_used > st.capacity_bytes ||
	    (n && (st.next_seq != last + 1 || st.first_ts > st.last_ts)))
		abort();
	if (rp_ringfile_append(rf, "", 0, NULL) != -EROFS)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-ringfile", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t put = 0;
	while (put < size) {
		ssize_t w = write(fd, data + put, size - put);
		if (w <= 0)
			break;
		put += (size_t)w;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct rp_ringfile *rf;
	struct rp_err err;
	if (put == size && rp_ringfile_open_readonly(path, &rf, &err) == 0) {
		check_ring(rf);
		rp_ringfile_close(rf);
	}
	close(fd);
	return 0;
}
