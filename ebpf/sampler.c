#include "sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include <linux/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "sampler_record.h"
#include "sampler.skel.h"

_Static_assert(RP_SAMPLER_DEPTH_MAX == RP_STACK_MAX,
	       "the BPF program's deepest stack must match the event model's");
_Static_assert(RP_SAMPLER_PY_TAG == RP_PY_FRAME_TAG && RP_SAMPLER_PY_CODE_MASK == RP_PY_CODE_MASK &&
		       RP_SAMPLER_PY_LASTI_SHIFT == RP_PY_LASTI_SHIFT &&
		       RP_SAMPLER_PY_LASTI_MAX == RP_PY_LASTI_MAX,
	       "the BPF program's Python frames must match the event model's");

#define DEFAULT_HZ 99
#define DEFAULT_RINGBUF (4u << 20)
#define RINGBUF_MAX (1u << 30)
#define NPIDS_MAX 65536
#define BTF_PATH "/sys/kernel/btf/vmlinux"
#define PRIVILEGE_FIX "run ringprofd as root or grant them (see deploy/ringprofd.service.in)"

struct rp_sampler {
	struct rp_sampler_bpf *skel;
	struct ring_buffer *rb;
	int cgroup_fd;
	int *cpus;                /* online CPUs, one perf event each */
	unsigned ncpus;
	struct bpf_link **links;  /* per CPU; each owns its perf event fd */
	unsigned frequency_hz;
	bool hardware;
	uint64_t samples, polls;
	rp_sample_fn fn;          /* of the poll in progress */
	void *fn_ctx;
	const uint64_t *python;   /* of the sample handed to fn */
	unsigned npython;
	struct rp_user_stack stack;
};

static int read_sysctl_int(const char *path, int *value)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	int rc = fscanf(f, "%d", value) == 1 ? 0 : -EINVAL;
	fclose(f);
	return rc;
}

/* Parses a CPU list such as "0-3,5,7-9" (sysfs "online"). */
static int online_cpus(int **out, unsigned *n, struct rp_err *err)
{
	const char *path = "/sys/devices/system/cpu/online";
	char buf[4096];
	FILE *f = fopen(path, "re");
	if (!f)
		return rp_err_set(err, -errno, "reading %s: %s", path, strerror(errno));
	bool ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	int *cpus = NULL;
	unsigned count = 0, cap = 0;
	for (char *p = buf; ok && *p && *p != '\n';) {
		char *end;
		unsigned long lo = strtoul(p, &end, 10), hi = lo;
		ok = end != p;
		if (ok && *end == '-') {
			p = end + 1;
			hi = strtoul(p, &end, 10);
			ok = end != p && hi >= lo && hi < 65536;
		}
		for (unsigned long c = lo; ok && c <= hi; c++) {
			if (count == cap) {
				cap = cap ? 2 * cap : 64;
				int *grown = realloc(cpus, cap * sizeof(*cpus));
				if (!grown) {
					free(cpus);
					return rp_err_set(err, -ENOMEM, "out of memory listing CPUs");
				}
				cpus = grown;
			}
			cpus[count++] = (int)c;
		}
		p = *end == ',' ? end + 1 : end;
	}
	if (!ok || count == 0) {
		free(cpus);
		return rp_err_set(err, -EINVAL, "cannot parse the online CPU list in %s", path);
	}
	*out = cpus;
	*n = count;
	return 0;
}

static bool cap_effective(const struct __user_cap_data_struct d[2], unsigned cap)
{
	return d[cap / 32].effective & (1u << (cap % 32));
}

/* Checked up front so the user gets the fix rather than libbpf's guesses
 * (RLIMIT_MEMLOCK, CONFIG_BPF_SYSCALL) about a refused load. */
static int check_privileges(struct rp_err *err)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) != 0)
		return 0; /* cannot tell: let the kernel decide */
	if (cap_effective(d, CAP_SYS_ADMIN) ||
	    (cap_effective(d, CAP_BPF) && cap_effective(d, CAP_PERFMON)))
		return 0;
	return rp_err_set(err, -EPERM,
			  "loading the CPU sampler needs CAP_BPF and CAP_PERFMON (or root): "
			  PRIVILEGE_FIX);
}

static int validate_hz(unsigned hz, struct rp_err *err)
{
	if (hz < 1 || hz > RP_SAMPLER_HZ_MAX)
		return rp_err_set(err, -EINVAL,
				  "sampling frequency %u Hz is out of range: use 1 to %u samples "
				  "per second per CPU", hz, RP_SAMPLER_HZ_MAX);
	return 0;
}

