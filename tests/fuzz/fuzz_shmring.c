/* Fuzz the consumer side of producer rings against a hostile producer.
 *
 * Input byte 0 picks what the rest is, modulo 3:
 *  0  shared memory of a 4 KiB ring: tail u64, head - tail u16, dropped
 *     u64 (little-endian), then the data area from offset 0;
 *  1  a memfd handed to rp_shmring_map: shrink-sealed when the next byte
 *     is odd, a u16 size in 8-byte units, then the file's first bytes;
 *  2  one record handed straight to rp_rec_to_event.
 * The consumer must not crash, read out of bounds or loop, must hand over
 * only records that decode, and must leave the ring empty after a drain. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING_DATA 4096u

struct seen {
	uint64_t records;
	uint64_t sum; /* every decoded byte feeds it, so all get read */
};

static void check_event(const struct rp_rec *rec, const struct rp_event *ev, struct seen *s)
{
	if (ev->kind != rec->kind || ev->ts != rec->ts)
		abort();
	if (ev->name) {
		if (strlen(ev->name) > rec->name_len)
			abort();
		for (const char *c = ev->name; *c; c++)
			s->sum += (uint8_t)*c;
	}
	if (ev->kind == RP_EV_DEVICE_OP) {
		/* Its strings lie within the record, NUL-terminated. */
		const char *strs[] = { ev->u.op.hlo_op, ev->u.op.hlo_module };
		for (int i = 0; i < 2; i++) {
			if (!strs[i])
				continue;
			if ((const uint8_t *)strs[i] < (const uint8_t *)rec ||
			    (const uint8_t *)strs[i] + strlen(strs[i]) >= (const uint8_t *)rec + rec->size)
				abort();
			for (const char *c = strs[i]; *c; c++)
				s->sum += (uint8_t)*c;
		}
	}
	if (ev->kind == RP_EV_CPU_SAMPLE) {
		const uint8_t *end = (const uint8_t *)rec + rec->size;
		if (ev->u.sample.nframes > RP_STACK_MAX ||
		    ev->u.sample.nkernel > ev->u.sample.nframes ||
		    (const uint8_t *)(ev->u.sample.frames + ev->u.sample.nframes) > end)
			abort();
		for (unsigned i = 0; i < ev->u.sample.nframes; i++)
			s->sum += ev->u.sample.frames[i];
	}
}

static int on_record(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct seen *s = ctx;
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	if (rec->size < sizeof(*rec) || rec->size % 8 || rp_rec_to_event(r, rec, &ev, name) != 0)
		abort();
	check_event(rec, &ev, s);
	s->records++;
	return 0;
}

/* Drain until empty; every drain must consume everything published. */
static void drain_all(struct rp_shmring *r, const uint8_t *shm)
{
	struct seen s = { 0 };
	uint64_t corrupt = 0, head, tail;
	long n = rp_shmring_drain(r, on_record, &s, 0, &corrupt);
	memcpy(&head, shm + RP_SHM_OFF_HEAD, sizeof(head));
	memcpy(&tail, shm + RP_SHM_OFF_TAIL, sizeof(tail));
	if (n < 0 || (uint64_t)n != s.records || corrupt > 1 || head != tail)
		abort();
	if (rp_shmring_drain(r, on_record, &s, 0, &corrupt) != 0)
		abort();
}

static uint64_t get_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void fuzz_ring(const uint8_t *data, size_t size)
{
	static struct rp_shmring *ring;
	static uint8_t *shm;
	if (!ring) {
		if (rp_shmring_create(RING_DATA, 1, 2, RP_SHM_CLOCK_TSC, &ring, NULL) != 0)
			abort();
		shm = mmap(NULL, RP_SHM_HDR_SIZE + RING_DATA, PROT_READ | PROT_WRITE,
			   MAP_SHARED, rp_shmring_fd(ring), 0);
		if (shm == MAP_FAILED)
			abort();
	}
	if (size < 18)
		return;
	uint64_t tail = get_le(data, 8);
	uint64_t head = tail + get_le(data + 8, 2);
	memcpy(shm + RP_SHM_OFF_TAIL, &tail, sizeof(tail));
	memcpy(shm + RP_SHM_OFF_HEAD, &head, sizeof(head));
	memcpy(shm + RP_SHM_OFF_DROPPED, data + 10, 8);
	data += 18;
	size -= 18;
	uint8_t *area = shm + RP_SHM_HDR_SIZE;
	memset(area, 0, RING_DATA);
	memcpy(area, data, size < RING_DATA ? size : RING_DATA);
	drain_all(ring, shm);
}

static void fuzz_map(const uint8_t *data, size_t size)
{
	if (size < 3)
		return;
	int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		abort();
	size_t len = get_le(data + 1, 2) * 8;
	if (ftruncate(fd, (off_t)len) != 0)
		abort();
	size_t body = size - 3 < len ? size - 3 : len;
	if (body && pwrite(fd, data + 3, body, 0) != (ssize_t)body)
		abort();
	if (data[0] & 1)
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
	struct rp_shmring *r = NULL;
	struct rp_err err = { 0 };
	int rc = rp_shmring_map(fd, &r, &err);
	if (rc == 0) {
		uint8_t *shm = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ, MAP_SHARED, fd, 0);
		if (shm == MAP_FAILED)
			abort();
		drain_all(r, shm);
		munmap(shm, RP_SHM_HDR_SIZE);
		rp_shmring_close(r);
	} else if (rc != -EINVAL || err.code != rc || !err.msg[0]) {
		abort();
	}
	close(fd);
}

static void fuzz_record(const uint8_t *data, size_t size)
{
	static struct rp_shmring *ring;
	if (!ring && rp_shmring_create(RING_DATA, 1, 2, RP_SHM_CLOCK_MONOTONIC, &ring, NULL) != 0)
		abort();
	/* rp_rec_to_event may read rec->size bytes: give it all 64 KiB. */
	static uint64_t buf[65536 / 8];
	memset(buf, 0, sizeof(buf));
	memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
	const struct rp_rec *rec = (const struct rp_rec *)buf;
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	struct seen s = { 0 };
	if (rp_rec_to_event(ring, rec, &ev, name) == 0)
		check_event(rec, &ev, &s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		fuzz_ring(data + 1, size - 1);
		break;
	case 1:
		fuzz_map(data + 1, size - 1);
		break;
	default:
		fuzz_record(data + 1, size - 1);
		break;
	}
	return 0;
}
