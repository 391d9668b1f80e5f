/* foreign-producer: an in-workload collector as a GPU shim would be one,
 * through the producer client alone (producer/producer.h), not
 * libringprof.
 *
 *   foreign-producer DEVICE COUNT
 *
 * Asks for a ring of its own on DEVICE with a foreign clock, CLOCK_REALTIME
 * ns (the epoch clock of many runtimes), declaring its offset to host
 * CLOCK_MONOTONIC ns in the hello; halfway it declares the offset anew
 * (a runtime resynchronising).  Writes COUNT instants "foreign.N" stamped
 * in that clock and prints one JSON line: the host-clock time each should
 * land at (ts + the offset declared when it was written), connected. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "producer.h"

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t realtime_to_host_offset(void)
{
	return clock_ns(CLOCK_MONOTONIC) - clock_ns(CLOCK_REALTIME);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: foreign-producer DEVICE COUNT\n");
		return 2;
	}
	int count = atoi(argv[2]);
	struct rp_producer_opts opts = {
		.device = argv[1],
		.clock = RP_SHM_CLOCK_FOREIGN,
		.clock_offset_ns = realtime_to_host_offset(),
	};
	struct rp_producer *p;
	struct rp_err err = { 0 };
	if (rp_producer_new(&opts, &p, &err) < 0) {
		fprintf(stderr, "foreign-producer: %s\n", err.msg);
		return 1;
	}
	rp_producer_set_thread_name(p, "foreign");
	int64_t offset = opts.clock_offset_ns;
	printf("{\"expected\": [");
	for (int i = 0; i < count; i++) {
		struct rp_shmring *ring = rp_producer_connect(p);
		if (i == count / 2 && ring) {
			/* The drain applies the offset it finds: records still
			 * in the ring would take the new one, so let it empty. */
			for (int w = 0; w < 5000 && rp_shmring_free_bytes(ring) <
					rp_shmring_capacity(ring); w++)
				nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
			/* A different but still true offset: realtime less 1 s is
			 * another clock, 1 s after host time. */
			offset = realtime_to_host_offset() + 1000000000;
			rp_producer_set_clock_offset(p, offset);
		}
		int64_t ts = clock_ns(CLOCK_REALTIME) - (i >= count / 2 ? 1000000000 : 0);
		char name[32];
		snprintf(name, sizeof(name), "foreign.%d", i);
		if (!ring || !rp_shm_instant(ring, (uint64_t)ts, name)) {
			fprintf(stderr, "foreign-producer: event %d not written\n", i);
			return 1;
		}
		printf("%s%lld", i ? ", " : "", (long long)(ts + offset));
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	printf("], \"connected\": %d}\n", rp_producer_connected(p));
	rp_producer_free(p);
	return 0;
}
