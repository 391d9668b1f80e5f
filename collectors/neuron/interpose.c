/* libringprof-neuron.so: the Neuron runtime's API calls, timed, into the
 * ncN rings of ringprofd (docs/neuron.md).
 *
 * Two ways in.  LD_PRELOAD: this library defines the nrt_* functions it
 * times, so a program linked against libnrt calls these, which call the
 * runtime's (dlsym RTLD_NEXT).  LD_AUDIT: for frameworks that dlopen
 * libnrt and look its functions up by handle, which a preload cannot see;
 * the dynamic linker asks la_symbind64 for every binding to libnrt,
 * dlsym's included, and gets the wrapper here instead.  Use one or the
 * other.
 *
 * Each call is one RP_EV_API_CALL (start, duration, NeuronCore) whose name
 * carries what the call has: "nrt_execute model=2 status=0".  A model
 * keeps the virtual core it was loaded on (a handle -> core table), so
 * its executions land in that core's ring; tensors likewise.  Every
 * thread has its own producer client per ring it writes (single-producer
 * rings: no lock on the call path).  The runtime's result is returned
 * unchanged, whatever happens here. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nrt_api.h"
#include "producer.h"
#include "systrace.h"

#define EXPORT __attribute__((visibility("default")))

/* NeuronCores one process addresses at most (the daemon takes ncN up to
 * its [producers] device_index_max, 31 by default); higher indexes and
 * calls tied to no core (nrt_init, host tensors) go to the process's
 * "host" ring, with device index NO_CORE. */
#define NC_MAX 128
#define RUNTIME_SLOT NC_MAX
#define NO_CORE UINT32_MAX
/* Records between heartbeat checks (producer.h). */
#define CHECK_EVERY 4096

/* ---- the wrapped functions ----------------------------------------------- */

#define NRT_WRAPPED(X) \
	X(nrt_init) X(nrt_close) X(nrt_load) X(nrt_load_collectives) X(nrt_unload) \
	X(nrt_execute) X(nrt_execute_repeat) X(nrt_build_global_comm) \
	X(nrt_tensor_allocate) X(nrt_tensor_free) X(nrt_tensor_read) X(nrt_tensor_write)

enum wrapped {
#define X(f) W_##f,
	NRT_WRAPPED(X)
#undef X
	W_COUNT
};
static const char *const wrapped_names[W_COUNT] = {
#define X(f) #f,
	NRT_WRAPPED(X)
#undef X
};
/* The runtime's functions: set by la_symbind64, else found lazily. */
static _Atomic(void *) real_fns[W_COUNT];
/* LD_AUDIT mode: libnrt's link map (a dlsym handle) once it is loaded. */
static struct link_map *_Atomic nrt_map;
static bool audit_mode;

/* The first call of each: out of the call path's way. */
__attribute__((noinline, cold)) static void *find_real_fn(enum wrapped w)
{
	void *f = audit_mode ? NULL : dlsym(RTLD_NEXT, wrapped_names[w]);
	if (f)
		atomic_store_explicit(&real_fns[w], f, memory_order_release);
	return f;
}

static inline void *real_fn(enum wrapped w)
{
	void *f = atomic_load_explicit(&real_fns[w], memory_order_acquire);
	return __builtin_expect(f != NULL, 1) ? f : find_real_fn(w);
}
#define REAL(f) ((__typeof__(&f))real_fn(W_##f))

/* A symbol of libnrt's that is not wrapped (the system trace). */
static void *runtime_sym(const char *name)
{
	struct link_map *m = atomic_load(&nrt_map);
	if (audit_mode)
		return m ? dlsym(m, name) : NULL;
	return dlsym(RTLD_NEXT, name);
}

/* ---- clocks --------------------------------------------------------------
 * A call is stamped in its ring's clock: raw TSC ticks where the daemon
 * chose them (it converts the start; an rdtsc costs a fraction of a
 * clock_gettime), else CLOCK_MONOTONIC ns.  The duration is ns either way
 * (docs/ring-format.md): ticks times the rate this process measures once,
 * when it is first given a TSC ring. */
