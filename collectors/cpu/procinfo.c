#include "procinfo.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jitreg.h"
#include "procmem.h"

#define NS 1000000000ull
#define RESCAN_MIN_NS (1 * NS)
#define RESCAN_MAX_NS (64 * NS)
/* Build-id cache slots; cleared when half full (a reload only costs a
 * re-read of the files). */
#define BID_SLOTS 4096

struct range {
	uint64_t start, end;
};

struct proc {
	uint32_t pid; /* 0: empty slot */
	uint32_t nranges;
	struct range *ranges; /* the mappings handed on, by address */
	uint64_t jit_desc;    /* its JIT's __jit_debug_descriptor; 0: none seen */
	uint64_t next_scan_ns, backoff_ns;
};

struct bid_ent {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	bool used;
	bool jit;              /* defines __jit_debug_descriptor ... */
	uint64_t jit_from_base; /* ... this far from its first loaded page */
	uint8_t len;
	uint8_t id[RP_BUILD_ID_MAX];
};

struct rp_procinfo {
	char root[PATH_MAX - 64]; /* room for "/PID/map_files/START-END" */
	struct proc *procs;       /* open addressing by pid */
	size_t mask, nprocs;
	struct bid_ent *bids;
	size_t nbids;
	char *line;
	size_t line_cap;
	struct rp_procinfo_stats st;
};

int rp_procinfo_new(const char *proc_root, struct rp_procinfo **out, struct rp_err *err)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return rp_err_set(err, -ENOTSUP, "libelf is too old for this ringprofd: %s",
				  elf_errmsg(-1));
	struct rp_procinfo *p = calloc(1, sizeof(*p));
	if (!p)
		return rp_err_set(err, -ENOMEM, "out of memory for process information");
	if ((size_t)snprintf(p->root, sizeof(p->root), "%s", proc_root) >= sizeof(p->root)) {
		free(p);
		return rp_err_set(err, -ENAMETOOLONG, "proc path too long: %s", proc_root);
	}
	p->mask = 255;
	p->procs = calloc(p->mask + 1, sizeof(*p->procs));
	p->bids = calloc(BID_SLOTS, sizeof(*p->bids));
	if (!p->procs || !p->bids) {
		rp_procinfo_free(p);
		return rp_err_set(err, -ENOMEM, "out of memory for process information");
	}
	*out = p;
	return 0;
}

void rp_procinfo_free(struct rp_procinfo *p)
{
	if (!p)
		return;
	for (size_t i = 0; p->procs && i <= p->mask; i++)
		free(p->procs[i].ranges);
	free(p->procs);
	free(p->bids);
	free(p->line);
	free(p);
}

void rp_procinfo_stats(const struct rp_procinfo *p, struct rp_procinfo_stats *st)
{
	*st = p->st;
}

/* ---- the process table ---------------------------------------------------- */

static size_t slot_of(const struct rp_procinfo *p, uint32_t pid)
{
	return (pid * 2654435761u) & p->mask;
}

static struct proc *find_proc(struct rp_procinfo *p, uint32_t pid)
{
	for (size_t i = slot_of(p, pid);; i = (i + 1) & p->mask) {
		if (p->procs[i].pid == pid)
			return &p->procs[i];
		if (!p->procs[i].pid)
			return NULL;
	}
}

static void place(struct rp_procinfo *p, const struct proc *pr)
{
	size_t i = slot_of(p, pr->pid);
	while (p->procs[i].pid)
		i = (i + 1) & p->mask;
	p->procs[i] = *pr;
}

