/* Fuzz target for the CFI unwinder (collectors/cpu/unwind), a
 * differential one: the input is a sample's registers and stack copy,
 * unwound against this program's own mappings and CFI with the compiled
 * rows and with libdwfl alone.  Whatever it holds, both stay within the
 * copy and max frames and give the same frames.
 *
 * Input: ip, bp, then the stack's words (sp is fixed), and a last byte
 * for max.  A word whose top 16 bits are 0xfffe becomes an address in
 * this program's code (a return address the rows compile), 0xfffd a
 * pointer into the copy (a saved rbp or a CFA base); any other is taken
 * as it is. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/types.h>

#include "image.h"
#include "sampler_record.h"
#include "unwind.h"

#define SP 0x7ff000000000ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* This program's code around the unwinder's (the collectors' library is
 * linked in): gcc's CFI there has every row form the rows compile,
 * remembered and restored states included. */
#define CODE_SPAN 0x20000u

static uint64_t word(uint64_t w, size_t len)
{
	uint64_t code = (uint64_t)(uintptr_t)rp_unwind_stack - CODE_SPAN / 2;
	switch (w >> 48) {
	case 0xfffe:
		return code + (w & 0xffffffffu) % CODE_SPAN;
	case 0xfffd:
		return SP + (len ? (w & 0xffffu) % len : 0);
	default:
		return w;
	}
}

static struct rp_unwind *new_unwind(bool rules)
{
	struct rp_unwind *u = NULL;
	struct rp_err err = { 0 };
	check(rp_unwind_new("/proc", &u, &err) == 0);
	rp_unwind_use_rules(u, rules);
	return u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Kept across inputs, as the daemon keeps them across samples. */
	static struct rp_unwind *by_rows, *by_dwfl;
	static uint64_t stack[RP_SAMPLER_STACK_MAX / 8];
	if (!by_rows) {
		by_rows = new_unwind(true);
		by_dwfl = new_unwind(false);
	}
	uint64_t regs[2] = { 0 };
	memcpy(regs, data, size < sizeof(regs) ? size : sizeof(regs));
	size_t len = size > sizeof(regs) ? (size - sizeof(regs)) & ~(size_t)7 : 0;
	if (len > sizeof(stack))
		len = sizeof(stack);
	memcpy(stack, data + sizeof(regs), len);
	for (size_t i = 0; i < len / 8; i++)
		stack[i] = word(stack[i], len);
	struct rp_unwind_input in = { .pid = (uint32_t)getpid(), .tid = (uint32_t)gettid(),
				      .ip = word(regs[0], len), .sp = SP, .bp = word(regs[1], len),
				      .stack = (const uint8_t *)stack, .len = len };
	uint64_t a[RP_SAMPLER_DEPTH_MAX], b[RP_SAMPLER_DEPTH_MAX];
	unsigned max = 1 + (size ? data[size - 1] : 0) % RP_SAMPLER_DEPTH_MAX;
	unsigned n = rp_unwind_stack(by_rows, &in, a, max);
	check(n <= max && rp_unwind_stack(by_dwfl, &in, b, max) == n);
	check(!memcmp(a, b, n * sizeof(a[0])) && (!n || a[0] == in.ip));
	return 0;
}
