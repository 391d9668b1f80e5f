/* hostile-producer: what a producer that lies writes into its own ring,
 * for the hardening tests (test_hardening_producers.py).
 *
 *   hostile-producer PRODUCER_SOCKET
 *
 * Says hello as device "host", then writes a CPU sample and a GPU kernel
 * naming pid 1, a counter "future" stamped 2^64-1, a counter "honest" stamped now, and
 * sets the ring's drop counter to 2^63.  Waits until the daemon drained
 * the ring, then prints {"pid": ..., "tid": ...}. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hello.h"
#include "shmring.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: hostile-producer PRODUCER_SOCKET\n");
		return 2;
	}
	struct rp_hello hello = { .pid = (uint32_t)getpid(), .tid = (uint32_t)gettid() };
	snprintf(hello.device, sizeof(hello.device), "host");
	snprintf(hello.thread_name, sizeof(hello.thread_name), "hostile");
	struct rp_err err = { 0 };
	int fd;
	struct rp_shmring *ring;
	if (rp_hello_request(argv[1], &hello, &fd, &err) < 0 || rp_shmring_map(fd, &ring, &err) < 0) {
		fprintf(stderr, "hostile-producer: %s\n", err.msg);
		return 1;
	}
	uint64_t frames[1] = { 0x401000 };
	struct rp_event sample = { .kind = RP_EV_CPU_SAMPLE, .ts = rp_shmring_now(ring), .pid = 1,
				   .tid = hello.tid, .u.sample = { .nframes = 1, .frames = frames } };
	uint64_t now = rp_shmring_now(ring);
	struct rp_event kernel = { .kind = RP_EV_GPU_ACTIVITY, .ts = now, .pid = 1, .name = "kernel",
				   .u.gpu = { .end = now + 1000, .kind = 1 } };
	void *hdr = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (hdr == MAP_FAILED || !rp_shm_write_event(ring, &sample) ||
	    !rp_shm_write_event(ring, &kernel) ||
	    !rp_shm_counter(ring, UINT64_MAX, "future", 1) ||
	    !rp_shm_counter(ring, rp_shmring_now(ring), "honest", 2)) {
		fprintf(stderr, "hostile-producer: cannot write the ring\n");
		return 1;
	}
	uint64_t huge = 1ull << 63;
	memcpy((char *)hdr + RP_SHM_OFF_DROPPED, &huge, sizeof(huge));
	/* Until the daemon took every record (tail reached head), 10 s at most. */
	for (int i = 0; i < 1000; i++) {
		uint64_t head, tail;
		memcpy(&head, (char *)hdr + RP_SHM_OFF_HEAD, sizeof(head));
		memcpy(&tail, (char *)hdr + RP_SHM_OFF_TAIL, sizeof(tail));
		if (head == tail && i > 20)
			break;
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	printf("{\"pid\": %d, \"tid\": %u}\n", (int)getpid(), hello.tid);
	fflush(stdout);
	/* Stay until told, so that the ring (and its per-producer counts) stay
	 * attached while the test reads the status. */
	(void)getchar();
	return 0;
}
