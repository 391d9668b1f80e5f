/* Producer rings (shmring.h).
 *
 * Shared memory: a 4096-byte header page, then the data area.  head and
 * tail count bytes since creation (2^64 never wraps in practice); byte
 * position p lives at data[p & (size - 1)].  The producer writes a record,
 * then store-releases head; the consumer load-acquires head, copies the
 * records out, then store-releases tail.
 *
 * Records never wrap.  When one does not fit before the end of the data
 * area the producer skips to the start, covering the gap with an
 * RP_REC_PAD record.  Every size is a multiple of 8, so the gap is 0, 8 or
 * at least 16 bytes; an 8-byte gap cannot hold a record header, so it
 * carries no pad and both sides skip any gap under 16 bytes implicitly.
 * The skip and the record after it are published by one store of head.
 *
 * The consumer trusts nothing in shared memory: a producer may be buggy
 * or hostile and may rewrite bytes while they are read.  Each record is
 * therefore copied into private memory, and checked there, before fn sees
 * it. */
#include "shmring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"

#define HDR_SIZE ((size_t)RP_SHM_HDR_SIZE)
#define DATA_MIN ((size_t)4096)
#define DATA_MAX ((size_t)1 << 30)
#define SHM_VERSION 1u
static const char shm_magic[8] = "RPSHRING";

/* Largest record a producer writes: a CPU sample with a full stack (the
 * longest named record, GPU activity, is 312 bytes). */
#define REC_MAX (sizeof(struct rp_rec) + sizeof(struct rp_rec_sample) + \
		 RP_STACK_MAX * sizeof(uint64_t))
_Static_assert(REC_MAX % 8 == 0 && 2 * REC_MAX < DATA_MIN,
	       "a record plus the gap it skips fits the smallest ring");

/* Identity fields are written once by the creator.  head and dropped
 * (producer) and tail with beat (consumer) get 128 bytes each, so neither
 * a cache line nor its prefetched neighbour is shared between the sides. */
struct shm_ident {
	char magic[8];
	uint32_t version;
	uint32_t clock;
	uint64_t data_size;
	uint32_t pid, tid;
};
struct shm_hdr {
	struct shm_ident id;
	alignas(128) _Atomic uint64_t head;
	alignas(128) _Atomic uint64_t dropped;
	_Atomic int64_t clock_offset;
	alignas(128) _Atomic uint64_t tail;
	_Atomic uint64_t beat;
	_Atomic uint64_t consumer;
};
_Static_assert(sizeof(struct shm_hdr) <= HDR_SIZE &&
	       offsetof(struct shm_hdr, head) == RP_SHM_OFF_HEAD &&
	       offsetof(struct shm_hdr, dropped) == RP_SHM_OFF_DROPPED &&
	       offsetof(struct shm_hdr, clock_offset) == RP_SHM_OFF_CLOCK_OFFSET &&
	       offsetof(struct shm_hdr, tail) == RP_SHM_OFF_TAIL &&
	       offsetof(struct shm_hdr, beat) == RP_SHM_OFF_BEAT &&
	       offsetof(struct shm_hdr, consumer) == RP_SHM_OFF_CONSUMER,
	       "header layout as documented in shmring.h");
_Static_assert(sizeof(struct rp_rec) == 16, "record header is 16 bytes");
_Static_assert(sizeof(struct rp_gpu_launch) == 36 && sizeof(struct rp_rec_launch) == 40,
	       "the launch block is nine u32 and a pad");
_Static_assert(sizeof(struct rp_rec_gpu) == 40 &&
	       sizeof(struct rp_rec_api) == 16 &&
	       sizeof(struct rp_rec_sample) == 16 && sizeof(struct rp_rec_op) == 48,
	       "payloads are multiples of 8");
_Static_assert(sizeof(struct rp_rec) + sizeof(struct rp_rec_op) + 3 * (RP_NAME_MAX + 1) <= REC_MAX,
	       "the longest device op fits a record");

