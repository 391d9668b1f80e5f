#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool cpuinfo_has(const char *line, const char *flag)
{
	size_t n = strlen(flag);
	for (const char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
		if ((p == line || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == 0))
			return true;
	return false;
}

bool rp_tsc_usable(void)
{
#if defined(__x86_64__) || defined(__i386__)
	bool flags_ok = false, source_ok = false;
	char line[8192];
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			if (strncmp(line, "flags", 5) == 0) {
				flags_ok = cpuinfo_has(line, "constant_tsc") &&
					   cpuinfo_has(line, "nonstop_tsc");
				break;
			}
		}
		fclose(f);
	}
	f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	if (f) {
		source_ok = fgets(line, sizeof(line), f) && strncmp(line, "tsc", 3) == 0;
		fclose(f);
	}
	return flags_ok && source_ok;
#else
	return false;
#endif
}

int64_t rp_clock_wall_offset_ns(void)
{
	struct timespec rt;
	uint64_t m0 = rp_clock_now_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	uint64_t m1 = rp_clock_now_ns();
	int64_t wall = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
	return wall - (int64_t)(m0 + (m1 - m0) / 2);
}

/* One (tsc, ns) pair read as close together as the machine allows: the
 * tightest of a few tries, ns taken at the midpoint of two tsc reads. */
static void read_pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = rp_rdtsc();
		uint64_t n = rp_clock_now_ns();
		uint64_t t1 = rp_rdtsc();
		if (t1 - t0 < best) {
			best = t1 - t0;
			*tsc = t0 + (t1 - t0) / 2;
			*ns = n;
		}
	}
}

static uint64_t rate(uint64_t dtsc, uint64_t dns)
{
	return dtsc ? (uint64_t)(((unsigned __int128)dns << 32) / dtsc) : 0;
}

int rp_tsc_calibrate(struct rp_tsc_calib *c, unsigned ms)
{
	if (!rp_tsc_usable())
		return -ENOTSUP;
	uint64_t t0, n0, t1, n1;
	read_pair(&t0, &n0);
	usleep(ms * 1000u);
	read_pair(&t1, &n1);
	if (t1 <= t0 || n1 <= n0)
		return -ENOTSUP;
	c->mult = rate(t1 - t0, n1 - n0);
	c->anchor_tsc = c->last_tsc = t1;
	c->anchor_ns = c->last_ns = n1;
	return 0;
}

void rp_tsc_refresh(struct rp_tsc_calib *c)
{
	uint64_t t, n;
	read_pair(&t, &n);
	if (t <= c->last_tsc || n <= c->last_ns)
		return;
	/* Re-anchor at the measured instant, continuing the old line so that
	 * converted times never jump; take the new rate only over spans long
	 * enough (100 ms) for read noise not to dominate. */
	uint64_t predicted = rp_tsc_to_ns(c, t);
	c->anchor_tsc = t;
	c->anchor_ns = predicted;
	if (n - c->last_ns >= 100000000u) {
		/* Steer towards the clock: aim to cancel the accumulated error
		 * over the next interval of the same length. */
		int64_t error = (int64_t)n - (int64_t)predicted;
		uint64_t span = n - c->last_ns;
		int64_t target = (int64_t)span + error;
		if (target > 0)
			c->mult = rate(t - c->last_tsc, (uint64_t)target);
		c->last_tsc = t;
		c->last_ns = n;
	}
}

void rp_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

void rp_cond_wait_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t ns)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	ns += (uint64_t)until.tv_nsec;
	until.tv_sec += (time_t)(ns / 1000000000u);
	until.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(cond, mutex, &until);
}