#define CALIBRATE_MS 2

static pthread_once_t calib_once = PTHREAD_ONCE_INIT;
/* ns per tick, 32.32 fixed point; 0: the TSC could not be calibrated. */
static uint64_t tsc_mult;

static void calibrate(void)
{
	struct rp_tsc_calib c;
	if (rp_tsc_calibrate(&c, CALIBRATE_MS) == 0)
		tsc_mult = c.mult;
}

static bool tsc_calibrated(void)
{
	(void)pthread_once(&calib_once, calibrate);
	return tsc_mult != 0;
}

static uint64_t ticks_to_ns(uint64_t ticks)
{
	return (uint64_t)(((unsigned __int128)ticks * tsc_mult) >> 32);
}

/* ---- rings: per thread, one producer client per ring ---------------------- */

/* A ring this thread writes, cached while a live daemon drains it: the
 * call path then needs nothing from the producer client. */
struct ring_slot {
	struct rp_shmring *ring;
	bool tsc;
};
struct thread_rings {
	struct rp_producer *p[NC_MAX + 1];
	struct ring_slot live[NC_MAX + 1];
	uint32_t written;
	/* The clock new rings ask for: 0 (the daemon's choice, TSC where it
	 * is usable), or host ns for the trace thread, whose events come in
	 * them, and where the TSC could not be calibrated. */
	enum rp_shm_clock clock;
};
static __thread struct thread_rings *my_rings;
static pthread_key_t rings_key;
static pthread_once_t rings_once = PTHREAD_ONCE_INIT;

/* The calling thread's rings (v is my_rings), closed: at its exit, as the
 * key's destructor, where a wrapped call from a later destructor then
 * gets new ones, which the key's next round frees. */
static void rings_free(void *v)
{
	struct thread_rings *t = v;
	if (!t)
		return;
	for (size_t i = 0; i <= NC_MAX; i++)
		rp_producer_free(t->p[i]);
	(void)munmap(t, sizeof(*t));
	my_rings = NULL;
}

static void rings_key_init(void)
{
	(void)pthread_key_create(&rings_key, rings_free);
}

/* A thread's rings live in pages of their own that a child of fork()
 * sees zeroed (MADV_WIPEONFORK): the child's calls then ask for rings of
 * its own instead of writing into its parent's single-producer rings
 * (which would lose the parent's records), the parent's clients leaked
 * in it.  A handler of pthread_atfork would not do: an LD_AUDIT module's
 * libc is not the one that forks. */