struct rp_shmring {
	/* Set up once; read by both sides. */
	struct shm_hdr *hdr;
	uint8_t *data;
	uint64_t size, mask;
	size_t map_len;
	int fd;
	uint32_t pid, tid;
	enum rp_shm_clock clock;
	/* The producer's private state, on a cache line of its own so that a
	 * consumer thread of the same process does not false-share it. */
	alignas(64) uint64_t head;
	uint64_t cached_tail;
	/* The consumer's, holding: where the next drain reads (freed up to
	 * released). */
	bool holding;
	uint64_t read, released;
};

/* Fixed payload size of each kind, and whether a name follows it.  CPU
 * samples add nframes frames; RP_EV_DROPS carries a uint64_t count. */
static const struct {
	uint8_t payload;
	bool named;
} kinds[RP_EV_PRODUCER_KIND_MAX + 1] = {
	[RP_EV_CPU_SAMPLE] = { sizeof(struct rp_rec_sample), false },
	[RP_EV_RANGE_BEGIN] = { 0, true },
	[RP_EV_RANGE_END] = { 0, false },
	[RP_EV_INSTANT] = { 0, true },
	[RP_EV_COUNTER] = { sizeof(struct rp_rec_counter), true },
	[RP_EV_GPU_ACTIVITY] = { sizeof(struct rp_rec_gpu), true },
	[RP_EV_API_CALL] = { sizeof(struct rp_rec_api), true },
	[RP_EV_PROCESS_NAME] = { 0, true },
	[RP_EV_THREAD_NAME] = { 0, true },
	[RP_EV_DROPS] = { sizeof(uint64_t), false },
	[RP_EV_DEVICE_OP] = { sizeof(struct rp_rec_op), true },
};

static size_t round8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* Maps fd (owned from here on) and fills a new ring from ident.  The
 * producer's mapping is populated, so that writing never faults; the
 * creator's is not: the pages are then allocated, and charged to the
 * memory cgroup of, the producer that writes them, and a ring asked for
 * and never used costs nothing. */
static int setup(int fd, size_t len, const struct shm_ident *id, bool populate,
		 struct rp_shmring **out, struct rp_err *err)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return rp_err_set(err, -e, "cannot map the %zu-byte producer ring: %s; "
				  "check the memory limits (ulimit -l, cgroup memory.max)",
				  len, strerror(e));
	}
	struct rp_shmring *r = aligned_alloc(alignof(struct rp_shmring), sizeof(*r));
	if (!r) {
		munmap(p, len);
		close(fd);
		return rp_err_set(err, -ENOMEM, "out of memory for a producer ring handle");
	}
	memset(r, 0, sizeof(*r));
	r->hdr = p;
	r->data = (uint8_t *)p + HDR_SIZE;
	r->size = id->data_size;
	r->mask = id->data_size - 1;
	r->map_len = len;
	r->fd = fd;
	r->pid = id->pid;
	r->tid = id->tid;
	r->clock = (enum rp_shm_clock)id->clock;
	r->head = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
	r->cached_tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	*out = r;
	return 0;
}

bool rp_shm_clock_valid(uint32_t clock)
{
	return clock == RP_SHM_CLOCK_MONOTONIC || clock == RP_SHM_CLOCK_TSC ||
	       clock == RP_SHM_CLOCK_FOREIGN;
}

static bool pow2_in_range(uint64_t n)
{
	return n >= DATA_MIN && n <= DATA_MAX && (n & (n - 1)) == 0;
}

