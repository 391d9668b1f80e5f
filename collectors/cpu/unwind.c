#include "unwind.h"

#include <dwarf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <elfutils/libdwfl.h>

#include "clock.h"

/* A sample outside every known mapping reads the mappings again, at most
 * this often per process: a process that runs code no file backs (a JIT)
 * would otherwise have them read on every sample. */
#define REREAD_NS 1000000000ull

/* x86-64 DWARF register numbers: rbp, rsp (rip goes as the pc). */
#define DWARF_RBP 6

struct proc {
	uint32_t pid;        /* 0: a free slot */
	Dwfl *dwfl;
	uint64_t used;       /* u->tick of the last sample: least recently used goes */
	uint64_t read_ns;    /* when its mappings were read */
	unsigned agreed;     /* frame-pointer walks in a row the unwind agreed with */
};

struct rp_unwind {
	char proc_root[PATH_MAX];
	struct proc procs[RP_UNWIND_PROCS];
	uint64_t tick;
	/* The sample being unwound, for the callbacks. */
	const struct rp_unwind_input *in;
	uint64_t *out;
	unsigned n, max;
	struct rp_unwind_stats st;
};

/* No separate debug files: .eh_frame is in the binaries, and a search
 * (debuginfod) could take any time. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			  Dwarf_Addr base, const char *file_name, const char *debuglink_file,
			  GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)file_name;
	(void)debuglink_file, (void)debuglink_crc, (void)debuginfo_file_name;
	return -1;
}

static const Dwfl_Callbacks dwfl_callbacks = {
	.find_elf = dwfl_linux_proc_find_elf,
	.find_debuginfo = find_debuginfo,
};

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_arg)
{
	(void)dwfl, (void)arg, (void)thread_arg;
	return 0; /* only the sampled thread, through get_thread */
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg)
{
	struct rp_unwind *u = arg;
	(void)dwfl;
	*thread_arg = u;
	return u->in && (uint32_t)tid == u->in->tid;
}

/* The only memory an unwind reads: the copied stack. */
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct rp_unwind *u = arg;
	const struct rp_unwind_input *in = u->in;
	(void)dwfl;
	if (addr < in->sp || in->len < sizeof(*result) || addr - in->sp > in->len - sizeof(*result))
		return false;
	memcpy(result, in->stack + (addr - in->sp), sizeof(*result));
	return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
	const struct rp_unwind_input *in = ((struct rp_unwind *)thread_arg)->in;
	Dwarf_Word regs[2] = { in->bp, in->sp };
	dwfl_thread_state_register_pc(thread, in->ip);
	return dwfl_thread_state_registers(thread, DWARF_RBP, 2, regs);
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = next_thread,
	.get_thread = get_thread,
	.memory_read = memory_read,
	.set_initial_registers = set_initial_registers,
};

int rp_unwind_new(const char *proc_root, struct rp_unwind **out, struct rp_err *err)
{
	struct rp_unwind *u = calloc(1, sizeof(*u));
	if (!u)
		return rp_err_set(err, -ENOMEM, "out of memory");
	if ((size_t)snprintf(u->proc_root, sizeof(u->proc_root), "%s", proc_root) >=
	    sizeof(u->proc_root)) {
		free(u);
		return rp_err_set(err, -ENAMETOOLONG, "proc root %s is too long", proc_root);
	}
	*out = u;
	return 0;
}

static void forget(struct proc *p)
{
	if (p->dwfl)
		dwfl_end(p->dwfl);
	*p = (struct proc){ 0 };
}

void rp_unwind_free(struct rp_unwind *u)
{
	if (!u)
		return;
	for (unsigned i = 0; i < RP_UNWIND_PROCS; i++)
		forget(&u->procs[i]);
	free(u);
}