static struct thread_rings *thread_rings(void)
{
	if (!my_rings) {
		(void)pthread_once(&rings_once, rings_key_init);
		void *m = mmap(NULL, sizeof(*my_rings), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		(void)madvise(m, sizeof(*my_rings), MADV_WIPEONFORK);
		my_rings = m;
		(void)pthread_setspecific(rings_key, my_rings);
	}
	return my_rings;
}

static size_t core_slot(uint32_t core)
{
	return core < NC_MAX ? core : RUNTIME_SLOT;
}

static struct rp_producer *producer_for(struct thread_rings *t, size_t slot)
{
	if (!t->p[slot]) {
		char dev[16] = "host";
		if (slot != RUNTIME_SLOT)
			(void)snprintf(dev, sizeof(dev), "nc%zu", slot);
		struct rp_producer_opts opts = { .device = dev, .clock = t->clock };
		struct rp_err err = { 0 };
		if (rp_producer_new(&opts, &t->p[slot], &err) < 0)
			return NULL;
	}
	return t->p[slot];
}

/* The slow path of ring_for: connecting when due, the heartbeat check
 * every CHECK_EVERY records, and the cache refilled from the client. */
__attribute__((noinline)) static bool ring_connect(size_t slot, struct ring_slot *out)
{
	struct thread_rings *t = thread_rings();
	struct rp_producer *p = t ? producer_for(t, slot) : NULL;
	if (!p)
		return false;
	struct rp_shmring *r = t->written++ % CHECK_EVERY ? rp_producer_connect(p)
							  : rp_producer_check(p);
	if (!r)
		return false;
	bool tsc = rp_shmring_clock(r) == RP_SHM_CLOCK_TSC;
	if (tsc && !tsc_calibrated()) {
		/* Ticks this process cannot convert: host ns instead. */
		rp_producer_free(p);
		t->p[slot] = NULL;
		t->clock = RP_SHM_CLOCK_MONOTONIC;
		return false;
	}
	*out = (struct ring_slot){ r, tsc };
	/* An orphaned ring is still written (it fills, then drops), but not
	 * cached: every call asks for the next daemon when due. */
	t->live[slot] = rp_producer_connected(p) ? *out : (struct ring_slot){ 0 };
	return true;
}

/* The ring of core for this thread; false while no daemon takes it.  A
 * full ring drops (counted) until the next check. */
static inline bool ring_for(uint32_t core, struct ring_slot *out)
{
	size_t slot = core_slot(core);
	struct thread_rings *t = my_rings;
	if (__builtin_expect(t && t->live[slot].ring && ++t->written % CHECK_EVERY, 1)) {
		*out = t->live[slot];
		return true;
	}
	return ring_connect(slot, out);
}

static void emit(const struct rp_event *ev, uint32_t core)
{
	struct ring_slot s;
	if (ring_for(core, &s))
		(void)rp_shm_write_event(s.ring, ev);
}

/* ---- event names, built without printf (the call path) ------------------- */

struct name {
	char s[RP_NAME_MAX + 1];
	size_t n;
};

static inline void put_mem(struct name *nm, const char *s, size_t n)
{
	/* The copy that fits keeps n as it came, a constant for a literal. */
	if (n <= RP_NAME_MAX - nm->n)
		memcpy(nm->s + nm->n, s, n);
	else
		memcpy(nm->s + nm->n, s, n = RP_NAME_MAX - nm->n);
	nm->n += n;
	nm->s[nm->n] = 0;
}
/* A string literal with its length, known when compiled: no strlen on
 * the call path. */
struct lit {
	const char *s;
	size_t n;
};
#define LIT(x) ((struct lit){ "" x, sizeof(x) - 1 })

/* Inlined where the literal's length is a constant: memcpy becomes a few
 * moves instead of a call into libc. */
#define INLINE static inline __attribute__((always_inline))

INLINE void put_lit(struct name *nm, struct lit l)
{
	put_mem(nm, l.s, l.n);
}

static void put_str(struct name *nm, const char *s)
{
	while (s && *s && nm->n < RP_NAME_MAX)
		nm->s[nm->n++] = *s++;
	nm->s[nm->n] = 0;
}

/* The digits of v, written in place; left out whole where they do not
 * fit (a number cut short would be another number). */
static void put_u64(struct name *nm, uint64_t v)
{
	size_t digits = 1;
	for (uint64_t x = v; x >= 10; x /= 10)
		digits++;
	if (digits > RP_NAME_MAX - nm->n)
		return;
	nm->n += digits;
	char *at = nm->s + nm->n;
	*at = 0;
	do
		*--at = (char)('0' + v % 10);
	while ((v /= 10));
}
/* " key=value" */
#define PUT_FIELD(nm, key, v) (put_lit(nm, LIT(key)), put_u64(nm, v))

/* One call being timed.  Without a ring (no daemon) nothing else is
 * done: no clock read, no name built. */
struct call {
	struct ring_slot ring;
	uint32_t core;
	uint64_t t0, t1;
	struct name nm;
};

static uint64_t stamp(const struct ring_slot *s)
{
	return s->tsc ? rp_rdtsc() : rp_clock_now_ns();
}

static inline bool call_begin(struct call *c, uint32_t core)
{
	if (!ring_for(core, &c->ring))
		return false;
	c->core = core;
	c->nm.n = 0;
	c->t0 = stamp(&c->ring);
	return true;
}

/* The call returned: its end, and its name. */
INLINE void call_end(struct call *c, struct lit fn)
{
	c->t1 = stamp(&c->ring);
	put_lit(&c->nm, fn);
}

static void call_record(struct call *c, int status)
{
	if (status >= 0)
		PUT_FIELD(&c->nm, " status=", (uint64_t)status);
	uint64_t d = c->t1 - c->t0;
	struct rp_event ev = { .kind = RP_EV_API_CALL, .ts = c->t0, .name = c->nm.s };
	ev.u.api.duration = c->ring.tsc ? ticks_to_ns(d) : d;
	ev.u.api.device = c->core;
	(void)rp_shm_write_event(c->ring.ring, &ev);
}
#define NO_STATUS (-1)

/* ---- handle tables: model -> core and id, tensor -> core and name --------
 * Open addressing, lock-free: an insert claims a slot (CAS on the key to
 * BUSY), fills it, then publishes the key; a removal leaves a tombstone.
 * A handle lives within PROBE_MAX slots of its hash, so that a lookup of
 * one the table does not hold (a tensor some unwrapped call made) stops
 * there even once tombstones have filled every empty slot.  A full
 * neighbourhood only loses the core of the handles it could not take. */
#define TABLE_SLOTS 4096
#define PROBE_MAX 64
#define KEY_EMPTY ((uintptr_t)0)
#define KEY_BUSY ((uintptr_t)1)
#define KEY_GONE ((uintptr_t)2)
#define TENSOR_NAME_MAX 48

struct slot {
	_Atomic uintptr_t key;
	uint32_t core, id;
	char name[TENSOR_NAME_MAX];
	uint8_t name_len;
};
struct table {
	struct slot s[TABLE_SLOTS];
};
static struct table models, tensors;
static atomic_uint next_model_id = 1;

static size_t slot_hash(const void *h)
{
	uintptr_t k = (uintptr_t)h;
	return (size_t)((k >> 4) * 0x9E3779B97F4A7C15ull >> 52) % TABLE_SLOTS;
}

static void table_put(struct table *t, const void *h, uint32_t core, uint32_t id,
		      const char *name)
{
	if ((uintptr_t)h <= KEY_GONE)
		return;
	for (size_t i = 0, at = slot_hash(h); i < PROBE_MAX; i++, at = (at + 1) % TABLE_SLOTS) {
		struct slot *s = &t->s[at];
		uintptr_t k = atomic_load_explicit(&s->key, memory_order_relaxed);
		if ((k != KEY_EMPTY && k != KEY_GONE) ||
		    !atomic_compare_exchange_strong(&s->key, &k, KEY_BUSY))
			continue;
		s->core = core;
		s->id = id;
		size_t n = name ? strnlen(name, sizeof(s->name) - 1) : 0;
		memcpy(s->name, name ? name : "", n);
		s->name[n] = 0;
		s->name_len = (uint8_t)n;
		atomic_store_explicit(&s->key, (uintptr_t)h, memory_order_release);
		return;
	}
}

/* The slot of handle h, or NULL. */
static struct slot *table_get(struct table *t, const void *h)
{
	if ((uintptr_t)h <= KEY_GONE)
		return NULL;
	for (size_t i = 0, at = slot_hash(h); i < PROBE_MAX; i++, at = (at + 1) % TABLE_SLOTS) {
		uintptr_t k = atomic_load_explicit(&t->s[at].key, memory_order_acquire);
		if (k == (uintptr_t)h)
			return &t->s[at];
		if (k == KEY_EMPTY)
			return NULL;
	}
	return NULL;
}

static void table_remove(struct table *t, const void *h)
{
	struct slot *s = table_get(t, h);
	if (s)
		atomic_store_explicit(&s->key, KEY_GONE, memory_order_release);
}

static uint32_t vnc_core(int64_t vnc)
{
	return vnc >= 0 && vnc < NC_MAX ? (uint32_t)vnc : NO_CORE;
}

/* ---- the runtime's system trace, polled on a thread ---------------------- */

struct trace_fns {
	__typeof__(&nrt_sys_trace_config_allocate) config_allocate;
	__typeof__(&nrt_sys_trace_config_free) config_free;
	__typeof__(&nrt_sys_trace_start) start;
	__typeof__(&nrt_sys_trace_stop) stop;
	__typeof__(&nrt_sys_trace_fetch_events) fetch;
	__typeof__(&nrt_sys_trace_buffer_free) buffer_free;
};
static struct trace_fns trace;
static pthread_t trace_thread;
static bool trace_running;
/* The process that runs it: a child of fork() has no such thread. */
static pid_t trace_pid;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t trace_wake = PTHREAD_COND_INITIALIZER;
static bool trace_quit;

static uint64_t trace_poll_ns(void)
{
	const char *s = getenv("RINGPROF_NEURON_TRACE_MS");
	long ms = s ? strtol(s, NULL, 10) : 0;
	return (uint64_t)(ms > 0 && ms <= 60000 ? ms : 200) * 1000000u;
}

/* An event of the trace, in host ns: into its core's ring. */
static int put_trace_event(void *ctx, const struct rp_event *ev)
{
	(void)ctx;
	emit(ev, ev->u.gpu.device);
	return 0;
}

static void trace_fetch(void)
{
	char *buf = NULL;
	size_t len = 0;
	if (trace.fetch(&buf, &len, NULL) == NRT_SUCCESS && buf) {
		size_t skipped = 0;
		struct rp_err err = { 0 };
		/* Epoch ns -> CLOCK_MONOTONIC ns. */
		int64_t off = -rp_clock_wall_offset_ns();
		if (rp_neuron_trace_parse(buf, len ? len : strlen(buf), off, put_trace_event, NULL,
					  &skipped, &err) < 0 && !getenv("RINGPROF_QUIET"))
			fprintf(stderr, "ringprof-neuron: %s\n", err.msg);
	}
	if (buf)
		trace.buffer_free(buf);
}

/* Starts the runtime's trace once a daemon gave this process a ring:
 * without one, the runtime does no tracing work for us. */
static bool trace_start_if_drained(void)
{
	struct ring_slot s;
	if (!ring_for(NO_CORE, &s))
		return false;
	nrt_sys_trace_config_t *cfg = NULL;
	bool started = trace.config_allocate(&cfg) == NRT_SUCCESS && trace.start(cfg) == NRT_SUCCESS;
	if (cfg)
		trace.config_free(cfg);
	return started;
}

/* The poll thread; started: whether nrt_init's thread started the trace
 * already (else this one does once a daemon answers). */
static void *trace_main(void *started_arg)
{
	bool started = started_arg != NULL;
	uint64_t poll = trace_poll_ns();
	struct thread_rings *t = thread_rings();
	if (t)
		t->clock = RP_SHM_CLOCK_MONOTONIC;
	(void)pthread_mutex_lock(&trace_lock);
	while (!trace_quit) {
		(void)pthread_mutex_unlock(&trace_lock);
		if (!started)
			started = trace_start_if_drained();
		if (started)
			trace_fetch();
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + poll;
		until.tv_sec += (time_t)(ns / 1000000000u);
		until.tv_nsec = (long)(ns % 1000000000u);
		(void)pthread_mutex_lock(&trace_lock);
		if (!trace_quit)
			(void)pthread_cond_timedwait(&trace_wake, &trace_lock, &until);
	}
	(void)pthread_mutex_unlock(&trace_lock);
	if (started) {
		trace_fetch();
		(void)trace.stop();
	}
	rings_free(my_rings);
	(void)pthread_setspecific(rings_key, NULL);
	return NULL;
}

/* After nrt_init: a runtime without the trace functions, or a user who
 * turned it off (RINGPROF_NEURON_TRACE=0), gets the API calls only. */
static void trace_begin(void)
{
	const char *off = getenv("RINGPROF_NEURON_TRACE");
	if (trace_running || (off && !strcmp(off, "0")))
		return;
#define FIND(field, sym) (trace.field = (__typeof__(trace.field))runtime_sym(#sym))
	if (!FIND(config_allocate, nrt_sys_trace_config_allocate) ||
	    !FIND(config_free, nrt_sys_trace_config_free) || !FIND(start, nrt_sys_trace_start) ||
	    !FIND(stop, nrt_sys_trace_stop) || !FIND(fetch, nrt_sys_trace_fetch_events) ||
	    !FIND(buffer_free, nrt_sys_trace_buffer_free))
		return;
#undef FIND
	trace_quit = false;
	/* Started here, the trace misses none of the first executions. */
	void *started = trace_start_if_drained() ? &trace : NULL;
	trace_running = pthread_create(&trace_thread, NULL, trace_main, started) == 0;
	trace_pid = getpid();
	if (!trace_running && started)
		(void)trace.stop();
}

/* Before nrt_close: the last events, then the trace stops. */
static void trace_end(void)
{
	if (!trace_running || trace_pid != getpid())
		return;
	(void)pthread_mutex_lock(&trace_lock);
	trace_quit = true;
	(void)pthread_cond_signal(&trace_wake);
	(void)pthread_mutex_unlock(&trace_lock);
	(void)pthread_join(trace_thread, NULL);
	trace_running = false;
}

/* ---- the wrappers --------------------------------------------------------
 * Each: the runtime's function (NRT_FAILURE, or nothing, when libnrt lacks
 * it), the core found before the call, the call, its result returned as
 * it came. */

EXPORT NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version,
			   const char *fal_version)
{
	__typeof__(&nrt_init) f = REAL(nrt_init);
	if (!f)
		return NRT_FAILURE;
	struct call c;
	bool timed = call_begin(&c, NO_CORE);
	NRT_STATUS rc = f(framework, fw_version, fal_version);
	if (timed) {
		call_end(&c, LIT("nrt_init"));
		call_record(&c, (int)rc);
	}
	if (rc == NRT_SUCCESS)
		trace_begin();
	return rc;
}

