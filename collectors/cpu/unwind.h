/* User stacks of code without frame pointers, unwound with the binaries'
 * CFI (docs/unwinding.md).
 *
 * The BPF sampler copies a sample's user registers and the top of its
 * stack when its frame-pointer walk looks cut short; soon after, while
 * the process is alive, this module unwinds that copy with the call frame
 * information (.eh_frame, .debug_frame) of the binaries the process maps,
 * through elfutils' unwinder (libdwfl) with the copy as the only memory it
 * may read.  Each process's mappings and the CFI loaded from them are kept
 * for the next samples, for RP_UNWIND_PROCS processes at most (least
 * recently used out), read again when a sample runs outside them.
 * Each CFI row libdw gives is compiled once per process into a rule on
 * rbp, rsp and the return address, which steps the copy without libdwfl;
 * a sample that meets a row of any other form is unwound by libdwfl, so
 * that the frames are libdwfl's either way.
 *
 * Bounded for hostile processes: reads never leave the copy, at most max
 * frames, a binary that does not parse only ends the unwind.
 *
 * Single threaded. */
#ifndef RINGPROF_UNWIND_H
#define RINGPROF_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RP_UNWIND_PROCS 64

/* One sample's user state, as the sampler copied it: stack holds the
 * bytes at [sp, sp + len). */
struct rp_unwind_input {
	uint32_t pid, tid;
	uint64_t ip, sp, bp;
	const uint8_t *stack;
	size_t len;
};

struct rp_unwind_stats {
	uint64_t unwound;    /* samples that gave two frames or more */
	uint64_t failed;     /* samples whose unwind stopped at the first frame */
	uint64_t processes;  /* mappings read (a process's first sample, or again) */
	uint64_t by_rules;   /* samples unwound by compiled rows alone, no libdwfl */
	uint64_t rows;       /* CFI rows compiled (each asked of libdw once) */
};

struct rp_unwind;

/* proc_root: "/proc", another directory in tests. */
RP_MUST_CHECK int rp_unwind_new(const char *proc_root, struct rp_unwind **out, struct rp_err *err);
void rp_unwind_free(struct rp_unwind *u);

/* Whether samples go through the compiled rows first (the default) or
 * straight to libdwfl: for tests and measurement, which compare both. */
void rp_unwind_use_rules(struct rp_unwind *u, bool on);

/* Unwinds in: writes the instruction pointer, then the return addresses,
 * leaf first, at most max, to out.  Returns how many (0: the process or
 * its mappings cannot be read). */
unsigned rp_unwind_stack(struct rp_unwind *u, const struct rp_unwind_input *in, uint64_t *out,
			 unsigned max);

/* The frame-pointer walk (walk, nwalk frames) agrees with the CFI unwind
 * (cfi, ncfi) when all its frames but the last (which may be garbage read
 * past the last frame pointer) are the unwind's: frame pointers all the
 * way, except in the C library's start code.  A leaf function built
 * without a frame (-momit-leaf-frame-pointer, as in most frame-pointer
 * builds) hides its caller, the unwind's second frame, from every walk:
 * the walk agrees without it too, or a frame-pointer process whose samples
 * land in such leaves would be copied and unwound for ever (bench/overhead). */
bool rp_unwind_fp_agrees(const uint64_t *walk, unsigned nwalk, const uint64_t *cfi, unsigned ncfi);

/* After an unwind of pid: whether its frame-pointer walk agreed with it.
 * True once RP_UNWIND_AGREE walks in a row did (then it counts again):
 * the process's walks can be trusted without a copy for a while. */
#define RP_UNWIND_AGREE 8
bool rp_unwind_vote(struct rp_unwind *u, uint32_t pid, bool agree);

/* Forget the processes that exited (no <proc_root>/PID any more). */
void rp_unwind_reap(struct rp_unwind *u);

void rp_unwind_stats(const struct rp_unwind *u, struct rp_unwind_stats *st);

#endif