/* A Dwfl of pid's mappings as they are now, ready to unwind. */
static Dwfl *read_mappings(struct rp_unwind *u, uint32_t pid)
{
	char path[PATH_MAX + 32];
	(void)snprintf(path, sizeof(path), "%s/%u/maps", u->proc_root, pid);
	FILE *maps = fopen(path, "re");
	if (!maps)
		return NULL;
	Dwfl *dwfl = dwfl_begin(&dwfl_callbacks);
	bool ok = dwfl != NULL;
	if (ok) {
		dwfl_report_begin(dwfl);
		ok = dwfl_linux_proc_maps_report(dwfl, maps) == 0 &&
		     dwfl_report_end(dwfl, NULL, NULL) == 0 &&
		     dwfl_attach_state(dwfl, NULL, (pid_t)pid, &thread_callbacks, u);
	}
	fclose(maps);
	if (!ok && dwfl) {
		dwfl_end(dwfl);
		dwfl = NULL;
	}
	u->st.processes += dwfl != NULL;
	return dwfl;
}

/* pid's slot with its mappings, read for this sample when they do not
 * hold ip; NULL when they cannot be read. */
static struct proc *process(struct rp_unwind *u, uint32_t pid, uint64_t ip)
{
	struct proc *p = NULL, *lru = &u->procs[0];
	for (unsigned i = 0; i < RP_UNWIND_PROCS && !p; i++) {
		if (u->procs[i].pid == pid)
			p = &u->procs[i];
		else if (u->procs[i].used < lru->used)
			lru = &u->procs[i];
	}
	uint64_t now = rp_clock_now_ns();
	if (p && !dwfl_addrmodule(p->dwfl, ip) && now - p->read_ns >= REREAD_NS)
		forget(p);
	else if (p) {
		p->used = ++u->tick;
		return p;
	} else {
		forget(lru);
		p = lru;
	}
	Dwfl *dwfl = read_mappings(u, pid);
	if (!dwfl)
		return NULL;
	*p = (struct proc){ .pid = pid, .dwfl = dwfl, .used = ++u->tick, .read_ns = now };
	return p;
}

static int on_frame(Dwfl_Frame *frame, void *arg)
{
	struct rp_unwind *u = arg;
	Dwarf_Addr pc;
	if (!dwfl_frame_pc(frame, &pc, NULL) || !pc)
		return DWARF_CB_ABORT;
	u->out[u->n++] = pc;
	return u->n < u->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

unsigned rp_unwind_stack(struct rp_unwind *u, const struct rp_unwind_input *in, uint64_t *out,
			 unsigned max)
{
	if (!max || !in->pid)
		return 0;
	struct proc *p = process(u, in->pid, in->ip);
	if (!p)
		return 0;
	u->in = in;
	u->out = out;
	u->n = 0;
	u->max = max;
	/* The end of the stack reads as an error: what was unwound counts. */
	(void)dwfl_getthread_frames(p->dwfl, (pid_t)in->tid, on_frame, u);
	u->in = NULL;
	if (u->n >= 2)
		u->st.unwound++;
	else
		u->st.failed++;
	return u->n;
}

bool rp_unwind_fp_agrees(const uint64_t *walk, unsigned nwalk, const uint64_t *cfi, unsigned ncfi)
{
	if (nwalk < 3 || walk[0] != cfi[0])
		return false;
	for (unsigned hidden = 0; hidden <= 1; hidden++)
		if (ncfi + 1 >= nwalk + hidden &&
		    !memcmp(walk + 1, cfi + 1 + hidden, (nwalk - 2) * sizeof(walk[0])))
			return true;
	return false;
}

bool rp_unwind_vote(struct rp_unwind *u, uint32_t pid, bool agree)
{
	for (unsigned i = 0; i < RP_UNWIND_PROCS; i++) {
		struct proc *p = &u->procs[i];
		if (p->pid != pid)
			continue;
		p->agreed = agree ? p->agreed + 1 : 0;
		if (p->agreed < RP_UNWIND_AGREE)
			return false;
		p->agreed = 0;
		return true;
	}
	return false;
}

void rp_unwind_reap(struct rp_unwind *u)
{
	char path[PATH_MAX + 16];
	for (unsigned i = 0; i < RP_UNWIND_PROCS; i++) {
		if (!u->procs[i].pid)
			continue;
		(void)snprintf(path, sizeof(path), "%s/%u", u->proc_root, u->procs[i].pid);
		if (access(path, F_OK) != 0)
			forget(&u->procs[i]);
	}
}

void rp_unwind_stats(const struct rp_unwind *u, struct rp_unwind_stats *st)
{
	*st = u->st;
}
