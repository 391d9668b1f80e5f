/* The one host clock every event is stamped with: CLOCK_MONOTONIC in ns.
 *
 * Producers in a workload stamp events with the TSC when it is invariant
 * (rdtsc costs a third of clock_gettime); the consumer converts ticks to
 * CLOCK_MONOTONIC ns with a calibration it refreshes while it runs, so
 * NTP slewing of the monotonic clock does not accumulate as drift. */
#ifndef RINGPROF_CLOCK_H
#define RINGPROF_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "err.h"

static inline uint64_t rp_clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wall-clock (CLOCK_REALTIME) ns since the Unix epoch. */
static inline int64_t rp_clock_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint64_t rp_rdtsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#else
	return rp_clock_now_ns();
#endif
}

/* True when the CPU has an invariant TSC (constant_tsc and nonstop_tsc)
 * and the kernel uses it as clocksource, so ticks are safe to convert. */
bool rp_tsc_usable(void);

/* A condition variable whose timed waits run on CLOCK_MONOTONIC, so a
 * wall-clock step never stretches or cuts a wait. */
void rp_cond_init_monotonic(pthread_cond_t *cond);
/* Wait on cond (initialised as above) for at most ns. */
void rp_cond_wait_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t ns);

/* Wall-clock (CLOCK_REALTIME) minus host clock, in ns, read now. */
int64_t rp_clock_wall_offset_ns(void);

/* Converts TSC ticks to host-clock ns.  ns = anchor_ns +
 * (tsc - anchor_tsc) * mult >> 32, extended before the anchor too. */
struct rp_tsc_calib {
	uint64_t anchor_tsc;
	uint64_t anchor_ns;
	uint64_t mult;           /* ns per tick, 32.32 fixed point */
	uint64_t last_tsc;       /* anchor of the previous refresh */
	uint64_t last_ns;
};

/* Measure the tick rate against CLOCK_MONOTONIC over about `ms`
 * milliseconds (blocking).  -ENOTSUP when the TSC is not usable. */
RP_MUST_CHECK int rp_tsc_calibrate(struct rp_tsc_calib *c, unsigned ms);

/* Re-anchor at the current instant and refine the rate from the time
 * elapsed since the last refresh.  Cheap; call about once a second. */
void rp_tsc_refresh(struct rp_tsc_calib *c);

static inline uint64_t rp_tsc_to_ns(const struct rp_tsc_calib *c, uint64_t tsc)
{
	if (tsc >= c->anchor_tsc)
		return c->anchor_ns +
		       (uint64_t)(((unsigned __int128)(tsc - c->anchor_tsc) * c->mult) >> 32);
	uint64_t back = (uint64_t)(((unsigned __int128)(c->anchor_tsc - tsc) * c->mult) >> 32);
	return back < c->anchor_ns ? c->anchor_ns - back : 0;
}

#endif