static int validate(const struct rp_sampler_opts *o, struct rp_err *err)
{
	int rc = validate_hz(o->frequency_hz, err);
	if (rc)
		return rc;
	if (o->max_depth < 1 || o->max_depth > RP_STACK_MAX)
		return rp_err_set(err, -EINVAL, "stack depth %u is out of range: use 1 to %u frames",
				  o->max_depth, RP_STACK_MAX);
	unsigned page = (unsigned)sysconf(_SC_PAGESIZE);
	if (o->ringbuf_bytes < page || o->ringbuf_bytes > RINGBUF_MAX ||
	    (o->ringbuf_bytes & (o->ringbuf_bytes - 1)))
		return rp_err_set(err, -EINVAL,
				  "BPF ring buffer size %u is invalid: use a power of two from %u "
				  "(the page size) to %u bytes", o->ringbuf_bytes, page, RINGBUF_MAX);
	if (o->stack_copy > RP_STACK_COPY_ALWAYS)
		return rp_err_set(err, -EINVAL, "stack copy mode %u is invalid: use 0 (when the "
				  "frame-pointer walk is cut short), 1 (never) or 2 (always)",
				  o->stack_copy);
	if (o->npids > NPIDS_MAX || (o->npids && !o->pids))
		return rp_err_set(err, -EINVAL, "pid filter of %zu pids is invalid: pass 1 to %u pids",
				  o->npids, NPIDS_MAX);
	return 0;
}

static int open_cgroup(const char *path, struct rp_err *err)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return rp_err_set(err, -errno, "cgroup filter %s: %s", path, strerror(errno));
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
		close(fd);
		return rp_err_set(err, -EINVAL,
				  "cgroup filter %s is not a cgroup v2 directory: give a directory under "
				  "the cgroup2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on "
				  "hybrid hosts)", path);
	}
	return fd;
}

