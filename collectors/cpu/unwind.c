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

/* x86-64 DWARF register numbers: rbp, rsp, the return address (rip
 * goes as the pc). */
#define DWARF_RBP 6
#define DWARF_RSP 7
#define DWARF_RA 16

/* Compiled CFI rows kept per process (docs/unwinding.md, "Rule cache"):
 * a full table is emptied and fills again. */
#define ROWS_MAX 1024

/* The registers a compiled row reads and writes, in this order. */
enum { REG_RBP, REG_RSP, REG_RA, NREGS };
static const unsigned reg_dwarf[NREGS] = { DWARF_RBP, DWARF_RSP, DWARF_RA };

/* How a row finds a register of the caller's frame, as libdwfl reads
 * the rule libdw gives (frame_unwind.c, handle_cfi). */
enum rule {
	RULE_UNSET,  /* undefined, or a rule libdwfl cannot evaluate: unknown */
	RULE_SAME,   /* this frame's value */
	RULE_AT_CFA, /* read at CFA + off */
	RULE_CFA,    /* CFA + off */
};

/* One CFI row, compiled: for every pc in [lo, hi), the CFA is register
 * cfa_reg + cfa_off and each register follows rule[] with off[].  A row
 * of any other form (an expression, another register, a signal frame, no
 * CFI at all) is slow: libdwfl unwinds the sample. */
struct row {
	uint64_t lo, hi;
	uint64_t cfa_off;
	uint64_t off[NREGS];
	uint8_t cfa_reg;
	uint8_t rule[NREGS];
	bool slow;
};

struct proc {
	uint32_t pid;        /* 0: a free slot */
	Dwfl *dwfl;
	uint64_t used;       /* u->tick of the last sample: least recently used goes */
	uint64_t read_ns;    /* when its mappings were read */
	unsigned agreed;     /* frame-pointer walks in a row the unwind agreed with */
	struct row *rows;    /* compiled rows, sorted by lo, not overlapping */
	unsigned nrows;
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
	bool rules;          /* compiled rows first (rp_unwind_use_rules) */
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
static bool read_copy(const struct rp_unwind_input *in, uint64_t addr, uint64_t *result)
{
	if (addr < in->sp || in->len < sizeof(*result) || addr - in->sp > in->len - sizeof(*result))
		return false;
	memcpy(result, in->stack + (addr - in->sp), sizeof(*result));
	return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct rp_unwind *u = arg;
	(void)dwfl;
	return read_copy(u->in, addr, result);
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
	u->rules = true;
	*out = u;
	return 0;
}

void rp_unwind_use_rules(struct rp_unwind *u, bool on)
{
	u->rules = on;
}

static void forget(struct proc *p)
{
	if (p->dwfl)
		dwfl_end(p->dwfl);
	free(p->rows);
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

/* The index among a row's registers of DWARF register regno, or NREGS. */
static uint8_t reg_index(uint64_t regno)
{
	uint8_t i = 0;
	while (i < NREGS && reg_dwarf[i] != regno)
		i++;
	return i;
}

/* Compiles register i's rule in frame as libdwfl evaluates it (libdw
 * gives offset(N) as "CFA, plus N" read as a location, val_offset(N) the
 * same as a value, an expression after "CFA" too).  False where it has
 * none of the forms a row knows. */
static bool compile_register(Dwarf_Frame *frame, unsigned i, struct row *r)
{
	Dwarf_Op mem[3], *ops;
	size_t nops;
	r->rule[i] = RULE_UNSET;
	if (dwarf_frame_register(frame, (int)reg_dwarf[i], mem, &ops, &nops) != 0)
		return true; /* libdwfl leaves it unset */
	if (nops == 0) {
		/* ops == mem: undefined; NULL: same value; else invalid (unset). */
		if (!ops)
			r->rule[i] = RULE_SAME;
		return true;
	}
	if (ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	size_t k = 1;
	if (k < nops && ops[k].atom == DW_OP_plus_uconst)
		r->off[i] = ops[k++].number;
	bool value = k < nops && ops[k].atom == DW_OP_stack_value;
	if (k + value != nops)
		return false;
	r->rule[i] = value ? RULE_CFA : RULE_AT_CFA;
	return true;
}

/* The row libdwfl would use for pc (frame_unwind.c,
 * __libdwfl_frame_unwind: the module's .eh_frame, else its .debug_frame,
 * else the frame-pointer guess, which is slow here), compiled. */
static struct row compile_row(Dwfl *dwfl, uint64_t pc)
{
	struct row r = { .lo = pc, .hi = pc + 1, .slow = true };
	Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
	if (!mod)
		return r;
	Dwarf_Addr bias = 0;
	Dwarf_Frame *frame = NULL;
	Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &bias);
	bool eh = cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) == 0;
	if (!eh) {
		cfi = dwfl_module_dwarf_cfi(mod, &bias);
		if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0)
			return r;
	}
	Dwarf_Addr start, end, low = 0, high = 0;
	bool signal;
	Dwarf_Op *cfa;
	size_t ncfa;
	r.slow = dwarf_frame_info(frame, &start, &end, &signal) != DWARF_RA || signal ||
		 dwarf_frame_cfa(frame, &cfa, &ncfa) != 0 || ncfa != 1 ||
		 cfa[0].atom != DW_OP_bregx || (r.cfa_reg = reg_index(cfa[0].number)) == NREGS;
	if (!r.slow)
		r.cfa_off = cfa[0].number2;
	for (unsigned i = 0; i < NREGS && !r.slow; i++)
		r.slow = !compile_register(frame, i, &r);
	/* A row of .eh_frame serves pc up to the row's end, within the
	 * module: libdw runs the FDE's program to the first advance past the
	 * pc, the same one for every pc in [pc, end).  Not from the row's
	 * start: after DW_CFA_restore_state libdw gives the start of the
	 * state remembered, rows before.  A row of .debug_frame serves only
	 * its pc: libdwfl asks .debug_frame only where .eh_frame has
	 * nothing, which a range could hide. */
	(void)dwfl_module_info(mod, NULL, &low, &high, NULL, NULL, NULL, NULL);
	if (eh && pc < end + bias && pc < high)
		r.hi = end + bias < high ? end + bias : high;
	free(frame);
	return r;
}