int rp_shmring_create(size_t data_size, uint32_t pid, uint32_t tid,
		      enum rp_shm_clock clock, struct rp_shmring **out,
		      struct rp_err *err)
{
	if (!pow2_in_range(data_size))
		return rp_err_set(err, -EINVAL, "producer ring size %zu is not a power of "
				  "two between 4 KiB and 1 GiB; pick one such as 1 MiB",
				  data_size);
	if (!rp_shm_clock_valid(clock))
		return rp_err_set(err, -EINVAL, "unknown producer ring clock %d; use "
				  "RP_SHM_CLOCK_MONOTONIC, _TSC or _FOREIGN", (int)clock);
	int fd = memfd_create("ringprof-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return rp_err_set(err, -errno, "memfd_create failed: %s; ringprof needs "
				  "Linux 3.17 or later and memfd allowed by seccomp",
				  strerror(errno));
	size_t len = HDR_SIZE + data_size;
	if (ftruncate(fd, (off_t)len) < 0) {
		int e = errno;
		close(fd);
		return rp_err_set(err, -e, "cannot size the producer ring to %zu bytes: %s; "
				  "free memory or choose a smaller ring", len, strerror(e));
	}
	/* Sealed against resizing, so a mapper is safe from SIGBUS; the
	 * mapper checks the shrink seal. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = errno;
		close(fd);
		return rp_err_set(err, -e, "cannot seal the producer ring memfd: %s",
				  strerror(e));
	}
	struct shm_ident id = {
		.version = SHM_VERSION,
		.clock = (uint32_t)clock,
		.data_size = data_size,
		.pid = pid,
		.tid = tid,
	};
	memcpy(id.magic, shm_magic, sizeof(id.magic));
	int rc = setup(fd, len, &id, false, out, err);
	if (rc == 0) {
		(*out)->hdr->id = id;
		atomic_store_explicit(&(*out)->hdr->beat, rp_clock_now_ns(),
				      memory_order_relaxed);
	}
	return rc;
}

int rp_shmring_map(int fd, struct rp_shmring **out, struct rp_err *err)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return rp_err_set(err, -EINVAL, "fd %d is not an open file descriptor; "
				  "pass the fd of a producer ring (rp_shmring_fd)", fd);
	/* Without the shrink seal the other side could truncate the file
	 * and turn our reads into SIGBUS; a write seal would keep us from
	 * mapping it writable.  Rings have the one and never the other. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || seals < 0 || !(seals & F_SEAL_SHRINK) ||
	    (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
		return rp_err_set(err, -EINVAL, "fd %d is not a ringprof producer ring "
				  "(not a memfd sealed against shrinking); pass the fd "
				  "from rp_shmring_fd", fd);
	if (st.st_size < (off_t)(HDR_SIZE + DATA_MIN) ||
	    st.st_size > (off_t)(HDR_SIZE + DATA_MAX))
		return rp_err_set(err, -EINVAL, "fd %d is not a ringprof producer ring: "
				  "its size %lld is out of range", fd,
				  (long long)st.st_size);
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return rp_err_set(err, -errno, "cannot dup producer ring fd %d: %s; "
				  "raise the open file limit (ulimit -n)", fd,
				  strerror(errno));
	struct rp_shmring *r;
	size_t len = (size_t)st.st_size;
	struct shm_ident id = { .data_size = len - HDR_SIZE };
	int rc = setup(dfd, len, &id, true, &r, err);
	if (rc < 0)
		return rc;
	/* Check one private copy, so the header cannot change under us. */
	memcpy(&id, &r->hdr->id, sizeof(id));
	const char *bad = NULL;
	if (memcmp(id.magic, shm_magic, sizeof(id.magic)) != 0)
		bad = "its magic is wrong";
	else if (id.version != SHM_VERSION)
		bad = "its version is not 1 (a newer or older ringprof made it)";
	else if (!pow2_in_range(id.data_size) || id.data_size != len - HDR_SIZE)
		bad = "its data size does not match the file size";
	else if (!rp_shm_clock_valid(id.clock))
		bad = "its clock is unknown";
	if (bad) {
		rp_shmring_close(r);
		return rp_err_set(err, -EINVAL, "fd %d is not a ringprof producer ring: "
				  "%s; pass the fd from rp_shmring_fd of the same "
				  "ringprof version", fd, bad);
	}
	r->pid = id.pid;
	r->tid = id.tid;
	r->clock = (enum rp_shm_clock)id.clock;
	*out = r;
	return 0;
}

int rp_shmring_adopt(int fd, uint32_t pid, uint32_t tid, uint64_t consumer,
		     struct rp_shmring **out, struct rp_err *err)
{
	int rc = rp_shmring_map(fd, out, err);
	if (rc < 0)
		return rc;
	struct rp_shmring *r = *out;
	if (atomic_load_explicit(&r->hdr->consumer, memory_order_relaxed) == consumer) {
		rp_shmring_close(r);
		return rp_err_set(err, -EALREADY, "this ringprofd drains the offered ring "
				  "already");
	}
	r->pid = pid;
	r->tid = tid;
	/* For tools that read the header; the consumer uses its own copy. */
	r->hdr->id.pid = pid;
	r->hdr->id.tid = tid;
	return 0;
}

