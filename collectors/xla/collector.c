/* The XLA pull collector: one thread per profiler server of an XLA
 * runtime ([xla] endpoints), each pulling windows (continuous profiling's
 * GetSnapshot where the server has it, back-to-back Profile calls
 * otherwise), decoding them (xspace.h) and writing every event as an
 * RP_EV_DEVICE_OP into the daemon's producer rings: /host:CPU into the
 * host ring on its thread (tid = the line's thread id), /device:TPU:N and
 * /device:GPU:N into tpuN and gpuN (tid = the line id).
 *
 * Workloads register their servers through the API (ringprof.xla.attach()
 * posts /v1/xla/endpoints, which leaves <state_dir>/xla-endpoints/PID):
 * a registry thread looks there every REGISTRY_PERIOD_NS, pulls from each
 * such server with pid = PID, and forgets it (and its file) once PID has
 * exited.  A workload that says it is leaving (ringprof.xla.detach(), at
 * its exit: the contract's detach op) gets its last window pulled and its
 * session stopped before it goes, so neither the end of its run nor a
 * server torn down mid-call is lost.  A slot's rings outlive its
 * endpoint: the next one reuses them.
 *
 * Recording costs the workload about [xla] event_cost per event (JAX's
 * TraceMe and the server serializing its XSpace; bench/xla.py), so a
 * program of many tiny ops pays much more than one of long ops.  After
 * each window the collector estimates that cost (events per second times
 * event_cost) and, when it is over [xla] overhead_budget, stops recording
 * for long enough that the share of time recorded times the cost stays
 * within the budget (a duty cycle; PAUSE_MAX_NS at most); status says how
 * much of the time is recorded and why.
 *
 * A server that is down, slow or hostile costs its thread only: every
 * call has a deadline (window + PULL_SLACK_MS), responses are capped at
 * MAX_RESPONSE bytes, and failures back off exponentially up to
 * BACKOFF_MAX_NS.  Snapshots that overlap (a server that returns the last
 * N seconds each time) write nothing twice: each endpoint keeps the
 * latest event end it wrote and skips events that ended before it. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "collector.h"
#include "profiler.h"
#include "xspace.h"

#define RING_SIZE ((size_t)4 << 20)
#define MAX_ENDPOINTS 16
#define MAX_RINGS 9                      /* host and 8 devices per endpoint */
#define MAX_RESPONSE ((size_t)64 << 20)
#define PULL_SLACK_MS 10000u             /* a loaded server serializes for seconds */
#define BACKOFF_MIN_NS 1000000000ull
#define BACKOFF_MAX_NS (60 * 1000000000ull)
/* The longest record a device op takes in a ring, with its padding. */
#define OP_RECORD_MAX (16 + 48 + 3 * 256 + 24)
/* How long a full ring may hold the writer up before records drop. */
#define RING_WAIT_MAX_NS 2000000000ull
#define REGISTRY_PERIOD_NS 1000000000ull
/* The longest pause of the duty cycle: a snapshot finds a window of every
 * workload within this long. */
#define PAUSE_MAX_NS (60 * 1000000000ull)
#define RATE_EXTENT_MIN_NS 100000000ull

enum mode { MODE_UNKNOWN, MODE_CONTINUOUS, MODE_PROFILE };

struct ring_slot {
	char device[16];
	struct rp_shmring *ring;
};

struct xla;

struct endpoint {
	struct xla *x;
	char addr[128];
	uint32_t pid;                 /* the workload's, 0: unknown (configured) */
	pthread_t thread;
	bool active;                  /* a thread runs for it; under lock */
	bool quit;                    /* its thread should end; under lock */
	bool last;                    /* pull one last window, then end; under lock */
	/* The thread's own. */
	struct ring_slot rings[MAX_RINGS];
	unsigned nrings;
	enum mode mode;
	bool session_open;            /* a continuous session we started */
	uint64_t written_end_ns;      /* latest event end written */
	uint64_t win_start_ns, win_end_ns; /* of the window being written */
	uint64_t win_events, win_dups;
	uint64_t recording_since_ns;  /* the session's start or last snapshot */
	uint64_t win_span_ns;         /* its recording and the call's serializing */
	/* Shared with stats, under x->lock. */
	const char *state;            /* "starting", "continuous", "profile", "backing off" */
	char error[200];
	uint64_t windows, events, duplicates, failures, gap_ns, backoff_ns;
	double cost_pct;              /* estimated for the last window */
	uint64_t pause_ns;            /* after each window, by the duty cycle */
	double recorded_pct;          /* share of the time recorded, 100: all */
};

