#include "hostmetrics.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Jiffies of one /proc/stat line at the last reading. */
struct cpu_times {
	uint64_t busy, idle; /* idle includes iowait */
	bool valid;
};

struct rp_hostmetrics {
	char stat_path[PATH_MAX], meminfo_path[PATH_MAX];
	uint64_t interval_ns, last_ns;
	bool polled;
	struct cpu_times all;
	struct cpu_times *cpus; /* by CPU number */
	size_t ncpus;
	char *line;
	size_t line_cap;
};

static int check_readable(const char *path, struct rp_err *err)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return rp_err_set(err, -errno, "host metrics: cannot read %s: %s; is proc mounted?",
				  path, strerror(errno));
	fclose(f);
	return 0;
}

int rp_hostmetrics_new(const char *proc_root, uint64_t interval_ns,
		       struct rp_hostmetrics **out, struct rp_err *err)
{
	struct rp_hostmetrics *h = calloc(1, sizeof(*h));
	if (!h)
		return rp_err_set(err, -ENOMEM, "out of memory for host metrics");
	h->interval_ns = interval_ns;
	int rc = 0;
	if ((size_t)snprintf(h->stat_path, sizeof(h->stat_path), "%s/stat", proc_root) >=
		    sizeof(h->stat_path) ||
	    (size_t)snprintf(h->meminfo_path, sizeof(h->meminfo_path), "%s/meminfo", proc_root) >=
		    sizeof(h->meminfo_path))
		rc = rp_err_set(err, -ENAMETOOLONG, "host metrics: proc path too long: %s", proc_root);
	if (!rc)
		rc = check_readable(h->stat_path, err);
	if (!rc)
		rc = check_readable(h->meminfo_path, err);
	if (rc) {
		free(h);
		return rc;
	}
	*out = h;
	return 0;
}

void rp_hostmetrics_free(struct rp_hostmetrics *h)
{
	if (!h)
		return;
	free(h->cpus);
	free(h->line);
	free(h);
}

static int emit(rp_event_fn fn, void *ctx, uint64_t ts, const char *name, double value)
{
	struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ts, .name = name,
			       .u.counter.value = value };
	return fn(ctx, &ev);
}

/* The share of the time since the last reading a CPU was busy, emitted
 * under name; the first reading of a CPU (or counters that went
 * backwards, as iowait can) only sets the baseline.  Returns 1 when a
 * counter was emitted, 0 when not, or fn's error. */
static int cpu_util(struct cpu_times *prev, uint64_t busy, uint64_t idle, uint64_t ts,
		    const char *name, rp_event_fn fn, void *ctx)
{
	struct cpu_times was = *prev;
	*prev = (struct cpu_times){ busy, idle, true };
	if (!was.valid || busy < was.busy || idle < was.idle || busy + idle == was.busy + was.idle)
		return 0;
	uint64_t dbusy = busy - was.busy, didle = idle - was.idle;
	int rc = emit(fn, ctx, ts, name, 100.0 * (double)dbusy / (double)(dbusy + didle));
	return rc < 0 ? rc : 1;
}

static struct cpu_times *cpu_slot(struct rp_hostmetrics *h, unsigned cpu)
{
	if (cpu >= h->ncpus) {
		size_t n = cpu + 1 > 2 * h->ncpus ? cpu + 1 : 2 * h->ncpus;
		struct cpu_times *grown = realloc(h->cpus, n * sizeof(*grown));
		if (!grown)
			return NULL;
		memset(grown + h->ncpus, 0, (n - h->ncpus) * sizeof(*grown));
		h->cpus = grown;
		h->ncpus = n;
	}
	return &h->cpus[cpu];
}