EXPORT void nrt_close(void)
{
	__typeof__(&nrt_close) f = REAL(nrt_close);
	if (!f)
		return;
	trace_end();
	struct call c;
	bool timed = call_begin(&c, NO_CORE);
	f();
	if (timed) {
		call_end(&c, LIT("nrt_close"));
		call_record(&c, NO_STATUS);
	}
}

/* nrt_load and nrt_load_collectives: the model takes the core it was
 * loaded on and an id its later calls name (rank: NULL, or the device id
 * and count of a collectives load). */
INLINE void loaded(struct call *c, bool timed, struct lit fn, size_t size,
		   nrt_model_t **model, NRT_STATUS rc, const uint32_t *rank)
{
	if (timed)
		call_end(c, fn);
	uint32_t id = 0;
	if (rc == NRT_SUCCESS && model && *model) {
		id = atomic_fetch_add(&next_model_id, 1);
		table_put(&models, *model, c->core, id, NULL);
	}
	if (!timed)
		return;
	if (id)
		PUT_FIELD(&c->nm, " model=", id);
	PUT_FIELD(&c->nm, " neff_bytes=", size);
	if (rank) {
		PUT_FIELD(&c->nm, " rank=", rank[0]);
		PUT_FIELD(&c->nm, "/", rank[1]);
	}
	call_record(c, (int)rc);
}