void rp_shmring_set_consumer(struct rp_shmring *r, uint64_t consumer)
{
	atomic_store_explicit(&r->hdr->consumer, consumer, memory_order_relaxed);
	atomic_store_explicit(&r->hdr->beat, rp_clock_now_ns(), memory_order_relaxed);
}

int rp_shmring_fd(const struct rp_shmring *r)
{
	return r->fd;
}

int rp_shmring_take_fd(struct rp_shmring *r)
{
	int fd = r->fd;
	r->fd = -1;
	return fd;
}

void rp_shmring_close(struct rp_shmring *r)
{
	if (!r)
		return;
	munmap(r->hdr, r->map_len);
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}

uint32_t rp_shmring_pid(const struct rp_shmring *r)
{
	return r->pid;
}

uint32_t rp_shmring_tid(const struct rp_shmring *r)
{
	return r->tid;
}

enum rp_shm_clock rp_shmring_clock(const struct rp_shmring *r)
{
	return r->clock;
}

size_t rp_shmring_capacity(const struct rp_shmring *r)
{
	return r->size;
}

/* The other clocks, out of put()'s way: a call there would make every
 * append save registers.  A foreign clock's now is the host's less its
 * offset, which the drain adds back. */
__attribute__((noinline, cold)) static uint64_t stamp_other(const struct rp_shmring *r)
{
	if (r->clock == RP_SHM_CLOCK_FOREIGN)
		return rp_clock_now_ns() - (uint64_t)rp_shmring_clock_offset(r);
	return rp_clock_now_ns();
}

/* Inlined into put(): rp_shmring_now, being exported from PIC code, is
 * not (it could be interposed). */
static inline uint64_t stamp(const struct rp_shmring *r)
{
	return __builtin_expect(r->clock == RP_SHM_CLOCK_TSC, 1) ? rp_rdtsc() : stamp_other(r);
}

uint64_t rp_shmring_now(const struct rp_shmring *r)
{
	return stamp(r);
}

void rp_shmring_set_clock_offset(struct rp_shmring *r, int64_t offset_ns)
{
	atomic_store_explicit(&r->hdr->clock_offset, offset_ns, memory_order_relaxed);
}

int64_t rp_shmring_clock_offset(const struct rp_shmring *r)
{
	return atomic_load_explicit(&r->hdr->clock_offset, memory_order_relaxed);
}

uint64_t rp_shmring_dropped(const struct rp_shmring *r)
{
	return atomic_load_explicit(&r->hdr->dropped, memory_order_relaxed);
}

size_t rp_shmring_free_bytes(struct rp_shmring *r)
{
	r->cached_tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	uint64_t used = r->head - r->cached_tail;
	return used < r->size ? (size_t)(r->size - used) : 0;
}

uint64_t rp_shmring_consumer_beat_ns(const struct rp_shmring *r)
{
	return atomic_load_explicit(&r->hdr->beat, memory_order_relaxed);
}

/* Only the producer writes dropped, so a plain add suffices (no lock
 * prefix). */
__attribute__((noinline, cold)) static bool drop(struct rp_shmring *r)
{
	uint64_t d = atomic_load_explicit(&r->hdr->dropped, memory_order_relaxed);
	atomic_store_explicit(&r->hdr->dropped, d + 1, memory_order_relaxed);
	return false;
}

/* Append one record: header, payload p1 (n1 bytes), p2 (n2), name (nlen),
 * stamped with ts, or (now) with the clock once it is known to fit.
 * Inlined into each writer so that constant sizes and now fold away. */