static int perf_open(bool hardware, unsigned hz, int cpu)
{
	struct perf_event_attr a = {
		.size = sizeof(a),
		.type = hardware ? PERF_TYPE_HARDWARE : PERF_TYPE_SOFTWARE,
		.config = hardware ? PERF_COUNT_HW_CPU_CYCLES : PERF_COUNT_SW_CPU_CLOCK,
		.freq = 1,
		.sample_freq = hz,
		.disabled = 1, /* libbpf enables it once the program is attached */
		/* The clock's timer then skips the idle task before the program
		 * runs: an idle CPU costs no BPF run at all.  (The cycles event
		 * does not count while idle; the program filters idle too.) */
		.exclude_idle = !hardware,
	};
	int fd = (int)syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int perf_error(int rc, unsigned hz, int cpu, struct rp_err *err)
{
	int v;
	if (rc == -EACCES || rc == -EPERM) {
		if (read_sysctl_int("/proc/sys/kernel/perf_event_paranoid", &v) != 0)
			v = -2;
		return rp_err_set(err, rc,
				  "perf_event_open on CPU %d was refused (%s) with "
				  "kernel.perf_event_paranoid at %d: give ringprofd CAP_PERFMON or run "
				  "it as root; in a container, its seccomp profile must also allow "
				  "perf_event_open", cpu, strerror(-rc), v);
	}
	if (rc == -EINVAL &&
	    read_sysctl_int("/proc/sys/kernel/perf_event_max_sample_rate", &v) == 0 &&
	    hz > (unsigned)v)
		return rp_err_set(err, rc,
				  "sampling frequency %u Hz is above kernel.perf_event_max_sample_rate "
				  "(%d, which the kernel lowers when sampling interrupts run long): "
				  "lower the frequency or raise the sysctl", hz, v);
	if (rc == -EMFILE)
		return rp_err_set(err, rc,
				  "perf_event_open on CPU %d: too many open files: raise the file "
				  "limit (RLIMIT_NOFILE, LimitNOFILE= in the unit) to at least 2 per "
				  "CPU plus what the daemon uses", cpu);
	return rp_err_set(err, rc, "perf_event_open (cpu-clock at %u Hz) on CPU %d: %s", hz, cpu,
			  strerror(-rc));
}

static void destroy_links(struct bpf_link **links, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		bpf_link__destroy(links[i]);
}

/* Opens a perf event per online CPU at hz with the program attached. */
static int attach_all(struct rp_sampler *s, unsigned hz, struct bpf_link **links,
		      struct rp_err *err)
{
	unsigned i;
	int rc = 0;
	for (i = 0; i < s->ncpus; i++) {
		int fd = perf_open(s->hardware, hz, s->cpus[i]);
		if (fd < 0) {
			rc = perf_error(fd, hz, s->cpus[i], err);
			break;
		}
		links[i] = bpf_program__attach_perf_event(s->skel->progs.rp_on_sample, fd);
		if (!links[i]) {
			rc = -errno;
			close(fd);
			rp_err_set(err, rc, "attaching the CPU sampler to the perf event of CPU %d: %s",
				   s->cpus[i], strerror(-rc));
			break;
		}
	}
	if (rc)
		destroy_links(links, i);
	return rc;
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct rp_sampler *s = ctx;
	const struct rp_sampler_record *r = data;
	size_t head = offsetof(struct rp_sampler_record, frames);
	/* Records come from our own program; the check keeps a mismatch of
	 * the two sides from reading past the record. */
	size_t nframes = (size_t)r->nkernel + r->nuser;
	size_t tail = (nframes + r->npython) * sizeof(r->frames[0]);
	size_t copy = r->stack_bytes ? sizeof(struct rp_sampler_regs) + r->stack_bytes : 0;
	if (size < head || size - head < tail || size - head - tail < copy)
		return 0;
	s->python = (const uint64_t *)r->frames + nframes;
	s->npython = r->npython;
	s->stack = (struct rp_user_stack){ 0 };
	if (copy) {
		struct rp_sampler_regs regs;
		const uint8_t *at = (const uint8_t *)r->frames + tail;
		memcpy(&regs, at, sizeof(regs));
		s->stack = (struct rp_user_stack){ .ip = regs.ip, .sp = regs.sp, .bp = regs.bp,
						   .bytes = at + sizeof(regs), .len = r->stack_bytes };
	}
	struct rp_event ev = {
		.kind = RP_EV_CPU_SAMPLE,
		.ts = r->ts,
		.pid = r->pid,
		.tid = r->tid,
		.name = r->comm,
		.u.sample = {
			.cpu = r->cpu,
			.nframes = (uint16_t)(r->nkernel + r->nuser),
			.nkernel = r->nkernel,
			.frames = (const uint64_t *)r->frames,
		},
	};
	s->samples++;
	return s->fn(s->fn_ctx, &ev);
}

const struct rp_user_stack *rp_sampler_user_stack(const struct rp_sampler *s)
{
	return s->stack.len ? &s->stack : NULL;
}

int rp_sampler_trust_fp(struct rp_sampler *s, uint32_t pid, uint64_t until_ns)
{
	return bpf_map__update_elem(s->skel->maps.fp_whole, &pid, sizeof(pid), &until_ns,
				    sizeof(until_ns), BPF_ANY);
}

unsigned rp_sampler_python_frames(const struct rp_sampler *s, const uint64_t **frames)
{
	*frames = s->python;
	return s->npython;
}

int rp_sampler_set_python(struct rp_sampler *s, uint32_t pid, const struct rp_py_proc *py)
{
	int rc = py ? bpf_map__update_elem(s->skel->maps.python, &pid, sizeof(pid), py, sizeof(*py),
					   BPF_ANY)
		    : bpf_map__delete_elem(s->skel->maps.python, &pid, sizeof(pid), 0);
	return rc == -ENOENT && !py ? 0 : rc;
}

static int load(struct rp_sampler *s, const struct rp_sampler_opts *o, struct rp_err *err)
{
	s->skel = rp_sampler_bpf__open();
	if (!s->skel)
		return rp_err_set(err, -errno, "opening the CPU sampler's BPF object: %s",
				  strerror(errno));
	s->skel->rodata->max_bytes = o->max_depth * (unsigned)sizeof(__u64);
	s->skel->rodata->filter_pids = o->npids > 0;
	s->skel->rodata->filter_cgroup = o->cgroup_path != NULL;
	s->skel->rodata->stack_copy = o->stack_copy;
	int rc = bpf_map__set_max_entries(s->skel->maps.events, o->ringbuf_bytes);
	if (!rc)
		rc = bpf_map__set_max_entries(s->skel->maps.pids, o->npids ? (unsigned)o->npids : 1);
	if (rc)
		return rp_err_set(err, rc, "sizing the CPU sampler's BPF maps: %s", strerror(-rc));
	rc = rp_sampler_bpf__load(s->skel);
	if (rc == -EPERM || rc == -EACCES)
		return rp_err_set(err, rc,
				  "the kernel refused to load the CPU sampler (%s) although the process "
				  "has CAP_BPF and CAP_PERFMON: kernel lockdown or a security module "
				  "forbids BPF tracing programs", strerror(-rc));
	if (rc && access(BTF_PATH, R_OK) != 0)
		return rp_err_set(err, rc,
				  "loading the CPU sampler failed (%s) and there is no BTF at %s: the "
				  "kernel needs CONFIG_DEBUG_INFO_BTF=y", strerror(-rc), BTF_PATH);
	if (rc)
		return rp_err_set(err, rc,
				  "loading the CPU sampler's BPF program failed: %s (libbpf's log on "
				  "stderr has the verifier's reason)", strerror(-rc));

	__u8 one = 1;
	for (size_t i = 0; i < o->npids; i++)
		if (bpf_map__update_elem(s->skel->maps.pids, &o->pids[i], sizeof(o->pids[i]), &one,
					 sizeof(one), BPF_ANY))
			return rp_err_set(err, -errno, "filling the pid filter: %s", strerror(errno));
	if (s->cgroup_fd >= 0) {
		__u32 key = 0, fd = (__u32)s->cgroup_fd;
		if (bpf_map__update_elem(s->skel->maps.cgroup, &key, sizeof(key), &fd, sizeof(fd),
					 BPF_ANY))
			return rp_err_set(err, -errno, "setting the cgroup filter to %s: %s",
					  o->cgroup_path, strerror(errno));
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.events), on_record, s, NULL);
	if (!s->rb)
		return rp_err_set(err, -errno, "mapping the CPU sampler's ring buffer: %s",
				  strerror(errno));
	return 0;
}