EXPORT NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
			   nrt_model_t **model)
{
	__typeof__(&nrt_load) f = REAL(nrt_load);
	if (!f)
		return NRT_FAILURE;
	struct call c = { .core = vnc_core(vnc) };
	bool timed = call_begin(&c, c.core);
	NRT_STATUS rc = f(neff_bytes, size, vnc, vnc_count, model);
	loaded(&c, timed, LIT("nrt_load"), size, model, rc, NULL);
	return rc;
}

EXPORT NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc,
				       int32_t vnc_count, uint32_t ctx_device_id,
				       uint32_t ctx_device_count, nrt_model_t **model)
{
	__typeof__(&nrt_load_collectives) f = REAL(nrt_load_collectives);
	if (!f)
		return NRT_FAILURE;
	struct call c = { .core = vnc_core(vnc) };
	bool timed = call_begin(&c, c.core);
	NRT_STATUS rc = f(neff_bytes, size, vnc, vnc_count, ctx_device_id, ctx_device_count,
			  model);
	uint32_t rank[2] = { ctx_device_id, ctx_device_count };
	loaded(&c, timed, LIT("nrt_load_collectives"), size, model, rc, rank);
	return rc;
}

/* A call on a model (its slot in the table, or NULL), once it returned:
 * " model=ID" and, for repeat >= 0, " repeat=N". */