/* NULL when out of memory: the process then goes undescribed. */
static struct proc *add_proc(struct rp_procinfo *p, uint32_t pid)
{
	if (p->nprocs + 1 > (p->mask + 1) / 2) {
		struct proc *old = p->procs;
		size_t old_mask = p->mask;
		struct proc *grown = calloc(2 * (old_mask + 1), sizeof(*grown));
		if (!grown)
			return NULL;
		p->procs = grown;
		p->mask = 2 * old_mask + 1;
		for (size_t i = 0; i <= old_mask; i++)
			if (old[i].pid)
				place(p, &old[i]);
		free(old);
	}
	p->nprocs++;
	place(p, &(struct proc){ .pid = pid });
	return find_proc(p, pid);
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void remove_proc(struct rp_procinfo *p, struct proc *pr)
{
	size_t i = (size_t)(pr - p->procs);
	free(pr->ranges);
	p->procs[i] = (struct proc){ 0 };
	p->nprocs--;
	for (size_t j = (i + 1) & p->mask; p->procs[j].pid; j = (j + 1) & p->mask) {
		size_t home = slot_of(p, p->procs[j].pid);
		/* Move j into the hole at i unless its home lies in (i, j]. */
		if (((j - home) & p->mask) >= ((j - i) & p->mask)) {
			p->procs[i] = p->procs[j];
			p->procs[j].pid = 0;
			p->procs[j].ranges = NULL;
			i = j;
		}
	}
}

static bool in_ranges(const struct proc *pr, uint64_t ip)
{
	size_t lo = 0, hi = pr->nranges;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ip < pr->ranges[mid].start)
			hi = mid;
		else if (ip >= pr->ranges[mid].end)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* ---- build-ids -------------------------------------------------------------- */

static uint8_t note_build_id(Elf_Data *d, uint8_t *id)
{
	GElf_Nhdr nh;
	size_t off = 0, name_off, desc_off;
	while (d && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 || !nh.n_descsz ||
		    memcmp((const char *)d->d_buf + name_off, "GNU", 4))
			continue;
		/* Longer ids (rare) are kept and compared by their start. */
		size_t n = nh.n_descsz < RP_BUILD_ID_MAX ? nh.n_descsz : RP_BUILD_ID_MAX;
		memcpy(id, (const char *)d->d_buf + desc_off, n);
		return (uint8_t)n;
	}
	return 0;
}

/* The GNU build-id note of an ELF file: from the program headers, where a
 * loaded object has it, else from the sections.  0 when there is none. */
static uint8_t read_build_id(int fd, uint8_t *id)
{
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e)
		return 0;
	uint8_t len = 0;
	size_t nph;
	if (elf_kind(e) == ELF_K_ELF && elf_getphdrnum(e, &nph) == 0) {
		for (size_t i = 0; i < nph && !len; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_NOTE)
				len = note_build_id(elf_getdata_rawchunk(e, (int64_t)ph.p_offset,
									 ph.p_filesz,
									 ph.p_align == 8 ? ELF_T_NHDR8
											 : ELF_T_NHDR),
						    id);
		}
		for (Elf_Scn *scn = NULL; !len && (scn = elf_nextscn(e, scn));) {
			GElf_Shdr sh;
			if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE)
				len = note_build_id(elf_getdata(scn, NULL), id);
		}
	}
	elf_end(e);
	return len;
}

static struct bid_ent *bid_slot(struct rp_procinfo *p, const struct stat *st)
{
	uint64_t h = ((uint64_t)st->st_dev * 31 + st->st_ino) * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)st->st_mtim.tv_nsec;
	for (size_t i = (h >> 32) % BID_SLOTS;; i = (i + 1) % BID_SLOTS) {
		struct bid_ent *b = &p->bids[i];
		if (!b->used || (b->dev == st->st_dev && b->ino == st->st_ino &&
				 b->mtime.tv_sec == st->st_mtim.tv_sec &&
				 b->mtime.tv_nsec == st->st_mtim.tv_nsec))
			return b;
	}
}

/* What is known of the file mapped at [start, end) (its build-id, its
 * JIT descriptor), NULL when it cannot be read: opened through map_files
 * when we may (the very file mapped, even if deleted or in another mount
 * namespace), else by path if it is still the mapped inode. */
static const struct bid_ent *file_facts(struct rp_procinfo *p, uint32_t pid, uint64_t start,
					uint64_t end, const char *path, uint64_t inode)
{
	char mf[PATH_MAX];
	snprintf(mf, sizeof(mf), "%s/%u/map_files/%" PRIx64 "-%" PRIx64, p->root, pid, start, end);
	struct stat st;
	int fd = open(mf, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_ino != inode)) {
			close(fd);
			return NULL;
		}
	}
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (p->nbids >= BID_SLOTS / 2) {
		memset(p->bids, 0, BID_SLOTS * sizeof(*p->bids));
		p->nbids = 0;
	}
	struct bid_ent *b = bid_slot(p, &st);
	if (!b->used) {
		*b = (struct bid_ent){ .dev = st.st_dev, .ino = st.st_ino, .mtime = st.st_mtim,
				       .used = true };
		b->len = read_build_id(fd, b->id);
		b->jit = rp_jit_find_descriptor(fd, &b->jit_from_base) == 0;
		p->nbids++;
		p->st.build_ids++;
	}
	close(fd);
	return b;
}