struct xla {
	struct rp_collector_env env;
	struct rp_xla_profile_opts opts;
	unsigned timeout_ms;
	unsigned budget_pct;          /* [xla] overhead_budget; 0: none */
	uint64_t event_cost_ns;       /* [xla] event_cost */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop;                    /* guarded by lock */
	struct endpoint eps[MAX_ENDPOINTS];
	char registry[PATH_MAX + 32]; /* <state_dir>/xla-endpoints */
	char proc_root[PATH_MAX];
	pthread_t registry_thread;
	/* Serializes adding and retiring endpoints: the registry thread and
	 * detach (an API thread). */
	pthread_mutex_t registry_lock;
	atomic_uint_least64_t lost;   /* dropped by full rings or refused rings */
	/* Of endpoints retired, so that the counters in status never go back;
	 * under lock. */
	uint64_t retired_events, retired_windows;
};

static const char *const value_names[] = { "endpoints", "windows", "gap_ms", "backing_off",
					    "recorded_pct", NULL };

/* Wait ns or until the collector or ep (NULL: none) stops, or (until_last)
 * ep is asked for its last window; true when stopping. */
static bool wait_or_stop(struct xla *x, const struct endpoint *ep, uint64_t ns, bool until_last)
{
	pthread_mutex_lock(&x->lock);
	if (!x->stop && !(ep && (ep->quit || (until_last && ep->last))) && ns)
		rp_cond_wait_ns(&x->wake, &x->lock, ns);
	bool stop = x->stop || (ep && ep->quit);
	pthread_mutex_unlock(&x->lock);
	return stop;
}

/* "/host:CPU" -> host; "/device:TPU:3" -> tpu3; others (metadata planes,
 * custom devices) are not written. */
static bool plane_device(const char *plane, char *device, size_t size, uint32_t *index)
{
	static const struct { const char *prefix, *ring; } planes[] = {
		{ "/device:TPU:", "tpu" }, { "/device:GPU:", "gpu" },
	};
	if (!strcmp(plane, "/host:CPU")) {
		snprintf(device, size, "host");
		*index = RP_OP_HOST;
		return true;
	}
	for (size_t i = 0; i < sizeof(planes) / sizeof(planes[0]); i++) {
		size_t n = strlen(planes[i].prefix);
		char *end;
		if (strncmp(plane, planes[i].prefix, n) || plane[n] < '0' || plane[n] > '9')
			continue;
		unsigned long v = strtoul(plane + n, &end, 10);
		if (*end || v > 255)
			return false;
		snprintf(device, size, "%s%lu", planes[i].ring, v);
		*index = (uint32_t)v;
		return true;
	}
	return false;
}

/* The endpoint's ring for device, asked for on first use; NULL when the
 * daemon refuses it (the error says why). */
static struct rp_shmring *ring_for(struct endpoint *ep, const char *device)
{
	for (unsigned i = 0; i < ep->nrings; i++)
		if (!strcmp(ep->rings[i].device, device))
			return ep->rings[i].ring;
	if (ep->nrings == MAX_RINGS)
		return NULL;
	struct rp_err err = { 0 };
	struct ring_slot *s = &ep->rings[ep->nrings];
	if (ep->x->env.producer_ring(ep->x->env.ctx, device, RING_SIZE, &s->ring, &err) < 0) {
		pthread_mutex_lock(&ep->x->lock);
		snprintf(ep->error, sizeof(ep->error), "%.199s", err.msg);
		pthread_mutex_unlock(&ep->x->lock);
		return NULL;
	}
	snprintf(s->device, sizeof(s->device), "%s", device);
	pthread_mutex_lock(&ep->x->lock); /* stats reads the rings */
	ep->nrings++;
	pthread_mutex_unlock(&ep->x->lock);
	return s->ring;
}