int rp_sampler_open(const struct rp_sampler_opts *opts, struct rp_sampler **out,
		    struct rp_err *err)
{
	struct rp_sampler_opts o = opts ? *opts : (struct rp_sampler_opts){ 0 };
	if (!o.frequency_hz)
		o.frequency_hz = DEFAULT_HZ;
	if (!o.max_depth)
		o.max_depth = RP_STACK_MAX;
	if (!o.ringbuf_bytes)
		o.ringbuf_bytes = DEFAULT_RINGBUF;
	int rc = validate(&o, err);
	if (rc)
		return rc;
	rc = check_privileges(err);
	if (rc)
		return rc;

	struct rp_sampler *s = calloc(1, sizeof(*s));
	if (!s)
		return rp_err_set(err, -ENOMEM, "out of memory opening the CPU sampler");
	s->cgroup_fd = -1;
	if (o.cgroup_path) {
		s->cgroup_fd = rc = open_cgroup(o.cgroup_path, err);
		if (rc < 0)
			goto fail;
	}
	rc = online_cpus(&s->cpus, &s->ncpus, err);
	if (rc)
		goto fail;
	s->links = calloc(s->ncpus, sizeof(*s->links));
	if (!s->links) {
		rc = rp_err_set(err, -ENOMEM, "out of memory opening the CPU sampler");
		goto fail;
	}
	rc = load(s, &o, err);
	if (rc)
		goto fail;
	/* Cycles where the PMU has them; virtual machines often do not. */
	int probe = perf_open(true, o.frequency_hz, s->cpus[0]);
	s->hardware = probe >= 0;
	if (probe >= 0)
		close(probe);
	rc = attach_all(s, o.frequency_hz, s->links, err);
	if (rc)
		goto fail;
	s->frequency_hz = o.frequency_hz;
	*out = s;
	return 0;
fail:
	free(s->links); /* attach_all destroyed what it made */
	s->links = NULL;
	rp_sampler_close(s);
	return rc;
}

int rp_sampler_set_frequency(struct rp_sampler *s, unsigned hz, struct rp_err *err)
{
	int rc = validate_hz(hz, err);
	if (rc)
		return rc;
	/* New events first, so a failure leaves the sampler as it was.  For
	 * the instant both sets run a CPU may be sampled twice. */
	struct bpf_link **links = calloc(s->ncpus, sizeof(*links));
	if (!links)
		return rp_err_set(err, -ENOMEM, "out of memory re-arming the CPU sampler");
	rc = attach_all(s, hz, links, err);
	if (rc) {
		free(links);
		return rc;
	}
	destroy_links(s->links, s->ncpus);
	free(s->links);
	s->links = links;
	s->frequency_hz = hz;
	return 0;
}

long rp_sampler_poll(struct rp_sampler *s, rp_sample_fn fn, void *ctx)
{
	s->fn = fn;
	s->fn_ctx = ctx;
	s->polls++;
	return ring_buffer__consume(s->rb);
}

void rp_sampler_stats(const struct rp_sampler *s, struct rp_sampler_stats *st)
{
	*st = (struct rp_sampler_stats){
		.samples = s->samples,
		.lost = __atomic_load_n(&s->skel->bss->lost, __ATOMIC_RELAXED),
		.polls = s->polls,
		.frequency_hz = s->frequency_hz,
		.hardware_event = s->hardware,
	};
	struct bpf_prog_info info = { 0 };
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(s->skel->progs.rp_on_sample), &info, &len) == 0) {
		st->bpf_run_ns = info.run_time_ns;
		st->bpf_run_count = info.run_cnt;
	}
}

void rp_sampler_close(struct rp_sampler *s)
{
	if (!s)
		return;
	if (s->links) {
		destroy_links(s->links, s->ncpus);
		free(s->links);
	}
	ring_buffer__free(s->rb);
	rp_sampler_bpf__destroy(s->skel);
	if (s->cgroup_fd >= 0)
		close(s->cgroup_fd);
	free(s->cpus);
	free(s);
}