INLINE void on_model(struct call *c, struct lit fn, const struct slot *s, int repeat,
		     NRT_STATUS rc)
{
	call_end(c, fn);
	if (s)
		PUT_FIELD(&c->nm, " model=", s->id);
	if (repeat >= 0)
		PUT_FIELD(&c->nm, " repeat=", (uint64_t)repeat);
	call_record(c, (int)rc);
}

EXPORT NRT_STATUS nrt_unload(nrt_model_t *model)
{
	__typeof__(&nrt_unload) f = REAL(nrt_unload);
	if (!f)
		return NRT_FAILURE;
	struct slot *s = table_get(&models, model);
	struct call c;
	bool timed = call_begin(&c, s ? s->core : NO_CORE);
	NRT_STATUS rc = f(model);
	if (timed)
		on_model(&c, LIT("nrt_unload"), s, -1, rc);
	if (rc == NRT_SUCCESS)
		table_remove(&models, model);
	return rc;
}

EXPORT NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set,
			      nrt_tensor_set_t *output_set)
{
	__typeof__(&nrt_execute) f = REAL(nrt_execute);
	if (!f)
		return NRT_FAILURE;
	const struct slot *s = table_get(&models, model);
	struct call c;
	if (!call_begin(&c, s ? s->core : NO_CORE))
		return f(model, input_set, output_set);
	NRT_STATUS rc = f(model, input_set, output_set);
	on_model(&c, LIT("nrt_execute"), s, -1, rc);
	return rc;
}