static inline __attribute__((always_inline)) bool
put(struct rp_shmring *r, bool now, uint8_t kind, uint32_t tid, uint64_t ts,
    const void *p1, size_t n1, const void *p2, size_t n2,
    const char *name, size_t nlen)
{
	size_t size = round8(sizeof(struct rp_rec) + n1 + n2 + nlen);
	uint64_t head = r->head;
	uint64_t off = head & r->mask;
	uint64_t gap = r->size - off;
	/* A record that does not fit before the end also consumes the gap;
	 * need stays below 2 * REC_MAX, far under the smallest ring. */
	uint64_t need = size <= gap ? size : gap + size;
	if (head - r->cached_tail > r->size - need) {
		/* Looks full: only now read the consumer's cache line.  A
		 * tail beyond head (a confused consumer) also reads as full. */
		r->cached_tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
		if (head - r->cached_tail > r->size - need)
			return drop(r);
	}
	if (now)
		ts = stamp(r);
	uint8_t *p = r->data + off;
	if (size > gap) {
		if (gap >= sizeof(struct rp_rec)) {
			struct rp_rec pad = { .size = (uint16_t)gap, .kind = RP_REC_PAD };
			memcpy(p, &pad, sizeof(pad));
		}
		p = r->data;
	}
	struct rp_rec h = {
		.size = (uint16_t)size,
		.kind = kind,
		.name_len = (uint8_t)nlen,
		.tid = tid,
		.ts = ts,
	};
	memcpy(p, &h, sizeof(h));
	/* The format wants the padding after a name zeroed: clear the last
	 * word, which the name then partly overwrites. */
	if (nlen & 7)
		memset(p + size - 8, 0, 8);
	p += sizeof(h);
	if (n1)
		memcpy(p, p1, n1);
	if (n2)
		memcpy(p + n1, p2, n2);
	/* Names of 8 to 16 bytes, the common case, go as two overlapping
	 * words rather than through a call to memcpy: that saves about 1 ns
	 * of the 4 an append costs. */
	if (nlen >= 8 && nlen <= 16) {
		uint64_t w0, w1;
		memcpy(&w0, name, 8);
		memcpy(&w1, name + nlen - 8, 8);
		memcpy(p + n1 + n2, &w0, 8);
		memcpy(p + n1 + n2 + nlen - 8, &w1, 8);
	} else if (nlen) {
		memcpy(p + n1 + n2, name, nlen);
	}
	r->head = head + need;
	atomic_store_explicit(&r->hdr->head, head + need, memory_order_release);
	return true;
}

static size_t name_len(const char *name)
{
	return name ? strnlen(name, RP_NAME_MAX) : 0;
}

bool rp_shm_range_begin(struct rp_shmring *r, uint64_t ts, const char *name)
{
	return put(r, false, RP_EV_RANGE_BEGIN, 0, ts, NULL, 0, NULL, 0, name, name_len(name));
}

bool rp_shm_range_end(struct rp_shmring *r, uint64_t ts)
{
	return put(r, false, RP_EV_RANGE_END, 0, ts, NULL, 0, NULL, 0, NULL, 0);
}

bool rp_shm_instant(struct rp_shmring *r, uint64_t ts, const char *name)
{
	return put(r, false, RP_EV_INSTANT, 0, ts, NULL, 0, NULL, 0, name, name_len(name));
}

bool rp_shm_counter(struct rp_shmring *r, uint64_t ts, const char *name, double value)
{
	struct rp_rec_counter c = { value };
	return put(r, false, RP_EV_COUNTER, 0, ts, &c, sizeof(c), NULL, 0, name, name_len(name));
}

bool rp_shm_range_begin_now(struct rp_shmring *r, const char *name)
{
	return put(r, true, RP_EV_RANGE_BEGIN, 0, 0, NULL, 0, NULL, 0, name, name_len(name));
}