/* A string stat as a NUL-terminated copy, truncated; NULL when absent. */
static const char *stat_str(const char *p, size_t len, bool present, char buf[RP_NAME_MAX + 1])
{
	if (!present)
		return NULL;
	len = len > RP_NAME_MAX ? RP_NAME_MAX : len;
	memcpy(buf, p, len);
	buf[len] = 0;
	return buf;
}

static uint64_t stat_u64(double v, bool present)
{
	return present && v > 0 && v < 1.8e19 ? (uint64_t)v : 0;
}

/* Room for one more record, waiting for the ingest thread to drain it
 * rather than dropping; false when stopping. */
static bool room(struct endpoint *ep, struct rp_shmring *ring)
{
	uint64_t waited = 0;
	while (rp_shmring_free_bytes(ring) < OP_RECORD_MAX && waited < RING_WAIT_MAX_NS) {
		if (wait_or_stop(ep->x, ep, 1000000, false))
			return false;
		waited += 1000000;
	}
	return true;
}

static int put_event(const struct rp_xla_event *e, void *arg)
{
	struct endpoint *ep = arg;
	char device[16], op[RP_NAME_MAX + 1], module[RP_NAME_MAX + 1];
	uint32_t index;
	if (!plane_device(e->plane, device, sizeof(device), &index))
		return 0;
	uint64_t end = e->start_ns + e->duration_ns;
	if (end < e->start_ns)
		return 0;
	if (end <= ep->written_end_ns) {
		ep->win_dups++;
		return 0;
	}
	struct rp_shmring *ring = ring_for(ep, device);
	if (!ring) {
		atomic_fetch_add(&ep->x->lost, 1);
		return 0;
	}
	if (!room(ep, ring))
		return -ECANCELED;
	struct rp_event ev = {
		.kind = RP_EV_DEVICE_OP,
		.ts = e->start_ns,
		.pid = ep->pid,
		.tid = (uint32_t)e->line_id,
		.name = e->name,
		.u.op = {
			.end = end,
			.hlo_op = stat_str(e->hlo_op, e->hlo_op_len, e->has >> RP_XLA_HLO_OP & 1, op),
			.hlo_module = stat_str(e->hlo_module, e->hlo_module_len,
					       e->has >> RP_XLA_HLO_MODULE & 1, module),
			.program_id = e->has >> RP_XLA_PROGRAM_ID & 1 && e->program_id > 0
					      ? (uint64_t)e->program_id : 0,
			.flops = stat_u64(e->flops, e->has >> RP_XLA_FLOPS & 1),
			.bytes_accessed = stat_u64(e->bytes_accessed,
						   e->has >> RP_XLA_BYTES_ACCESSED & 1),
			.device = index,
			.line = (uint32_t)e->line_id,
		},
	};
	if (!rp_shm_write_event(ring, &ev)) {
		atomic_fetch_add(&ep->x->lost, 1);
		return 0;
	}
	if (!ep->win_start_ns || e->start_ns < ep->win_start_ns)
		ep->win_start_ns = e->start_ns;
	if (end > ep->win_end_ns)
		ep->win_end_ns = end;
	ep->win_events++;
	return 0;
}

/* One window from the server: a snapshot of the continuous session
 * (started here when none is open), or a Profile call where the server
 * has no continuous profiling.  The last window of a leaving workload is
 * what its open session holds, if any: nothing is started then.  *last:
 * whether the workload asked for its last window before this one was
 * asked for (then it reaches up to the workload's leaving). */
