/* The eBPF CPU sampler (ebpf/) as a collector on the ingest thread:
 * samples into the host ring, each process described (procinfo) before
 * its first sample and each thread named when first sampled, samples the
 * BPF ring buffer lost as a drops event, and the sampling rate as a
 * counter repeated in every chunk. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/types.h>

#include "clock.h"
#include "entry.h"
#include "procinfo.h"
#include "pyframes.h"
#include "sampler.h"
#include "sampler_record.h"
#include "unwind.h"

_Static_assert(RP_CPU_SAMPLE_HZ_MAX == RP_SAMPLER_HZ_MAX,
	       "the rates the configuration and the API take must be the sampler's");

/* The sampler's BPF ring buffer, set here so that due_ns knows it. */
_Static_assert(RP_STACK_COPY_CUT == 0 && RP_STACK_COPY_NEVER == 1 && RP_STACK_COPY_ALWAYS == 2,
	       "[sampler] stack_copy's values (config.h) must be the sampler's");

#define SAMPLER_RINGBUF (4u << 20)
#define REAP_INTERVAL_NS 1000000000ull
/* How long a process whose frame-pointer walks agreed with the CFI unwind
 * gets no stack copies; then a few more samples check again. */
#define TRUST_FP_NS 10000000000ull

/* Threads whose name is already in the host ring.  A sample carries its
 * thread's comm, but names live in metadata events (repeated in every
 * chunk by the drain), so a thread is named once, when first sampled.
 * Open addressing; when it fills up it starts over, which only repeats
 * names. */
#define SEEN_SLOTS 8192

struct cpu {
	const struct rp_config *cfg;
	struct rp_sampler *sampler;
	struct rp_procinfo *procinfo;
	struct rp_pyframes *pyframes;
	struct rp_unwind *unwind;
	uint64_t unwound[RP_STACK_MAX];  /* a sample's frames, its user stack unwound with CFI */
	uint64_t merged[RP_STACK_MAX];   /* a sample's frames, Python ones merged in */
	const struct rp_emit *emit;      /* during poll */
	unsigned cpus;                   /* those sampled: see sampler.h */
	uint64_t lost_seen;
	unsigned hz_recorded;            /* cpu_sampler_hz in the host ring */
	uint64_t last_poll_ns, last_reap_ns;
	struct rp_sampler_stats st;      /* as of the last poll */
	uint32_t seen[SEEN_SLOTS];
	unsigned nseen;
};

static void stop(void *state)
{
	struct cpu *c = state;
	rp_sampler_close(c->sampler);
	rp_procinfo_free(c->procinfo);
	rp_pyframes_free(c->pyframes);
	rp_unwind_free(c->unwind);
	free(c);
}

/* A CPython process found: the BPF program learns where its state is. */
static int install_python(void *ctx, uint32_t pid, const struct rp_py_proc *py)
{
	return rp_sampler_set_python(((struct cpu *)ctx)->sampler, pid, py);
}

static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	const struct rp_config *cfg = env->cfg;
	struct cpu *c = calloc(1, sizeof(*c));
	if (!c)
		return rp_err_set(why, -ENOMEM, "out of memory");
	c->cfg = cfg;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	c->cpus = cpus > 0 ? (unsigned)cpus : 1;
	c->last_poll_ns = c->last_reap_ns = rp_clock_now_ns();
	struct rp_sampler_opts so = {
		.frequency_hz = cfg->sampler_hz,
		.max_depth = cfg->sampler_depth,
		.cgroup_path = cfg->sampler_cgroup[0] ? cfg->sampler_cgroup : NULL,
		.pids = cfg->sampler_pids,
		.npids = cfg->sampler_npids,
		.ringbuf_bytes = SAMPLER_RINGBUF,
		.stack_copy = cfg->sampler_stack_copy,
	};
	struct rp_pyframes_opts po = { .proc_root = env->proc_root, .install = install_python,
				       .install_ctx = c };
	int rc = rp_procinfo_new(env->proc_root, &c->procinfo, why);
	if (rc == 0)
		rc = rp_pyframes_new(&po, &c->pyframes, why);
	if (rc == 0)
		rc = rp_unwind_new(env->proc_root, &c->unwind, why);
	if (rc == 0)
		rc = rp_sampler_open(&so, &c->sampler, why);
	if (rc < 0) {
		stop(c);
		return rc;
	}
	rp_sampler_stats(c->sampler, &c->st);
	*out = c;
	return 0;
}