/* p's compiled row holding pc, compiled and kept now where none does;
 * NULL without memory. */
static const struct row *row_at(struct rp_unwind *u, struct proc *p, uint64_t pc)
{
	if (!p->rows && !(p->rows = malloc(ROWS_MAX * sizeof(*p->rows))))
		return NULL;
	unsigned lo = 0, hi = p->nrows; /* to the first row starting after pc */
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (p->rows[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && pc < p->rows[lo - 1].hi)
		return &p->rows[lo - 1];
	struct row r = compile_row(p->dwfl, pc);
	/* Between its neighbours, should a hostile binary's rows overlap. */
	if (lo > 0 && r.lo < p->rows[lo - 1].hi)
		r.lo = p->rows[lo - 1].hi;
	if (lo < p->nrows && r.hi > p->rows[lo].lo)
		r.hi = p->rows[lo].lo;
	if (p->nrows == ROWS_MAX)
		p->nrows = lo = 0;
	memmove(&p->rows[lo + 1], &p->rows[lo], (p->nrows - lo) * sizeof(*p->rows));
	p->rows[lo] = r;
	p->nrows++;
	u->st.rows++;
	return &p->rows[lo];
}

/* Unwinds u->in into u->out with p's compiled rows, exactly as libdwfl
 * would with those rules (the same registers known, the same ends).
 * False at a slow row: then libdwfl unwinds the whole sample. */
static bool unwind_by_rows(struct rp_unwind *u, struct proc *p)
{
	const struct rp_unwind_input *in = u->in;
	uint64_t regs[NREGS] = { [REG_RBP] = in->bp, [REG_RSP] = in->sp };
	bool known[NREGS] = { [REG_RBP] = true, [REG_RSP] = true };
	uint64_t pc = in->ip;
	for (bool initial = true; pc; initial = false) {
		u->out[u->n++] = pc;
		if (u->n >= u->max)
			break;
		/* The caller's row holds the call, before the return address. */
		const struct row *r = row_at(u, p, initial ? pc : pc - 1);
		if (!r || r->slow)
			return false;
		uint64_t cfa = regs[r->cfa_reg] + r->cfa_off, next[NREGS];
		bool next_known[NREGS];
		for (unsigned i = 0; i < NREGS; i++) {
			next[i] = cfa + r->off[i];
			next_known[i] = known[r->cfa_reg];
			if (r->rule[i] == RULE_UNSET)
				next_known[i] = false;
			else if (r->rule[i] == RULE_SAME)
				next[i] = regs[i], next_known[i] = known[i];
			else if (r->rule[i] == RULE_AT_CFA)
				next_known[i] = next_known[i] && read_copy(in, next[i], &next[i]);
		}
		if (!next_known[REG_RA])
			break;
		memcpy(regs, next, sizeof(regs));
		memcpy(known, next_known, sizeof(known));
		pc = regs[REG_RA];
	}
	return true;
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
	if (u->rules && unwind_by_rows(u, p)) {
		u->st.by_rules++;
	} else {
		u->n = 0;
		/* The end of the stack reads as an error: what was unwound counts. */
		(void)dwfl_getthread_frames(p->dwfl, (pid_t)in->tid, on_frame, u);
	}
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