bool rp_shm_range_end_now(struct rp_shmring *r)
{
	return put(r, true, RP_EV_RANGE_END, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

bool rp_shm_instant_now(struct rp_shmring *r, const char *name)
{
	return put(r, true, RP_EV_INSTANT, 0, 0, NULL, 0, NULL, 0, name, name_len(name));
}

bool rp_shm_counter_now(struct rp_shmring *r, const char *name, double value)
{
	struct rp_rec_counter c = { value };
	return put(r, true, RP_EV_COUNTER, 0, 0, &c, sizeof(c), NULL, 0, name, name_len(name));
}

bool rp_shm_thread_name(struct rp_shmring *r, uint64_t ts, const char *name)
{
	return put(r, false, RP_EV_THREAD_NAME, 0, ts, NULL, 0, NULL, 0, name, name_len(name));
}

bool rp_shm_process_name(struct rp_shmring *r, uint64_t ts, const char *name)
{
	return put(r, false, RP_EV_PROCESS_NAME, 0, ts, NULL, 0, NULL, 0, name, name_len(name));
}

/* Returns false without counting a drop for a kind producers cannot
 * write: that is a caller bug, not a full ring. */
bool rp_shm_write_event(struct rp_shmring *r, const struct rp_event *ev)
{
	unsigned k = ev->kind;
	if (!rp_event_producer_kind(k))
		return false;
	size_t nlen = kinds[k].named ? name_len(ev->name) : 0;
	switch (k) {
	case RP_EV_CPU_SAMPLE: {
		/* Deeper stacks keep their leaf end. */
		uint16_t n = ev->u.sample.frames ? ev->u.sample.nframes : 0;
		if (n > RP_STACK_MAX)
			n = RP_STACK_MAX;
		struct rp_rec_sample s = {
			.pid = ev->pid,
			.cpu = ev->u.sample.cpu,
			.nframes = n,
			.nkernel = ev->u.sample.nkernel < n ? ev->u.sample.nkernel : n,
		};
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &s, sizeof(s),
			   ev->u.sample.frames, n * sizeof(uint64_t), NULL, 0);
	}
	case RP_EV_COUNTER: {
		struct rp_rec_counter c = { ev->u.counter.value };
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &c, sizeof(c), NULL, 0,
			   ev->name, nlen);
	}
	case RP_EV_GPU_ACTIVITY: {
		struct rp_rec_gpu g = {
			.end = ev->u.gpu.end,
			.correlation = ev->u.gpu.correlation,
			.bytes = ev->u.gpu.bytes,
			.device = ev->u.gpu.device,
			.stream = ev->u.gpu.stream,
			.pid = ev->pid,
			.kind = ev->u.gpu.kind,
		};
		struct rp_rec_launch l = { .launch = ev->u.gpu.launch };
		if (l.launch.block[0])
			g.flags = RP_REC_GPU_LAUNCH;
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &g, sizeof(g), &l,
			   g.flags ? sizeof(l) : 0, ev->name, nlen);
	}
	case RP_EV_API_CALL: {
		struct rp_rec_api a = { .duration = ev->u.api.duration,
					.device = ev->u.api.device,
					.correlation = ev->u.api.correlation };
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &a, sizeof(a), NULL, 0,
			   ev->name, nlen);
	}
	case RP_EV_DROPS:
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &ev->u.drops.count,
			   sizeof(uint64_t), NULL, 0, NULL, 0);
	case RP_EV_DEVICE_OP: {
		char text[2 * (RP_NAME_MAX + 1)];
		size_t op = name_len(ev->u.op.hlo_op), mod = name_len(ev->u.op.hlo_module);
		struct rp_rec_op o = {
			.end = ev->u.op.end,
			.program_id = ev->u.op.program_id,
			.flops = ev->u.op.flops,
			.bytes_accessed = ev->u.op.bytes_accessed,
			.device = ev->u.op.device,
			.line = ev->u.op.line,
			.pid = ev->pid,
			.op_len = (uint16_t)(op ? op + 1 : 0),
			.module_len = (uint16_t)(mod ? mod + 1 : 0),
		};
		memcpy(text, ev->u.op.hlo_op ? ev->u.op.hlo_op : "", op);
		text[op] = 0;
		memcpy(text + o.op_len, ev->u.op.hlo_module ? ev->u.op.hlo_module : "", mod);
		text[o.op_len + mod] = 0;
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, &o, sizeof(o), text,
			   (size_t)o.op_len + o.module_len, ev->name, nlen);
	}
	default:
		return put(r, false, (uint8_t)k, ev->tid, ev->ts, NULL, 0, NULL, 0,
			   ev->name, nlen);
	}
}

/* Whether rec (rec->size readable bytes) is a record a producer could
 * have written: known kind, and a size that is exactly header, payload
 * and name rounded up to 8. */
