/* A writer process is killed with SIGKILL in the middle of a stream; its
 * ring file, reopened, holds every chunk sealed before the kill (within
 * the ring's capacity) and nothing torn or invented. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "drain.h"
#include "ringfile.h"
#include "scratch.h"

#define BUDGET (4u << 20) /* chunks of up to 64 KiB, sealed every 1 ms: the stream wraps */

/* What the child tells the parent after each completed flush. */
struct report {
	uint64_t last_sealed_seq;
	uint64_t events_sealed;
};

static void child_writer(const char *path, int report_fd)
{
	struct rp_ringfile *rf;
	struct rp_drain *d;
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = BUDGET, .slot_size = 64 << 10 };
	struct rp_drain_opts dopts = { .seal_interval_ns = 1000000 };
	if (rp_ringfile_open(path, &ro, &rf, NULL) < 0 || rp_drain_new(rf, &dopts, &d, NULL) < 0)
		_exit(3);
	for (uint64_t i = 0;; i++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = rp_clock_now_ns(), .pid = 1,
				       .tid = 1, .name = "seq", .u.counter.value = (double)i };
		if (rp_drain_add(d, &ev, NULL) < 0)
			_exit(4);
		if (i % 5000 == 4999) {
			if (rp_drain_flush(d, NULL) < 0)
				_exit(5);
			struct report r = { rp_ringfile_next_seq(rf) - 1, i + 1 };
			if (write(report_fd, &r, sizeof(r)) != sizeof(r))
				_exit(6);
		} else if (i % 500 == 0 && rp_drain_poll(d, NULL) < 0) {
			_exit(7);
		}
	}
}

static void test_sigkill_mid_stream(void **state)
{
	(void)state;
	char dir[64];
	assert_int_equal(scratch_make(dir, sizeof(dir), "crash"), 0);
	char path[128];
	scratch_pathf(path, sizeof(path), "%s/host.ring", dir);
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child_writer(path, fds[1]);
	}
	close(fds[1]);
	struct report last = { 0 }, r;
	int reports = 0;
	/* Let it wrap the ring a few times, then kill it between flushes. */
	while (reports < 400 && read(fds[0], &r, sizeof(r)) == sizeof(r)) {
		last = r;
		reports++;
	}
	kill(pid, SIGKILL);
	int status;
	waitpid(pid, &status, 0);
	assert_true(WIFSIGNALED(status));
	close(fds[0]);
	assert_int_equal(reports, 400);

	struct rp_err err = { 0 };
	struct rp_ringfile *rf;
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = BUDGET, .slot_size = 64 << 10 };
	assert_int_equal(rp_ringfile_open(path, &ro, &rf, &err), 0);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	/* Everything sealed before the kill is within reach of recovery. */
	assert_true(st.next_seq > last.last_sealed_seq);
	assert_true(st.chunks > 0);
	/* Small chunks packed: the ring holds most of its budget, not a
	 * chunk per 64 KiB. */
	assert_true(st.bytes_used >= st.capacity_bytes / 2);
	assert_true(st.chunks > st.capacity_bytes / (64 << 10));

	struct rp_ringfile_iter *it;
	struct rp_chunk_reader *reader;
	assert_int_equal(rp_ringfile_iter_new(rf, 0, UINT64_MAX, &it), 0);
	assert_int_equal(rp_chunk_reader_new(&reader), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	uint64_t expect_seq = st.oldest_seq, found = 0;
	double next_value = -1;
	while (rp_ringfile_iter_next(it, &chunk, &len, &hdr) == 1) {
		/* No gap among sealed chunks.  Past the last report, writes that
		 * were in flight at the kill may have landed out of order, so a
		 * torn one can leave a hole there. */
		if (hdr.seq <= last.last_sealed_seq)
			assert_int_equal(hdr.seq, expect_seq);
		else
			assert_true(hdr.seq >= expect_seq);
		if (hdr.seq != expect_seq)
			next_value = -1;
		expect_seq = hdr.seq + 1;
		found++;
		assert_int_equal(rp_chunk_reader_load(reader, chunk, len, &err), 0);
		struct rp_event ev;
		int rc;
		while ((rc = rp_chunk_reader_next(reader, &ev, &err)) == 1) {
			assert_int_equal(ev.kind, RP_EV_COUNTER);
			/* The events are exactly the stream, in order, nothing invented. */
			if (next_value >= 0)
				assert_true(ev.u.counter.value == next_value);
			next_value = ev.u.counter.value + 1;
		}
		assert_int_equal(rc, 0);
	}
	assert_int_equal(expect_seq, st.next_seq);
	assert_true(last.last_sealed_seq >= st.oldest_seq);
	/* Every chunk sealed before the kill that the ring can still hold is
	 * there; chunks appended after the last report may be there too. */
	assert_true(found >= last.last_sealed_seq + 1 - st.oldest_seq);
	assert_true(next_value >= (double)last.events_sealed);
	rp_chunk_reader_free(reader);
	rp_ringfile_iter_free(it);
	rp_ringfile_close(rf);
	assert_int_equal(scratch_remove(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigkill_mid_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