/* How long samples at the current rate on every CPU take to fill half of
 * the BPF ring buffer, each with a full stack and a stack copy (the ring
 * buffer's 8-byte record header, the record, max_depth frames, the
 * registers and the stack): 1.1 s at 99 Hz on 2 CPUs, 3.4 ms at 999 Hz on 64.  The ingest thread's idle back-off stays
 * below it, since samples do not end the back-off. */
static uint64_t due_ns(void *state)
{
	struct cpu *c = state;
	uint64_t record = 8 + offsetof(struct rp_sampler_record, frames) +
			  8 * (uint64_t)c->cfg->sampler_depth + sizeof(struct rp_sampler_regs) +
			  RP_SAMPLER_STACK_MAX;
	uint64_t bytes_per_s = (uint64_t)c->st.frequency_hz * c->cpus * record;
	if (!bytes_per_s)
		return UINT64_MAX;
	return c->last_poll_ns + SAMPLER_RINGBUF / 2 * 1000000000ull / bytes_per_s;
}

static bool first_sight(struct cpu *c, uint32_t tid)
{
	if (c->nseen >= SEEN_SLOTS / 2) {
		memset(c->seen, 0, sizeof(c->seen));
		c->nseen = 0;
	}
	for (uint32_t i = tid * 2654435761u % SEEN_SLOTS;; i = (i + 1) % SEEN_SLOTS) {
		if (c->seen[i] == tid)
			return false;
		if (c->seen[i] == 0) {
			c->seen[i] = tid;
			c->nseen++;
			return true;
		}
	}
}

/* The sample with its user stack unwound with CFI, when the sampler copied
 * the stack and the unwind reaches further than the frame-pointer walk. */
static struct rp_event unwind(struct cpu *c, const struct rp_event *ev)
{
	const struct rp_user_stack *st = rp_sampler_user_stack(c->sampler);
	unsigned nkernel = ev->u.sample.nkernel, depth = c->cfg->sampler_depth;
	if (!st || nkernel >= depth)
		return *ev;
	struct rp_unwind_input in = { .pid = ev->pid, .tid = ev->tid, .ip = st->ip, .sp = st->sp,
				      .bp = st->bp, .stack = st->bytes, .len = st->len };
	unsigned n = rp_unwind_stack(c->unwind, &in, c->unwound + nkernel, depth - nkernel);
	unsigned nuser = ev->u.sample.nframes - nkernel;
	bool agree = rp_unwind_fp_agrees(ev->u.sample.frames + nkernel, nuser, c->unwound + nkernel, n);
	if (rp_unwind_vote(c->unwind, ev->pid, agree))
		(void)rp_sampler_trust_fp(c->sampler, ev->pid, ev->ts + TRUST_FP_NS);
	if (nkernel + n <= ev->u.sample.nframes)
		return *ev;
	memcpy(c->unwound, ev->u.sample.frames, nkernel * sizeof(c->unwound[0]));
	struct rp_event out = *ev;
	out.u.sample.frames = c->unwound;
	out.u.sample.nframes = (uint16_t)(nkernel + n);
	return out;
}