/* ---- /proc files -------------------------------------------------------------- */

/* Reads <root>/<pid>/<file> into buf (NUL-terminated); its length, or -1. */
static ssize_t read_proc_file(const struct rp_procinfo *p, uint32_t pid, const char *file,
			      char *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%u/%s", p->root, pid, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

static int emit_name(struct rp_procinfo *p, const struct rp_event *s, rp_event_fn fn, void *ctx)
{
	char comm[64];
	ssize_t n = read_proc_file(p, s->pid, "comm", comm, sizeof(comm));
	const char *name = comm;
	if (n > 0)
		comm[strcspn(comm, "\n")] = 0;
	else if (s->tid == s->pid && s->name)
		name = s->name; /* exited already: the sample's comm is the process's */
	else
		return 0;
	struct rp_event ev = { .kind = RP_EV_PROCESS_NAME, .ts = s->ts, .pid = s->pid,
			       .tid = s->pid, .name = name };
	return fn(ctx, &ev);
}

static int emit_cmdline(struct rp_procinfo *p, const struct rp_event *s, rp_event_fn fn,
			void *ctx)
{
	char cmd[RP_NAME_MAX + 2];
	ssize_t n = read_proc_file(p, s->pid, "cmdline", cmd, sizeof(cmd));
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	while (n > 0 && cmd[n - 1] == ' ')
		cmd[--n] = 0;
	if (n <= 0)
		return 0; /* kernel threads and zombies have none */
	struct rp_event ev = { .kind = RP_EV_PROCESS_CMDLINE, .ts = s->ts, .pid = s->pid,
			       .tid = s->pid, .name = cmd };
	return fn(ctx, &ev);
}

static bool had_range(const struct proc *pr, uint64_t start, uint64_t end)
{
	size_t lo = 0, hi = pr->nranges;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct range *r = &pr->ranges[mid];
		if (r->start == start && r->end == end)
			return true;
		if (r->start < start || (r->start == start && r->end < end))
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static int by_start(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* The functions the process's JIT registered (GDB's JIT interface) that
 * were not handed on before, as mappings named "[jit] FUNCTION"; their
 * ranges join *now (grown for them).  Returns 0 or fn's error. */
static int scan_jit(struct rp_procinfo *p, struct proc *pr, uint64_t ts, rp_event_fn fn,
		    void *ctx, struct range **now, uint32_t *n, bool *changed)
{
	struct rp_jit_func *funcs = malloc(RP_PROCINFO_MAX_JIT * sizeof(*funcs));
	int got = funcs ? rp_jit_walk(rp_procmem_read, NULL, pr->pid, pr->jit_desc, funcs,
				      RP_PROCINFO_MAX_JIT) : 0;
	struct range *grown = got > 0 ? realloc(*now, (*n + (size_t)got) * sizeof(**now)) : NULL;
	if (grown)
		*now = grown;
	else
		got = 0; /* none, or out of memory: the mappings read stay */
	int rc = 0;
	for (int i = 0; rc == 0 && i < got; i++) {
		const struct rp_jit_func *j = &funcs[i];
		(*now)[(*n)++] = (struct range){ j->start, j->end };
		if (had_range(pr, j->start, j->end))
			continue;
		char name[sizeof(RP_JIT_MAPPING_PREFIX) + RP_JIT_NAME];
		snprintf(name, sizeof(name), RP_JIT_MAPPING_PREFIX "%s", j->name);
		struct rp_event ev = { .kind = RP_EV_MAPPING, .ts = ts, .pid = pr->pid,
				       .tid = pr->pid, .name = name,
				       .u.mapping = { .start = j->start, .end = j->end } };
		rc = fn(ctx, &ev);
		p->st.jit_functions++;
		*changed = true;
	}
	free(funcs);
	return rc;
}

/* Reads the process's maps and hands on the executable mappings not
 * handed on before, then the JIT's functions when a mapped file keeps a
 * JIT descriptor.  Sets *changed when there were any.  Returns 0 or fn's
 * error. */
static int scan_maps(struct rp_procinfo *p, struct proc *pr, uint64_t ts, rp_event_fn fn,
		     void *ctx, bool *changed)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%u/maps", p->root, pr->pid);
	FILE *f = fopen(path, "re");
	*changed = false;
	if (!f)
		return 0; /* gone, or not ours to read */
	p->st.scans++;
	struct range *now = malloc(RP_PROCINFO_MAX_MAPPINGS * sizeof(*now));
	uint32_t n = 0;
	int rc = 0;
	/* The mapping of the file offset 0 of the file mapped last: where a
	 * JIT descriptor's distance from the first page counts from. */
	uint64_t base = 0, base_inode = 0;
	unsigned base_major = 0, base_minor = 0;
	while (now && rc == 0 && n < RP_PROCINFO_MAX_MAPPINGS &&
	       getline(&p->line, &p->line_cap, f) > 0) {
		uint64_t start, end, offset, inode;
		unsigned major, minor;
		char perms[5];
		int at = 0;
		if (sscanf(p->line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n",
			   &start, &end, perms, &offset, &major, &minor, &inode, &at) < 7 ||
		    end <= start)
			continue;
		if (offset == 0 && inode) {
			base = start;
			base_inode = inode;
			base_major = major;
			base_minor = minor;
		}
		if (perms[2] != 'x')
			continue;
		char *file = p->line + at;
		file[strcspn(file, "\n")] = 0;
		size_t len = strlen(file);
		if (len > 10 && !strcmp(file + len - 10, " (deleted)"))
			file[len - 10] = 0; /* the build-id tells whether it is the same file */
		if (file[0] != '/' && strcmp(file, "[vdso]"))
			continue; /* anonymous code (JIT): named by scan_jit, or perf maps at export */
		now[n++] = (struct range){ start, end };
		if (had_range(pr, start, end))
			continue;
		struct rp_event ev = { .kind = RP_EV_MAPPING, .ts = ts, .pid = pr->pid,
				       .tid = pr->pid, .name = file,
				       .u.mapping = { .start = start, .end = end, .offset = offset } };
		const struct bid_ent *facts =
			file[0] == '/' ? file_facts(p, pr->pid, start, end, file, inode) : NULL;
		if (facts) {
			ev.u.mapping.build_id_len = facts->len;
			memcpy(ev.u.mapping.build_id, facts->id, facts->len);
			if (facts->jit && base_inode == inode && base_major == major &&
			    base_minor == minor)
				pr->jit_desc = base + facts->jit_from_base;
		}
		rc = fn(ctx, &ev);
		p->st.mappings++;
		*changed = true;
	}
	fclose(f);
	if (now && rc == 0 && pr->jit_desc)
		rc = scan_jit(p, pr, ts, fn, ctx, &now, &n, changed);
	if (now && n) {
		qsort(now, n, sizeof(*now), by_start);
		free(pr->ranges);
		pr->ranges = now;
		pr->nranges = n;
	} else {
		free(now);
	}
	return rc;
}

int rp_procinfo_sample(struct rp_procinfo *p, const struct rp_event *s, rp_event_fn fn, void *ctx)
{
	if (!s->pid)
		return 0;
	struct proc *pr = find_proc(p, s->pid);
	bool changed;
	if (!pr) {
		if (!(pr = add_proc(p, s->pid)))
			return 0;
		p->st.processes++;
		pr->backoff_ns = RESCAN_MIN_NS;
		pr->next_scan_ns = s->ts + RESCAN_MIN_NS;
		int rc = emit_name(p, s, fn, ctx);
		if (rc == 0)
			rc = emit_cmdline(p, s, fn, ctx);
		return rc ? rc : scan_maps(p, pr, s->ts, fn, ctx, &changed);
	}
	if (s->u.sample.nframes <= s->u.sample.nkernel ||
	    in_ranges(pr, s->u.sample.frames[s->u.sample.nkernel]) || s->ts < pr->next_scan_ns)
		return 0;
	int rc = scan_maps(p, pr, s->ts, fn, ctx, &changed);
	pr->backoff_ns = changed ? RESCAN_MIN_NS
		       : pr->backoff_ns * 2 > RESCAN_MAX_NS ? RESCAN_MAX_NS : pr->backoff_ns * 2;
	pr->next_scan_ns = s->ts + pr->backoff_ns;
	return rc;
}

void rp_procinfo_reap(struct rp_procinfo *p, void (*gone)(void *ctx, uint32_t pid), void *ctx)
{
	for (size_t i = 0; i <= p->mask;) {
		uint32_t pid = p->procs[i].pid;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%u", p->root, pid);
		if (!pid || access(path, F_OK) == 0 || errno != ENOENT) {
			i++;
			continue;
		}
		remove_proc(p, &p->procs[i]);
		gone(ctx, pid);
		/* Slot i now holds a process shifted back into it: look again. */
	}
}
