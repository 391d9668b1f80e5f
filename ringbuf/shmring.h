/* Producer rings: one lock-free single-producer/single-consumer ring per
 * producer thread, in shared memory (a memfd) that another process drains.
 *
 * The consumer (the daemon) creates a ring and passes its fd to the
 * producer (a workload thread), which maps it.  Writing never blocks,
 * never allocates and makes no syscall: when the ring is full the record
 * is dropped and counted in the shared header, where the consumer sees it.
 * Either side may die at any moment; the other carries on.  A record is
 * published only after it is fully written, so a producer killed mid-write
 * leaves nothing half-written for the consumer to read.
 *
 * Records in the ring (the producer form of an event) are 8-byte aligned:
 *   struct rp_rec header (16 bytes), then a fixed payload per kind, then
 *   the name bytes (no NUL).  See docs/ring-format.md, "Producer rings". */
#ifndef RINGPROF_SHMRING_H
#define RINGPROF_SHMRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "event.h"

/* How producers stamp records; chosen by the ring's creator. */
enum rp_shm_clock {
	RP_SHM_CLOCK_MONOTONIC = 1, /* CLOCK_MONOTONIC ns */
	RP_SHM_CLOCK_TSC = 2,       /* raw rdtsc ticks, converted by the consumer */
	/* A clock of the producer's (a GPU runtime's, an epoch): host
	 * CLOCK_MONOTONIC ns = ts + the clock_offset the producer declares
	 * in the header (rp_shmring_set_clock_offset). */
	RP_SHM_CLOCK_FOREIGN = 3,
};

struct rp_rec {
	uint16_t size;     /* whole record incl. header and padding, multiple of 8 */
	uint8_t kind;      /* enum rp_event_kind, or RP_REC_PAD */
	uint8_t name_len;  /* name bytes at the end of the record */
	uint32_t tid;      /* 0: the ring's own tid */
	uint64_t ts;       /* in the ring's clock */
};
#define RP_REC_PAD 0xff /* filler up to the end of the data area */

/* Fixed payloads following struct rp_rec, by kind.  Kinds not listed
 * (range begin/end, instant, process/thread name) have none; RP_EV_DROPS
 * has a uint64_t count. */
struct rp_rec_counter { double value; };
/* flags RP_REC_GPU_LAUNCH: a struct rp_rec_launch follows, before the
 * name (0 from producers that predate it: the byte was padding). */
struct rp_rec_gpu {
	uint64_t end, correlation, bytes;
	uint32_t device, stream;
	uint32_t pid;
	uint8_t kind, flags, pad[2];
};
#define RP_REC_GPU_LAUNCH 0x01
struct rp_rec_launch {
	struct rp_gpu_launch launch; /* nine u32, as documented */
	uint32_t pad;
};
/* correlation: CUPTI's id (u32), 0 from producers that predate it. */
struct rp_rec_api { uint64_t duration; uint32_t device, correlation; };
/* Followed by hlo_op and hlo_module, each with its NUL (op_len and
 * module_len count it; 0: absent), then the name. */
struct rp_rec_op {
	uint64_t end, program_id, flops, bytes_accessed;
	uint32_t device, line;
	uint32_t pid;               /* honoured from the daemon's own rings only */
	uint16_t op_len, module_len;
};
struct rp_rec_sample {
	uint32_t pid, cpu;
	uint16_t nframes, nkernel;
	uint32_t pad;
	/* uint64_t frames[nframes], leaf first */
};

/* Shared layout of the memfd, for tools and tests that inspect a ring (the
 * functions below are the interface): a header page, then the data area.
 * The header holds the u64 counters head (bytes published by the
 * producer), dropped, and tail (bytes freed by the consumer), at these
 * offsets, each on cache lines of its own; beat (the consumer's
 * heartbeat) and consumer (which consumer drains it) share tail's line,
 * the consumer writes them; clock_offset
 * (i64, a foreign clock's offset to host ns) shares dropped's, the
 * producer writes both. */
#define RP_SHM_HDR_SIZE 4096
#define RP_SHM_OFF_HEAD 128
#define RP_SHM_OFF_DROPPED 256
#define RP_SHM_OFF_CLOCK_OFFSET 264
#define RP_SHM_OFF_TAIL 384
#define RP_SHM_OFF_BEAT 392
#define RP_SHM_OFF_CONSUMER 400

struct rp_shmring;

/* Consumer: create a ring with a data area of data_size bytes (a power of
 * two, 4 KiB .. 1 GiB) in a new memfd, owned by producer pid/tid. */
RP_MUST_CHECK int rp_shmring_create(size_t data_size, uint32_t pid, uint32_t tid,
		      enum rp_shm_clock clock, struct rp_shmring **out,
		      struct rp_err *err);
/* Whether clock is one a ring may have. */
bool rp_shm_clock_valid(uint32_t clock);
/* Either side: map an existing ring from its fd (the fd is dup'ed, the
 * caller keeps its own).  Validates the header: a bad fd or a header that
 * is not a ring gives -EINVAL with a message. */
RP_MUST_CHECK int rp_shmring_map(int fd, struct rp_shmring **out, struct rp_err *err);
/* Consumer: take over a ring another consumer created (a producer offers
 * its ring to a restarted daemon): map it as rp_shmring_map does, then
 * give it the owner pid/tid this consumer proved, whatever its header
 * says.  Its head and tail stay, so draining resumes where the last
 * consumer stopped; positions a producer forged are caught by the drain
 * like any other corruption. */
RP_MUST_CHECK int rp_shmring_adopt(int fd, uint32_t pid, uint32_t tid, uint64_t consumer,
		     struct rp_shmring **out, struct rp_err *err);