static bool rec_valid(const struct rp_rec *rec)
{
	if (!rp_event_producer_kind(rec->kind))
		return false;
	size_t payload = kinds[rec->kind].payload;
	if (rec->name_len && !kinds[rec->kind].named)
		return false;
	if (rec->kind == RP_EV_CPU_SAMPLE) {
		struct rp_rec_sample s;
		if (rec->size < sizeof(*rec) + sizeof(s))
			return false;
		memcpy(&s, rec + 1, sizeof(s));
		if (s.nframes > RP_STACK_MAX || s.nkernel > s.nframes)
			return false;
		payload += s.nframes * sizeof(uint64_t);
	}
	if (rec->kind == RP_EV_GPU_ACTIVITY) {
		struct rp_rec_gpu g;
		if (rec->size < sizeof(*rec) + sizeof(g))
			return false;
		memcpy(&g, rec + 1, sizeof(g));
		if (g.flags & ~RP_REC_GPU_LAUNCH)
			return false;
		if (g.flags & RP_REC_GPU_LAUNCH)
			payload += sizeof(struct rp_rec_launch);
	}
	if (rec->kind == RP_EV_DEVICE_OP) {
		/* Each string present ends in its NUL, within RP_NAME_MAX. */
		struct rp_rec_op o;
		if (rec->size < sizeof(*rec) + sizeof(o))
			return false;
		memcpy(&o, rec + 1, sizeof(o));
		if (o.op_len > RP_NAME_MAX + 1 || o.module_len > RP_NAME_MAX + 1 ||
		    rec->size < sizeof(*rec) + sizeof(o) + o.op_len + o.module_len)
			return false;
		const char *text = (const char *)(rec + 1) + sizeof(o);
		if ((o.op_len && text[o.op_len - 1]) ||
		    (o.module_len && text[o.op_len + o.module_len - 1]))
			return false;
		payload += (size_t)o.op_len + o.module_len;
	}
	return rec->size == round8(sizeof(*rec) + payload + rec->name_len);
}

long rp_shmring_drain(struct rp_shmring *r, rp_shmring_fn fn, void *ctx,
		      size_t max, uint64_t *corrupt)
{
	struct shm_hdr *h = r->hdr;
	uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
	uint64_t tail = r->holding ? r->read
				   : atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint64_t published = tail;
	uint64_t buf[REC_MAX / sizeof(uint64_t)];
	struct rp_rec *rec = (struct rp_rec *)buf;
	long n = 0;
	int rc = 0;

	atomic_store_explicit(&h->beat, rp_clock_now_ns(), memory_order_relaxed);
	if (head - tail > r->size)
		goto corrupt;
	while (tail != head && (max == 0 || (size_t)n < max)) {
		uint64_t off = tail & r->mask;
		uint64_t gap = r->size - off;
		uint64_t avail = head - tail;
		if (gap < sizeof(struct rp_rec)) {
			/* The implicit skip is only ever published together
			 * with the record after it. */
			if (avail < gap + sizeof(struct rp_rec))
				goto corrupt;
			tail += gap;
			continue;
		}
		memcpy(rec, r->data + off, sizeof(*rec));
		if (rec->size < sizeof(*rec) || rec->size % 8 || rec->size > gap ||
		    rec->size > avail)
			goto corrupt;
		if (rec->kind == RP_REC_PAD) {
			if (rec->size != gap)
				goto corrupt;
			tail += gap;
			continue;
		}
		if (rec->size > REC_MAX)
			goto corrupt;
		/* Word by word: records are short, and a memcpy of variable
		 * length into this aligned buffer becomes a slow rep movsq. */
		for (size_t w = 2; w < rec->size / 8u; w++)
			memcpy(&buf[w], r->data + off + w * 8u, 8);
		if (!rec_valid(rec))
			goto corrupt;
		rc = fn(ctx, r, rec);
		if (rc < 0)
			break;
		tail += rec->size;
		n++;
		/* Free space as we go on long drains, so the producer does not
		 * see a full ring that is mostly read already. */
		if (!r->holding && tail - published >= r->size / 4) {
			atomic_store_explicit(&h->tail, tail, memory_order_release);
			published = tail;
		}
	}
	if (r->holding)
		r->read = tail;
	else if (tail != published)
		atomic_store_explicit(&h->tail, tail, memory_order_release);
	return rc < 0 ? rc : n;

corrupt:
	if (corrupt)
		(*corrupt)++;
	if (r->holding)
		r->read = head;
	else
		atomic_store_explicit(&h->tail, head, memory_order_release);
	return n;
}

