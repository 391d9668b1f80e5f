/* device-producer: a producer of device activity, as an in-workload
 * collector (CUPTI, a Neuron interposer) would be, for the device identity
 * tests (test_device_identity.py).
 *
 *   device-producer PRODUCER_SOCKET DEVICE [UID]
 *
 * Says hello as DEVICE with the stable id UID (none when left out), then
 * writes a counter "<DEVICE>.util" and a 200 us kernel "<DEVICE>_kernel" on
 * stream 7.  Prints "ready" once the daemon drained the ring, and stays
 * (its ring attached) until its stdin closes. */
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
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: device-producer PRODUCER_SOCKET DEVICE [UID]\n");
		return 2;
	}
	struct rp_hello hello = { .pid = (uint32_t)getpid(), .tid = (uint32_t)gettid() };
	snprintf(hello.device, sizeof(hello.device), "%s", argv[2]);
	snprintf(hello.device_uid, sizeof(hello.device_uid), "%s", argc == 4 ? argv[3] : "");
	snprintf(hello.thread_name, sizeof(hello.thread_name), "collector");
	struct rp_err err = { 0 };
	int fd;
	struct rp_shmring *ring;
	if (rp_hello_request(argv[1], &hello, &fd, &err) < 0 || rp_shmring_map(fd, &ring, &err) < 0) {
		fprintf(stderr, "device-producer: %s\n", err.msg);
		return 1;
	}
	char counter[80], kernel[80];
	snprintf(counter, sizeof(counter), "%s.util", argv[2]);
	snprintf(kernel, sizeof(kernel), "%s_kernel", argv[2]);
	/* Both ends in the ring's clock (ns, or TSC ticks). */
	uint64_t now = rp_shmring_now(ring);
	nanosleep(&(struct timespec){ 0, 200000 }, NULL);
	uint64_t later = rp_shmring_now(ring);
	struct rp_event k = { .kind = RP_EV_GPU_ACTIVITY, .ts = now, .name = kernel,
			      .u.gpu = { .end = later, .stream = 7, .correlation = 42,
					 .kind = RP_GPU_KERNEL } };
	void *hdr = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (hdr == MAP_FAILED || !rp_shm_counter(ring, now, counter, 3.5) ||
	    !rp_shm_write_event(ring, &k)) {
		fprintf(stderr, "device-producer: cannot write the ring\n");
		return 1;
	}
	/* Until the daemon took every record (tail reached head), 10 s at most. */
	for (int i = 0; i < 1000; i++) {
		uint64_t head, tail;
		memcpy(&head, (char *)hdr + RP_SHM_OFF_HEAD, sizeof(head));
		memcpy(&tail, (char *)hdr + RP_SHM_OFF_TAIL, sizeof(tail));
		if (head == tail)
			break;
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	printf("ready\n");
	fflush(stdout);
	(void)getchar();
	return 0;
}