EXPORT NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set,
				     nrt_tensor_set_t *output_set, int repeat_count)
{
	__typeof__(&nrt_execute_repeat) f = REAL(nrt_execute_repeat);
	if (!f)
		return NRT_FAILURE;
	const struct slot *s = table_get(&models, model);
	struct call c;
	if (!call_begin(&c, s ? s->core : NO_CORE))
		return f(model, input_set, output_set, repeat_count);
	NRT_STATUS rc = f(model, input_set, output_set, repeat_count);
	on_model(&c, LIT("nrt_execute_repeat"), s, repeat_count > 0 ? repeat_count : 0, rc);
	return rc;
}

EXPORT NRT_STATUS nrt_build_global_comm(int32_t vnc, uint32_t g_device_id,
					uint32_t g_device_count)
{
	__typeof__(&nrt_build_global_comm) f = REAL(nrt_build_global_comm);
	if (!f)
		return NRT_FAILURE;
	struct call c;
	if (!call_begin(&c, vnc_core(vnc)))
		return f(vnc, g_device_id, g_device_count);
	NRT_STATUS rc = f(vnc, g_device_id, g_device_count);
	call_end(&c, LIT("nrt_build_global_comm"));
	PUT_FIELD(&c.nm, " rank=", g_device_id);
	PUT_FIELD(&c.nm, "/", g_device_count);
	call_record(&c, (int)rc);
	return rc;
}

EXPORT NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc,
				      size_t size, const char *name, nrt_tensor_t **tensor)
{
	__typeof__(&nrt_tensor_allocate) f = REAL(nrt_tensor_allocate);
	if (!f)
		return NRT_FAILURE;
	uint32_t core = tensor_placement == NRT_TENSOR_PLACEMENT_HOST ? NO_CORE : vnc_core(vnc);
	struct call c;
	bool timed = call_begin(&c, core);
	NRT_STATUS rc = f(tensor_placement, vnc, size, name, tensor);
	if (timed)
		call_end(&c, LIT("nrt_tensor_allocate"));
	if (rc == NRT_SUCCESS && tensor && *tensor)
		table_put(&tensors, *tensor, core, 0, name);
	if (timed) {
		if (name && *name) {
			put_lit(&c.nm, LIT(" tensor="));
			put_str(&c.nm, name);
		}
		PUT_FIELD(&c.nm, " size=", size);
		call_record(&c, (int)rc);
	}
	return rc;
}