static int pull(struct endpoint *ep, bool *last, struct rp_xla_window *w, struct rp_err *err)
{
	struct xla *x = ep->x;
	if (*last && !ep->session_open)
		return 0;
	if (ep->mode != MODE_PROFILE && !ep->session_open) {
		int rc = rp_xla_start_continuous(ep->addr, &x->opts, x->timeout_ms, err);
		if (rc == -ENOSYS) {
			ep->mode = MODE_PROFILE;
		} else if (rc < 0) {
			return rc;
		} else {
			ep->mode = MODE_CONTINUOUS;
			ep->session_open = true;
			ep->recording_since_ns = rp_clock_now_ns();
		}
	}
	if (ep->mode == MODE_PROFILE) {
		uint64_t asked = rp_clock_now_ns();
		int rc = rp_xla_profile(ep->addr, &x->opts, x->timeout_ms, MAX_RESPONSE, w, err);
		ep->win_span_ns = rp_clock_now_ns() - asked;
		return rc;
	}
	if (wait_or_stop(x, ep, x->opts.duration_ms * 1000000ull, true))
		return -ECANCELED;
	pthread_mutex_lock(&x->lock);
	*last = ep->last;
	pthread_mutex_unlock(&x->lock);
	uint64_t asked = rp_clock_now_ns();
	int rc = rp_xla_get_snapshot(ep->addr, x->timeout_ms, MAX_RESPONSE, w, err);
	ep->win_span_ns = rp_clock_now_ns() - ep->recording_since_ns;
	ep->recording_since_ns = asked;
	if (rc < 0)
		ep->session_open = false; /* start afresh: the server may have restarted */
	return rc;
}

/* Pull, decode and write one window. */
static int one_window(struct endpoint *ep, bool *last, struct rp_err *err)
{
	struct rp_xla_window w = { 0 };
	ep->win_span_ns = 0;
	int rc = pull(ep, last, &w, err);
	if (rc < 0)
		return rc;
	uint64_t prev_end = ep->written_end_ns;
	ep->win_start_ns = ep->win_end_ns = ep->win_events = ep->win_dups = 0;
	int64_t n = w.empty_trace || !w.len ? 0
		: rp_xspace_decode(w.xspace, w.len, w.wall_offset_ns, put_event, ep, NULL, err);
	rp_xla_window_free(&w);
	if (ep->win_end_ns > ep->written_end_ns)
		ep->written_end_ns = ep->win_end_ns;
	pthread_mutex_lock(&ep->x->lock);
	ep->windows++;
	ep->events += ep->win_events;
	ep->duplicates += ep->win_dups;
	if (prev_end && ep->win_start_ns > prev_end)
		ep->gap_ns = ep->win_start_ns - prev_end;
	pthread_mutex_unlock(&ep->x->lock);
	return n < 0 ? (int)n : 0;
}

/* The duty cycle's pause after a window that took span_ns (recording and
 * serializing) and held events over extent_ns: none while their estimated
 * cost (percent of the workload's time while recorded, *cost_pct) is
 * within the budget, else long enough that span_ns out of every span_ns +
 * pause brings it down to the budget.  The rate is over the events' own
 * extent, not the span: a server records nothing while it serializes (JAX
 * loses a few hundred ms there), and counting that time would halve the
 * rate of a busy program.  RATE_EXTENT_MIN_NS keeps a handful of close
 * events from looking like a flood. */
static uint64_t pause_after(const struct xla *x, uint64_t events, uint64_t extent_ns,
			    uint64_t span_ns, double *cost_pct)
{
	extent_ns = extent_ns > RATE_EXTENT_MIN_NS ? extent_ns : RATE_EXTENT_MIN_NS;
	*cost_pct = 100.0 * (double)events * (double)x->event_cost_ns / (double)extent_ns;
	if (!x->budget_pct || *cost_pct <= x->budget_pct)
		return 0;
	double pause = (double)span_ns * (*cost_pct / x->budget_pct - 1);
	return pause < (double)PAUSE_MAX_NS ? (uint64_t)pause : PAUSE_MAX_NS;
}