/* Consumer: mark the ring as drained by consumer (an id unique to one run
 * of it), and stamp the heartbeat.  rp_shmring_adopt refuses a ring so
 * marked by the same consumer with -EALREADY: it drains that one already
 * (a producer that took a slow drain for a dead daemon). */
void rp_shmring_set_consumer(struct rp_shmring *r, uint64_t consumer);
RP_MUST_CHECK int rp_shmring_fd(const struct rp_shmring *r);
/* The ring's fd, which the caller now owns; the ring keeps working on its
 * mapping (rp_shmring_fd gives -1 from then on).  A consumer holding
 * thousands of rings need not hold their fds. */
RP_MUST_CHECK int rp_shmring_take_fd(struct rp_shmring *r);
void rp_shmring_close(struct rp_shmring *r);

uint32_t rp_shmring_pid(const struct rp_shmring *r);
uint32_t rp_shmring_tid(const struct rp_shmring *r);
enum rp_shm_clock rp_shmring_clock(const struct rp_shmring *r);
size_t rp_shmring_capacity(const struct rp_shmring *r);

/* Producer: the current timestamp in the ring's clock (a foreign clock:
 * the host clock less the declared offset). */
uint64_t rp_shmring_now(const struct rp_shmring *r);

/* A foreign clock's offset: host CLOCK_MONOTONIC ns = ts + offset.  The
 * producer declares it (at creation, then whenever its clock drifts);
 * the consumer reads it once per drain and applies it.  0 for the other
 * clocks. */
void rp_shmring_set_clock_offset(struct rp_shmring *r, int64_t offset_ns);
int64_t rp_shmring_clock_offset(const struct rp_shmring *r);

/* Producer: append one record.  Return true when written, false when the
 * ring was full (the record is dropped and counted).  Names longer than
 * RP_NAME_MAX are truncated. */
bool rp_shm_range_begin(struct rp_shmring *r, uint64_t ts, const char *name);
bool rp_shm_range_end(struct rp_shmring *r, uint64_t ts);
bool rp_shm_instant(struct rp_shmring *r, uint64_t ts, const char *name);
bool rp_shm_counter(struct rp_shmring *r, uint64_t ts, const char *name, double value);
/* The same stamped with rp_shmring_now(), read only once the record is
 * known to fit: a dropped record costs no clock read (libringprof). */
bool rp_shm_range_begin_now(struct rp_shmring *r, const char *name);
bool rp_shm_range_end_now(struct rp_shmring *r);
bool rp_shm_instant_now(struct rp_shmring *r, const char *name);
bool rp_shm_counter_now(struct rp_shmring *r, const char *name, double value);
bool rp_shm_thread_name(struct rp_shmring *r, uint64_t ts, const char *name);
bool rp_shm_process_name(struct rp_shmring *r, uint64_t ts, const char *name);
/* General form for the other kinds (GPU activity, API calls, CPU samples
 * and anything with a tid other than the ring's): ev->ts must already be
 * in the ring's clock, as must ev->u.gpu.end. */
bool rp_shm_write_event(struct rp_shmring *r, const struct rp_event *ev);

/* Producer: bytes the ring has room for now.  A producer that would
 * rather wait than drop (a benchmark, a replay tool) polls this; a record
 * of n bytes (rounded up to 8, plus up to 8 bytes of end padding) fits
 * when it is at least n + 8 + 16. */
size_t rp_shmring_free_bytes(struct rp_shmring *r);

/* Producer: records dropped so far because the ring was full. */
uint64_t rp_shmring_dropped(const struct rp_shmring *r);

/* Producer: when the consumer last drained the ring (or created it), in
 * CLOCK_MONOTONIC ns.  Nothing else tells a producer that its consumer
 * died: a beat that stops advancing means the ring is no longer read. */
uint64_t rp_shmring_consumer_beat_ns(const struct rp_shmring *r);

/* Consumer: hand every committed record to fn, oldest first, at most max
 * records (0: no limit), and free their space.  Every call stamps the
 * consumer heartbeat, so drain each ring, idle or not, well within 2 s
 * (libringprof's limit) of the last drain.  A record whose header is
 * impossible (size, kind, name length out of bounds) ends the drain: the
 * rest of the ring is discarded and counted in *corrupt (incremented by 1;
 * may be NULL).  rec is a checked private copy, valid during the call.
 * Returns the number of records handed over, or fn's negative return (the
 * record fn failed on stays in the ring). */
typedef int (*rp_shmring_fn)(void *ctx, const struct rp_shmring *r,
			     const struct rp_rec *rec);
long rp_shmring_drain(struct rp_shmring *r, rp_shmring_fn fn, void *ctx,
		      size_t max, uint64_t *corrupt);

/* Consumer: from now on drains only read, and the space they read is
 * freed at rp_shmring_release: a consumer that keeps what it read in
 * memory until it is written elsewhere releases it then, so that a
 * consumer killed before that leaves it in the ring for the next one
 * (which resumes at tail). */
void rp_shmring_hold(struct rp_shmring *r);
/* Consumer, holding: free everything read so far; returns the bytes read
 * and not yet freed before the call. */
uint64_t rp_shmring_release(struct rp_shmring *r);
/* Consumer, holding: bytes read and not yet freed. */
uint64_t rp_shmring_held(const struct rp_shmring *r);

/* Consumer: decode one record into an event (name points into the
 * record; frames into the record).  Timestamps stay in the ring's clock.
 * Returns -EBADMSG for a record whose payload does not fit its size. */
RP_MUST_CHECK int rp_rec_to_event(const struct rp_shmring *r, const struct rp_rec *rec,
		    struct rp_event *ev, char namebuf[RP_NAME_MAX + 1]);

#endif