/* A call on a tensor (its slot, or NULL) once it returned: " tensor=NAME"
 * and, for size != SIZE_MAX, " size=N". */
INLINE void on_tensor(struct call *c, struct lit fn, const struct slot *s, size_t size,
		      int status)
{
	call_end(c, fn);
	if (s && s->name_len) {
		put_lit(&c->nm, LIT(" tensor="));
		put_mem(&c->nm, s->name, s->name_len);
	}
	if (size != SIZE_MAX)
		PUT_FIELD(&c->nm, " size=", size);
	call_record(c, status);
}

EXPORT void nrt_tensor_free(nrt_tensor_t **tensor)
{
	__typeof__(&nrt_tensor_free) f = REAL(nrt_tensor_free);
	if (!f)
		return;
	const nrt_tensor_t *t = tensor ? *tensor : NULL;
	struct slot *s = table_get(&tensors, t);
	struct call c;
	bool timed = call_begin(&c, s ? s->core : NO_CORE);
	/* Gone before the runtime frees it: the address may come back. */
	table_remove(&tensors, t);
	f(tensor);
	if (timed)
		on_tensor(&c, LIT("nrt_tensor_free"), s, SIZE_MAX, NO_STATUS);
}

EXPORT NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset,
				  size_t size)
{
	__typeof__(&nrt_tensor_read) f = REAL(nrt_tensor_read);
	if (!f)
		return NRT_FAILURE;
	const struct slot *s = table_get(&tensors, tensor);
	struct call c;
	if (!call_begin(&c, s ? s->core : NO_CORE))
		return f(tensor, buf, offset, size);
	NRT_STATUS rc = f(tensor, buf, offset, size);
	on_tensor(&c, LIT("nrt_tensor_read"), s, size, (int)rc);
	return rc;
}

EXPORT NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset,
				   size_t size)
{
	__typeof__(&nrt_tensor_write) f = REAL(nrt_tensor_write);
	if (!f)
		return NRT_FAILURE;
	const struct slot *s = table_get(&tensors, tensor);
	struct call c;
	if (!call_begin(&c, s ? s->core : NO_CORE))
		return f(tensor, buf, offset, size);
	NRT_STATUS rc = f(tensor, buf, offset, size);
	on_tensor(&c, LIT("nrt_tensor_write"), s, size, (int)rc);
	return rc;
}

/* ---- LD_AUDIT: bindings to libnrt, dlsym's included ---------------------- */

static const void *const wrappers[W_COUNT] = {
#define X(f) (const void *)&f,
	NRT_WRAPPED(X)
#undef X
};

EXPORT unsigned la_version(unsigned version)
{
	audit_mode = true;
	return version < LAV_CURRENT ? version : LAV_CURRENT;
}

static bool is_libnrt(const char *path)
{
	const char *base = path ? strrchr(path, '/') : NULL;
	base = base ? base + 1 : path;
	return base && !strncmp(base, "libnrt.so", 9);
}

EXPORT unsigned la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	(void)lmid;
	(void)cookie;
	if (is_libnrt(map->l_name))
		atomic_store(&nrt_map, map);
	return LA_FLG_BINDTO | LA_FLG_BINDFROM;
}

EXPORT uintptr_t la_symbind64(Elf64_Sym *sym, unsigned ndx, uintptr_t *refcook,
			      uintptr_t *defcook, unsigned *flags, const char *symname)
{
	(void)ndx;
	(void)refcook;
	(void)flags;
	struct link_map *m = atomic_load(&nrt_map);
	if (!m || *defcook != (uintptr_t)m)
		return sym->st_value;
	for (size_t i = 0; i < W_COUNT; i++)
		if (!strcmp(symname, wrapped_names[i])) {
			atomic_store_explicit(&real_fns[i], (void *)sym->st_value,
					      memory_order_release);
			return (uintptr_t)wrappers[i];
		}
	return sym->st_value;
}