static void *endpoint_main(void *arg)
{
	struct endpoint *ep = arg;
	struct xla *x = ep->x;
	uint64_t backoff = 0, delay = 0;
	while (!wait_or_stop(x, ep, delay, true)) {
		pthread_mutex_lock(&x->lock);
		bool last = ep->last;
		pthread_mutex_unlock(&x->lock);
		struct rp_err err = { 0 };
		double cost = 0;
		int rc = one_window(ep, &last, &err);
		if (rc == -ECANCELED || last)
			break;
		uint64_t pause = rc < 0 ? 0 : pause_after(x, ep->win_events + ep->win_dups,
							  ep->win_end_ns - ep->win_start_ns,
							  ep->win_span_ns, &cost);
		if (pause && ep->session_open) {
			/* Nothing is recorded while paused: the pause is the point. */
			struct rp_err why = { 0 };
			(void)rp_xla_stop_continuous(ep->addr, 2000, &why);
			ep->session_open = false;
		}
		pthread_mutex_lock(&x->lock);
		ep->state = ep->mode == MODE_CONTINUOUS ? "continuous" : "profile";
		if (rc == 0) {
			ep->cost_pct = cost;
			ep->pause_ns = pause;
			ep->recorded_pct = 100.0 * (double)ep->win_span_ns /
					   (double)(ep->win_span_ns + pause + !ep->win_span_ns);
		}
		if (rc < 0) {
			backoff = backoff ? backoff * 2 : BACKOFF_MIN_NS;
			if (backoff > BACKOFF_MAX_NS)
				backoff = BACKOFF_MAX_NS;
			ep->failures++;
			ep->state = "backing off";
			snprintf(ep->error, sizeof(ep->error), "%.199s", err.msg);
		} else {
			backoff = 0;
		}
		ep->backoff_ns = backoff;
		delay = rc < 0 ? backoff : pause;
		pthread_mutex_unlock(&x->lock);
	}
	if (ep->session_open) {
		struct rp_err err = { 0 };
		(void)rp_xla_stop_continuous(ep->addr, 2000, &err);
	}
	return NULL;
}

/* Start pulling from addr (len bytes) in a free slot. */
static int add_endpoint(struct xla *x, const char *addr, size_t len, uint32_t pid,
			struct rp_err *why)
{
	struct endpoint *ep = NULL;
	pthread_mutex_lock(&x->lock);
	for (unsigned i = 0; i < MAX_ENDPOINTS && !ep; i++)
		if (!x->eps[i].active)
			ep = &x->eps[i];
	pthread_mutex_unlock(&x->lock);
	if (!ep)
		return rp_err_set(why, -E2BIG, "more than %d XLA endpoints", MAX_ENDPOINTS);
	/* Only the rings stay from the slot's previous endpoint. */
	struct endpoint fresh = { .x = x, .pid = pid, .state = "starting", .nrings = ep->nrings };
	memcpy(fresh.rings, ep->rings, sizeof(fresh.rings));
	snprintf(fresh.addr, sizeof(fresh.addr), "%.*s", (int)len, addr);
	pthread_mutex_lock(&x->lock);
	*ep = fresh;
	pthread_mutex_unlock(&x->lock);
	int rc = -pthread_create(&ep->thread, NULL, endpoint_main, ep);
	if (rc < 0)
		return rp_err_set(why, rc, "cannot start the XLA thread of %s: %s", ep->addr,
				  strerror(-rc));
	pthread_mutex_lock(&x->lock);
	ep->active = true;
	pthread_mutex_unlock(&x->lock);
	return 0;
}

/* End ep's thread and free its slot: at once, or after one last window
 * (the workload is leaving). */
static void retire(struct xla *x, struct endpoint *ep, bool last_window)
{
	pthread_mutex_lock(&x->lock);
	if (last_window)
		ep->last = true;
	else
		ep->quit = true;
	pthread_cond_broadcast(&x->wake);
	pthread_mutex_unlock(&x->lock);
	pthread_join(ep->thread, NULL);
	pthread_mutex_lock(&x->lock);
	ep->active = false;
	x->retired_events += ep->events;
	x->retired_windows += ep->windows;
	pthread_mutex_unlock(&x->lock);
}

static bool process_alive(const struct xla *x, uint32_t pid)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/%u", x->proc_root, pid);
	return access(path, F_OK) == 0;
}

/* One look at the registry: pull from new registrations, forget those
 * whose process exited. */