/* The "cpu" lines come first in /proc/stat: reading stops after them. */
static int read_stat(struct rp_hostmetrics *h, uint64_t ts, rp_event_fn fn, void *ctx,
		     struct rp_err *err)
{
	FILE *f = fopen(h->stat_path, "re");
	if (!f)
		return rp_err_set(err, -errno, "host metrics: cannot read %s: %s", h->stat_path,
				  strerror(errno));
	int n = 0, rc = 0, lineno = 0;
	while (rc >= 0 && getline(&h->line, &h->line_cap, f) > 0 &&
	       !strncmp(h->line, "cpu", 3)) {
		lineno++;
		uint64_t v[8] = { 0 };
		unsigned cpu = 0;
		bool all = h->line[3] == ' ';
		int used = 0;
		if (!all && sscanf(h->line + 3, "%u%n", &cpu, &used) != 1) {
			rc = -EBADMSG;
			break;
		}
		const char *p = h->line + 3 + used;
		int got = sscanf(p, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
				 " %" SCNu64 " %" SCNu64 " %" SCNu64,
				 &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
		if (got < 4) { /* user nice system idle are always there */
			rc = -EBADMSG;
			break;
		}
		/* user nice system idle iowait irq softirq steal; guest time
		 * is already part of user. */
		uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
		char name[32];
		struct cpu_times *slot = &h->all;
		if (all) {
			snprintf(name, sizeof(name), "cpu_util");
		} else {
			snprintf(name, sizeof(name), "cpu_util/cpu%u", cpu);
			if (!(slot = cpu_slot(h, cpu))) {
				rc = -ENOMEM;
				break;
			}
		}
		rc = cpu_util(slot, busy, v[3] + v[4], ts, name, fn, ctx);
		n += rc > 0;
	}
	fclose(f);
	if (rc == -EBADMSG)
		return rp_err_set(err, rc, "host metrics: %s line %d is not a cpu line of the "
				  "form 'cpuN user nice system idle ...'", h->stat_path, lineno);
	if (rc == -ENOMEM)
		return rp_err_set(err, rc, "out of memory for host metrics");
	if (rc < 0)
		return rp_err_set(err, rc, "host metrics: handing on a counter failed: %s",
				  strerror(-rc));
	if (!lineno)
		return rp_err_set(err, -EBADMSG, "host metrics: %s has no cpu lines", h->stat_path);
	return n;
}

static int read_meminfo(struct rp_hostmetrics *h, uint64_t ts, rp_event_fn fn, void *ctx,
			struct rp_err *err)
{
	FILE *f = fopen(h->meminfo_path, "re");
	if (!f)
		return rp_err_set(err, -errno, "host metrics: cannot read %s: %s", h->meminfo_path,
				  strerror(errno));
	uint64_t total = 0, avail = 0, kb;
	bool have_total = false, have_avail = false;
	while (getline(&h->line, &h->line_cap, f) > 0 && !(have_total && have_avail)) {
		if (sscanf(h->line, "MemTotal: %" SCNu64 " kB", &kb) == 1) {
			total = kb * 1024;
			have_total = true;
		} else if (sscanf(h->line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) {
			avail = kb * 1024;
			have_avail = true;
		}
	}
	fclose(f);
	if (!have_total || !have_avail)
		return rp_err_set(err, -EBADMSG, "host metrics: %s lacks MemTotal or MemAvailable "
				  "(Linux 3.14 or later has both)", h->meminfo_path);
	int rc = emit(fn, ctx, ts, "host_mem_used", (double)(total > avail ? total - avail : 0));
	if (rc == 0)
		rc = emit(fn, ctx, ts, "host_mem_available", (double)avail);
	if (rc < 0)
		return rp_err_set(err, rc, "host metrics: handing on a counter failed: %s",
				  strerror(-rc));
	return 2;
}

uint64_t rp_hostmetrics_due_ns(const struct rp_hostmetrics *h)
{
	return h->polled ? h->last_ns + h->interval_ns : 0;
}

int rp_hostmetrics_poll(struct rp_hostmetrics *h, uint64_t now_ns, rp_event_fn fn, void *ctx,
			struct rp_err *err)
{
	if (h->polled && now_ns - h->last_ns < h->interval_ns)
		return 0;
	h->polled = true;
	h->last_ns = now_ns;
	int cpus = read_stat(h, now_ns, fn, ctx, err);
	if (cpus < 0)
		return cpus;
	int mem = read_meminfo(h, now_ns, fn, ctx, err);
	return mem < 0 ? mem : cpus + mem;
}