void rp_shmring_hold(struct rp_shmring *r)
{
	r->holding = true;
	r->read = r->released = atomic_load_explicit(&r->hdr->tail, memory_order_relaxed);
}

uint64_t rp_shmring_release(struct rp_shmring *r)
{
	uint64_t held = r->read - r->released;
	if (held)
		atomic_store_explicit(&r->hdr->tail, r->read, memory_order_release);
	r->released = r->read;
	return held;
}

uint64_t rp_shmring_held(const struct rp_shmring *r)
{
	return r->read - r->released;
}

int rp_rec_to_event(const struct rp_shmring *r, const struct rp_rec *rec,
		    struct rp_event *ev, char namebuf[RP_NAME_MAX + 1])
{
	if (!rec_valid(rec))
		return -EBADMSG;
	const uint8_t *payload = (const uint8_t *)(rec + 1);
	memset(ev, 0, sizeof(*ev));
	ev->kind = rec->kind;
	ev->ts = rec->ts;
	ev->pid = r->pid;
	ev->tid = rec->tid ? rec->tid : r->tid;
	size_t name_at = kinds[rec->kind].payload;
	if (rec->kind == RP_EV_DEVICE_OP) {
		struct rp_rec_op o;
		memcpy(&o, payload, sizeof(o));
		const char *text = (const char *)payload + sizeof(o);
		if (o.pid)
			ev->pid = o.pid;
		ev->u.op.end = o.end;
		ev->u.op.program_id = o.program_id;
		ev->u.op.flops = o.flops;
		ev->u.op.bytes_accessed = o.bytes_accessed;
		ev->u.op.device = o.device;
		ev->u.op.line = o.line;
		ev->u.op.hlo_op = o.op_len ? text : NULL;
		ev->u.op.hlo_module = o.module_len ? text + o.op_len : NULL;
		name_at += (size_t)o.op_len + o.module_len;
	}
	if (rec->kind == RP_EV_GPU_ACTIVITY && payload[offsetof(struct rp_rec_gpu, flags)])
		name_at += sizeof(struct rp_rec_launch);
	if (kinds[rec->kind].named) {
		memcpy(namebuf, payload + name_at, rec->name_len);
		namebuf[rec->name_len] = 0;
		ev->name = namebuf;
	}
	switch (rec->kind) {
	case RP_EV_CPU_SAMPLE: {
		struct rp_rec_sample s;
		memcpy(&s, payload, sizeof(s));
		if (s.pid)
			ev->pid = s.pid;
		ev->u.sample.cpu = s.cpu;
		ev->u.sample.nframes = s.nframes;
		ev->u.sample.nkernel = s.nkernel;
		ev->u.sample.frames = (const uint64_t *)(payload + sizeof(s));
		break;
	}
	case RP_EV_COUNTER: {
		struct rp_rec_counter c;
		memcpy(&c, payload, sizeof(c));
		ev->u.counter.value = c.value;
		break;
	}
	case RP_EV_GPU_ACTIVITY: {
		struct rp_rec_gpu g;
		memcpy(&g, payload, sizeof(g));
		if (g.pid)
			ev->pid = g.pid;
		ev->u.gpu.end = g.end;
		ev->u.gpu.correlation = g.correlation;
		ev->u.gpu.bytes = g.bytes;
		ev->u.gpu.device = g.device;
		ev->u.gpu.stream = g.stream;
		ev->u.gpu.kind = g.kind;
		if (g.flags & RP_REC_GPU_LAUNCH) {
			struct rp_rec_launch l;
			memcpy(&l, payload + sizeof(g), sizeof(l));
			ev->u.gpu.launch = l.launch;
		}
		break;
	}
	case RP_EV_API_CALL: {
		struct rp_rec_api a;
		memcpy(&a, payload, sizeof(a));
		ev->u.api.duration = a.duration;
		ev->u.api.device = a.device;
		ev->u.api.correlation = a.correlation;
		break;
	}
	case RP_EV_DROPS:
		memcpy(&ev->u.drops.count, payload, sizeof(uint64_t));
		break;
	default:
		break;
	}
	return 0;
}