static void scan_registry(struct xla *x)
{
	for (unsigned i = 0; i < MAX_ENDPOINTS; i++) {
		struct endpoint *ep = &x->eps[i];
		if (ep->active && ep->pid && !process_alive(x, ep->pid)) {
			char path[PATH_MAX + 64];
			snprintf(path, sizeof(path), "%s/%u", x->registry, ep->pid);
			retire(x, ep, false);
			(void)unlink(path);
		}
	}
	DIR *d = opendir(x->registry);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end, path[PATH_MAX + 300], addr[128];
		unsigned long pid = strtoul(de->d_name, &end, 10);
		if (*end || !pid || pid > UINT32_MAX)
			continue; /* ".", "..", a temporary file */
		snprintf(path, sizeof(path), "%s/%s", x->registry, de->d_name);
		if (!process_alive(x, (uint32_t)pid)) {
			(void)unlink(path);
			continue;
		}
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool got = fgets(addr, sizeof(addr), f) != NULL;
		fclose(f);
		if (!got)
			continue;
		addr[strcspn(addr, "\n")] = 0;
		struct endpoint *known = NULL;
		for (unsigned i = 0; i < MAX_ENDPOINTS && !known; i++)
			if (x->eps[i].active && x->eps[i].pid == pid)
				known = &x->eps[i];
		if (known && !strcmp(known->addr, addr))
			continue;
		if (known)
			retire(x, known, false); /* registered again, with another server */
		struct rp_err err = { 0 };
		if (add_endpoint(x, addr, strlen(addr), (uint32_t)pid, &err) < 0)
			fprintf(stderr, "ringprofd: XLA endpoint %s of process %lu: %s\n", addr, pid,
				err.msg);
	}
	closedir(d);
}

static void *registry_main(void *arg)
{
	struct xla *x = arg;
	do {
		pthread_mutex_lock(&x->registry_lock);
		scan_registry(x);
		pthread_mutex_unlock(&x->registry_lock);
	} while (!wait_or_stop(x, NULL, REGISTRY_PERIOD_NS, false));
	return NULL;
}

/* The workload pid is leaving (its registration is gone already, so the
 * registry thread does not pull from it again): its last window, then its
 * session stopped and its slot freed.  Bounded by the window's deadline. */
static int detach(void *state, uint32_t pid, struct rp_err *err)
{
	(void)err;
	struct xla *x = state;
	struct endpoint *ep = NULL;
	pthread_mutex_lock(&x->registry_lock);
	for (unsigned i = 0; i < MAX_ENDPOINTS && !ep; i++)
		if (x->eps[i].active && x->eps[i].pid == pid)
			ep = &x->eps[i];
	if (ep)
		retire(x, ep, true);
	pthread_mutex_unlock(&x->registry_lock);
	return ep != NULL;
}

static void free_xla(struct xla *x)
{
	for (unsigned i = 0; i < MAX_ENDPOINTS; i++)
		for (unsigned r = 0; r < x->eps[i].nrings; r++)
			rp_shmring_close(x->eps[i].rings[r].ring);
	pthread_cond_destroy(&x->wake);
	pthread_mutex_destroy(&x->registry_lock);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* registry_started: whether the registry thread runs (it adds and
 * retires endpoints, so it ends first). */
static void stop_xla(struct xla *x, bool registry_started)
{
	pthread_mutex_lock(&x->lock);
	x->stop = true;
	pthread_cond_broadcast(&x->wake);
	pthread_mutex_unlock(&x->lock);
	if (registry_started)
		pthread_join(x->registry_thread, NULL);
	for (unsigned i = 0; i < MAX_ENDPOINTS; i++)
		if (x->eps[i].active)
			pthread_join(x->eps[i].thread, NULL);
	free_xla(x);
}

static void stop(void *state)
{
	stop_xla(state, true);
}

static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	const struct rp_config *cfg = env->cfg;
	struct xla *x = calloc(1, sizeof(*x));
	if (!x)
		return rp_err_set(why, -ENOMEM, "out of memory");
	x->env = *env;
	rp_xla_profile_opts_default(&x->opts);
	x->opts.duration_ms = cfg->xla_window_ns / 1000000;
	x->opts.host_tracer_level = cfg->xla_host_tracer_level;
	x->opts.device_tracer_level = cfg->xla_device_tracer_level;
	x->opts.python_tracer_level = cfg->xla_python_tracer_level;
	x->timeout_ms = (unsigned)x->opts.duration_ms + PULL_SLACK_MS;
	x->budget_pct = cfg->xla_overhead_budget_pct;
	x->event_cost_ns = cfg->xla_event_cost_ns;
	pthread_mutex_init(&x->lock, NULL);
	pthread_mutex_init(&x->registry_lock, NULL);
	rp_cond_init_monotonic(&x->wake);
	snprintf(x->registry, sizeof(x->registry), "%s/%s", cfg->state_dir, RP_XLA_REGISTRY_DIR);
	snprintf(x->proc_root, sizeof(x->proc_root), "%s", env->proc_root);
	int rc = 0;
	for (const char *p = cfg->xla_endpoints; *p && rc == 0;) {
		size_t n = strcspn(p, ",");
		rc = add_endpoint(x, p, n, 0, why);
		p += n + (p[n] == ',');
	}
	if (rc == 0 && (rc = -pthread_create(&x->registry_thread, NULL, registry_main, x)) < 0)
		rp_err_set(why, rc, "cannot start the XLA registry thread: %s", strerror(-rc));
	if (rc < 0) {
		stop_xla(x, false);
		return rc;
	}
	*out = x;
	return 0;
}