static int add_sample(void *ctx, const struct rp_event *ev)
{
	struct cpu *c = ctx;
	const struct rp_emit *emit = c->emit;
	/* The process's name, command line and mappings precede its first
	 * sample, and new mappings the first sample that runs in them. */
	(void)rp_procinfo_sample(c->procinfo, ev, emit->event, emit->ctx);
	if (ev->name && ev->tid && first_sight(c, ev->tid)) {
		struct rp_event name = { .kind = RP_EV_THREAD_NAME, .ts = ev->ts, .pid = ev->pid,
					 .tid = ev->tid, .name = ev->name };
		(void)emit->event(emit->ctx, &name);
	}
	/* Python frames merged in, their code named before the sample. */
	const uint64_t *py;
	unsigned npy = rp_sampler_python_frames(c->sampler, &py);
	struct rp_event merged, unwound = unwind(c, ev);
	/* A code event the drain refused is counted there; the sample goes on. */
	(void)rp_pyframes_sample(c->pyframes, &unwound, py, npy, emit->event, emit->ctx, &merged,
				 c->merged);
	return emit->event(emit->ctx, &merged);
}

/* The rate as a counter repeated in every chunk: what CPU time a sample
 * stands for.  Its time divides the samples of the old rate from those of
 * the new one. */
static void record_rate(struct cpu *c, uint64_t now, const struct rp_emit *emit)
{
	if (c->st.frequency_hz == c->hz_recorded)
		return;
	struct rp_event hz = { .kind = RP_EV_COUNTER, .ts = now,
			       .name = "cpu_sampler_hz", .u.counter.value = c->st.frequency_hz };
	if (emit->sticky(emit->ctx, &hz) == 0)
		c->hz_recorded = c->st.frequency_hz;
}

/* Processes the sampler described and that exited are forgotten: the
 * chunks holding their samples hold their names and mappings already. */
static int poll(void *state, uint64_t now_ns, const struct rp_emit *emit, struct rp_err *err)
{
	(void)err;
	struct cpu *c = state;
	c->emit = emit;
	/* A sample the ring refused is counted there (a failing ring file is
	 * logged by the ingest thread). */
	(void)rp_sampler_poll(c->sampler, add_sample, c);
	c->emit = NULL;
	uint64_t now = rp_clock_now_ns();
	c->last_poll_ns = now;
	rp_sampler_stats(c->sampler, &c->st);
	if (c->st.lost > c->lost_seen) {
		struct rp_event ev = { .kind = RP_EV_DROPS, .ts = now,
				       .u.drops.count = c->st.lost - c->lost_seen };
		(void)emit->event(emit->ctx, &ev);
		c->lost_seen = c->st.lost;
	}
	record_rate(c, now, emit);
	if (now_ns - c->last_reap_ns >= REAP_INTERVAL_NS) {
		rp_procinfo_reap(c->procinfo, emit->forget, emit->ctx);
		rp_pyframes_reap(c->pyframes);
		rp_unwind_reap(c->unwind);
		c->last_reap_ns = now_ns;
	}
	return 0;
}

/* Sample at hz, or at [sampler] frequency when that is higher; called
 * right after poll, so the samples of the old rate are in. */
static int set_sample_hz(void *state, unsigned hz, const struct rp_emit *emit, struct rp_err *err)
{
	struct cpu *c = state;
	unsigned want = hz > c->cfg->sampler_hz ? hz : c->cfg->sampler_hz;
	uint64_t now = rp_clock_now_ns();
	if (want == c->st.frequency_hz)
		return 0;
	int rc = rp_sampler_set_frequency(c->sampler, want, err);
	if (rc < 0)
		return rc;
	fprintf(stderr, "ringprofd: CPU sampler: %u Hz (was %u)\n", want, c->st.frequency_hz);
	c->st.frequency_hz = want;
	record_rate(c, now, emit);
	return 0;
}

static void stats(void *state, struct rp_collector_stats *st)
{
	struct cpu *c = state;
	st->events = c->st.samples;
	st->lost = c->st.lost;
	st->values[0] = c->st.frequency_hz;
}

const struct rp_collector rp_cpu_collector = {
	CPU_COLLECTOR_ENTRY,
	.start = start,
	.due_ns = due_ns,
	.poll = poll,
	.set_sample_hz = set_sample_hz,
	.stats = stats,
	.stop = stop,
};