static void stats(void *state, struct rp_collector_stats *st)
{
	struct xla *x = state;
	uint64_t lost = atomic_load(&x->lost), gap = 0, backing = 0;
	double recorded = 100;
	size_t used = 0;
	unsigned shown = 0;
	pthread_mutex_lock(&x->lock);
	uint64_t windows = x->retired_windows;
	st->events = x->retired_events;
	for (unsigned i = 0; i < MAX_ENDPOINTS; i++) {
		const struct endpoint *ep = &x->eps[i];
		if (!ep->active)
			continue;
		st->events += ep->events;
		windows += ep->windows;
		gap = ep->gap_ns > gap ? ep->gap_ns : gap;
		backing += !strcmp(ep->state, "backing off");
		char duty[200] = "";
		if (ep->pause_ns) {
			recorded = ep->recorded_pct < recorded ? ep->recorded_pct : recorded;
			snprintf(duty, sizeof(duty), ", recording %.0f%% of the time (a pause of %.1f s "
				 "after each window: its events would cost about %.0f%% of its time, "
				 "over [xla] overhead_budget = %u%%)", ep->recorded_pct,
				 (double)ep->pause_ns / 1e9, ep->cost_pct, x->budget_pct);
		}
		if (used < sizeof(st->detail)) {
			int n = snprintf(st->detail + used, sizeof(st->detail) - used,
					 "%s%s (pid %u): %s, %llu windows, %llu events, %llu duplicates "
					 "skipped, gap %llu ms, %llu failures%s%s%s%s",
					 shown++ ? "; " : "", ep->addr, ep->pid, ep->state,
					 (unsigned long long)ep->windows, (unsigned long long)ep->events,
					 (unsigned long long)ep->duplicates,
					 (unsigned long long)(ep->gap_ns / 1000000),
					 (unsigned long long)ep->failures, duty,
					 ep->error[0] ? ", last error: " : "", ep->error,
					 ep->backoff_ns ? " (retrying with back-off)" : "");
			used += n > 0 ? (size_t)n : 0;
		}
	}
	for (unsigned i = 0; i < MAX_ENDPOINTS; i++)
		for (unsigned r = 0; r < x->eps[i].nrings; r++)
			lost += rp_shmring_dropped(x->eps[i].rings[r].ring);
	pthread_mutex_unlock(&x->lock);
	if (!shown)
		snprintf(st->detail, sizeof(st->detail), "no endpoints: set [xla] endpoints, or call "
			 "ringprof.xla.attach() in the workload");
	st->lost = lost;
	st->values[0] = shown;
	st->values[1] = windows;
	st->values[2] = gap / 1000000;
	st->values[3] = backing;
	st->values[4] = (uint64_t)recorded;
}

const struct rp_collector rp_xla_collector = {
	.name = "xla",
	.title = "XLA pull",
	.device = "host",
	.section = "xla",
	.values = value_names,
	.start = start,
	.stats = stats,
	.detach = detach,
	.stop = stop,
};
