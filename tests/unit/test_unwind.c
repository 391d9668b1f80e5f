/* collectors/cpu/unwind: stacks recorded here the way the BPF sampler
 * records them (the user registers and the stack's top, read as
 * bpf_probe_read_user reads it), unwound offline with this program's CFI
 * twice, by the compiled rows and by libdwfl alone, to the same frames;
 * hostile stacks (random words, a frame that returns to itself,
 * registers anywhere) stay bounded and agree too.  The whole path, BPF copy and daemon,
 * runs in tests/integration/test_unwind.py. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <linux/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sampler_record.h"
#include "unwind.h"

/* The chain below as distributions build code: no frame pointers (gcc;
 * clang has no per-function switch, and unwinds the same with them). */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_FP __attribute__((noinline, noipa, optimize("omit-frame-pointer")))
#else
#define NO_FP __attribute__((noinline))
#endif

struct recorded {
	uint64_t ip, sp, bp;
	uint8_t stack[RP_SAMPLER_STACK_MAX];
	size_t len;
	uint64_t returns[3]; /* into chain_b, chain_a and the test, as each callee saw them */
};

static struct recorded rec;

/* Reads our own memory as the BPF program reads the task's: halving the
 * size until it is all mapped. */
static size_t read_self(void *to, uint64_t from, size_t size)
{
	for (; size >= 512; size /= 2) {
		struct iovec local = { to, size }, remote = { (void *)(uintptr_t)from, size };
		if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)size)
			return size;
	}
	return 0;
}

NO_FP static uint64_t chain_c(volatile uint64_t *work)
{
	rec.returns[0] = (uint64_t)(uintptr_t)__builtin_return_address(0);
	/* A frame of its own, so that the return address is not at sp. */
	volatile uint64_t local[16];
	for (unsigned i = 0; i < 16; i++)
		local[i] = *work + i;
	uint64_t ip, sp, bp;
	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
			 : "=r"(ip), "=r"(sp), "=r"(bp));
	rec.ip = ip;
	rec.sp = sp;
	rec.bp = bp;
	rec.len = read_self(rec.stack, sp, sizeof(rec.stack));
	return local[3];
}

NO_FP static uint64_t chain_b(volatile uint64_t *work)
{
	rec.returns[1] = (uint64_t)(uintptr_t)__builtin_return_address(0);
	volatile uint64_t local[8] = { *work };
	return chain_c(local) + 1;
}

NO_FP static uint64_t chain_a(volatile uint64_t *work)
{
	rec.returns[2] = (uint64_t)(uintptr_t)__builtin_return_address(0);
	volatile uint64_t local[4] = { *work };
	return chain_b(local) + 1;
}

/* chain_b's caller whose CFI finds the CFA through an expression
 * (DW_CFA_def_cfa_expression: DW_OP_breg7 16, the same rsp + 16 as a
 * rule), which no compiled row has: its callees' samples go to libdwfl. */
uint64_t chain_expr(volatile uint64_t *work);
__asm__(".text\n"
	".type chain_expr, @function\n"
	"chain_expr:\n"
	".cfi_startproc\n"
	"	sub $8, %rsp\n"
	"	.cfi_escape 0x0f, 0x02, 0x77, 0x10\n"
	"	call chain_b\n"
	"	add $8, %rsp\n"
	"	.cfi_def_cfa_offset 8\n"
	"	ret\n"
	".cfi_endproc\n"
	".size chain_expr, .-chain_expr\n");

/* chain_b's caller with an early return whose epilogue the CFI brackets
 * with DW_CFA_remember_state and DW_CFA_restore_state, as gcc does: after
 * the restore libdw gives the row's start as the remembered state's, rows
 * before, so a compiled row must not reach down from the call to the
 * early return (rsp + 8 there, rsp + 32 at the call). */
uint64_t chain_remember(volatile uint64_t *work);
extern const char chain_remember_early_ret[] __attribute__((visibility("hidden")));
__asm__(".text\n"
	".type chain_remember, @function\n"
	"chain_remember:\n"
	".cfi_startproc\n"
	"	sub $24, %rsp\n"
	"	.cfi_def_cfa_offset 32\n"
	"	test %rdi, %rdi\n"
	"	jne 1f\n"
	"	.cfi_remember_state\n"
	"	add $24, %rsp\n"
	"	.cfi_def_cfa_offset 8\n"
	".hidden chain_remember_early_ret\n"
	"chain_remember_early_ret:\n"
	"	ret\n"
	"1:\n"
	"	.cfi_restore_state\n"
	"	call chain_b\n"
	"	add $24, %rsp\n"
	"	.cfi_def_cfa_offset 8\n"
	"	ret\n"
	".cfi_endproc\n"
	".size chain_remember, .-chain_remember\n");

static struct rp_unwind_input input(void)
{
	return (struct rp_unwind_input){ .pid = (uint32_t)getpid(), .tid = (uint32_t)gettid(),
					 .ip = rec.ip, .sp = rec.sp, .bp = rec.bp,
					 .stack = rec.stack, .len = rec.len };
}

static struct rp_unwind *new_unwind(void)
{
	struct rp_unwind *u = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_unwind_new("/proc", &u, &err), 0);
	return u;
}

/* Unwinds in with the compiled rows (u) and with libdwfl alone (dwfl):
 * both give the same frames.  Returns how many. */
static unsigned unwind_both(struct rp_unwind *u, struct rp_unwind *dwfl,
			    const struct rp_unwind_input *in, uint64_t *frames, unsigned max)
{
	uint64_t by_dwfl[RP_SAMPLER_DEPTH_MAX];
	unsigned n = rp_unwind_stack(u, in, frames, max);
	assert_int_equal(rp_unwind_stack(dwfl, in, by_dwfl, max), n);
	assert_memory_equal(frames, by_dwfl, n * sizeof(frames[0]));
	return n;
}

static struct rp_unwind *new_dwfl_only(void)
{
	struct rp_unwind *u = new_unwind();
	rp_unwind_use_rules(u, false);
	return u;
}

static void test_recorded_stack(void **state)
{
	(void)state;
	volatile uint64_t work = 7;
	assert_int_equal(chain_a(&work), 7 + 3 + 2);
	assert_true(rec.len >= 512);
	struct rp_unwind *u = new_unwind(), *dwfl = new_dwfl_only();
	uint64_t frames[RP_SAMPLER_DEPTH_MAX];
	struct rp_unwind_input in = input();
	unsigned n = unwind_both(u, dwfl, &in, frames, RP_SAMPLER_DEPTH_MAX);
	/* chain_c's ip, then into chain_b, chain_a, this test, cmocka, main. */
	assert_true(n >= 5);
	assert_int_equal(frames[0], rec.ip);
	assert_int_equal(frames[1], rec.returns[0]);
	assert_int_equal(frames[2], rec.returns[1]);
	assert_int_equal(frames[3], rec.returns[2]);
	/* Bounded by max; the second sample reuses the process's mappings
	 * and the rows compiled for the first. */
	struct rp_unwind_stats st;
	rp_unwind_stats(u, &st);
	uint64_t rows = st.rows;
	assert_int_equal(unwind_both(u, dwfl, &in, frames, 2), 2);
	assert_int_equal(unwind_both(u, dwfl, &in, frames, RP_SAMPLER_DEPTH_MAX), n);
	rp_unwind_stats(u, &st);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.unwound, 3);
	assert_int_equal(st.by_rules, 3);
	assert_true(rows >= 4);
	assert_int_equal(st.rows, rows);
	rp_unwind_stats(dwfl, &st);
	assert_int_equal(st.by_rules, 0);
	assert_int_equal(st.rows, 0);

	/* Through a frame whose CFA is an expression: libdwfl unwinds it,
	 * and the rows agree up to it. */
	assert_int_equal(chain_expr(&work), 7 + 3 + 1);
	in = input();
	rp_unwind_stats(u, &st);
	uint64_t by_rules = st.by_rules;
	n = unwind_both(u, dwfl, &in, frames, RP_SAMPLER_DEPTH_MAX);
	assert_true(n >= 5);
	assert_int_equal(frames[1], rec.returns[0]);
	assert_int_equal(frames[2], rec.returns[1]);
	assert_true(frames[2] > (uint64_t)(uintptr_t)chain_expr &&
		    frames[2] < (uint64_t)(uintptr_t)chain_expr + 16);
	/* Past it into this test. */
	assert_true(frames[3] > (uint64_t)(uintptr_t)test_recorded_stack &&
		    frames[3] < (uint64_t)(uintptr_t)test_recorded_stack + 4096);
	rp_unwind_stats(u, &st);
	assert_int_equal(st.by_rules, by_rules);
	/* A stack cut before that frame stays on the rows. */
	assert_int_equal(unwind_both(u, dwfl, &in, frames, 3), 3);
	rp_unwind_stats(u, &st);
	assert_int_equal(st.by_rules, by_rules + 1);

	/* Through chain_remember's call (its row compiled), then a sample at
	 * its early return: rsp + 8 there, the return address at sp. */
	assert_int_equal(chain_remember(&work), 7 + 3 + 1);
	in = input();
	n = unwind_both(u, dwfl, &in, frames, RP_SAMPLER_DEPTH_MAX);
	assert_true(n >= 4);
	assert_true(frames[2] > (uint64_t)(uintptr_t)chain_remember &&
		    frames[2] < (uint64_t)(uintptr_t)chain_remember_early_ret + 16);
	uint64_t *words = (uint64_t *)rec.stack;
	words[0] = rec.returns[1];
	words[3] = rec.returns[0];
	in.ip = (uint64_t)(uintptr_t)chain_remember_early_ret;
	assert_true(unwind_both(u, dwfl, &in, frames, 2) == 2);
	assert_int_equal(frames[1], rec.returns[1]);
	rp_unwind_free(dwfl);

	/* Votes: RP_UNWIND_AGREE agreeing walks in a row, then counting again;
	 * one that disagrees starts over; a process never unwound has none. */
	for (unsigned round = 0; round < 2; round++) {
		for (unsigned i = 1; i < RP_UNWIND_AGREE; i++)
			assert_false(rp_unwind_vote(u, in.pid, true));
		assert_false(rp_unwind_vote(u, in.pid, false));
		for (unsigned i = 1; i < RP_UNWIND_AGREE; i++)
			assert_false(rp_unwind_vote(u, in.pid, true));
		assert_true(rp_unwind_vote(u, in.pid, true));
	}
	assert_false(rp_unwind_vote(u, in.pid + 1, true));

	/* With the stack cut right after chain_c's frame the unwind stops
	 * there, never reading past the copy. */
	in.len = (size_t)(rec.returns[0] ? 8 : 0);
	n = rp_unwind_stack(u, &in, frames, RP_SAMPLER_DEPTH_MAX);
	assert_true(n <= 2);
	rp_unwind_free(u);
}

static void test_hostile_stacks(void **state)
{
	(void)state;
	volatile uint64_t work = 1;
	(void)chain_a(&work);
	struct rp_unwind *u = new_unwind(), *dwfl = new_dwfl_only();
	uint64_t frames[RP_SAMPLER_DEPTH_MAX];
	srandom(14);
	for (unsigned round = 0; round < 2000; round++) {
		struct rp_unwind_input in = input();
		uint64_t *words = (uint64_t *)rec.stack;
		for (size_t i = 0; i < rec.len / 8; i++) {
			uint64_t r = (uint64_t)random() << 32 | (uint64_t)random();
			/* Random words, pointers into the copy, and return
			 * addresses into this program's code. */
			words[i] = round % 3 == 0 ? r
				 : round % 3 == 1 ? rec.sp + (r % rec.len & ~7ull)
						  : rec.returns[r % 3] + r % 64;
		}
		if (round % 5 == 0)
			in.ip = (uint64_t)random() << 20;
		if (round % 7 == 0)
			in.sp = (uint64_t)random() << 12;
		unsigned n = unwind_both(u, dwfl, &in, frames, RP_SAMPLER_DEPTH_MAX);
		assert_true(n <= RP_SAMPLER_DEPTH_MAX);
	}
	/* Both ways ran: the rows, and libdwfl where ip is in no binary. */
	struct rp_unwind_stats st;
	rp_unwind_stats(u, &st);
	assert_true(st.by_rules > 0 && st.by_rules < 2000);
	/* Every return address leads back into the same frame: a loop that
	 * only max ends. */
	struct rp_unwind_input in = input();
	for (size_t i = 0; i < rec.len / 8; i++)
		((uint64_t *)rec.stack)[i] = rec.ip;
	assert_true(unwind_both(u, dwfl, &in, frames, 16) <= 16);
	/* A process that is not there: nothing, no crash. */
	in.pid = 0x7ffffff0;
	assert_int_equal(unwind_both(u, dwfl, &in, frames, 16), 0);
	rp_unwind_reap(u);
	rp_unwind_free(u);
	rp_unwind_free(dwfl);
}

/* The frame-pointer walk against the CFI unwind (leaf first): whole, with
 * one garbage frame past the last, missing a frameless leaf's caller, and
 * the walks that stop short or go astray. */
static void test_fp_agrees(void **state)
{
	(void)state;
	const uint64_t cfi[6] = { 0x10, 0x20, 0x30, 0x40, 0x50, 0x60 };
	const uint64_t whole[6] = { 0x10, 0x20, 0x30, 0x40, 0x50, 0x60 };
	const uint64_t garbage[7] = { 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x99 };
	const uint64_t leaf[5] = { 0x10, 0x30, 0x40, 0x50, 0x60 };
	const uint64_t astray[5] = { 0x10, 0x20, 0x77, 0x40, 0x50 };
	const uint64_t two_hidden[4] = { 0x10, 0x40, 0x50, 0x60 };
	assert_true(rp_unwind_fp_agrees(whole, 6, cfi, 6));
	assert_true(rp_unwind_fp_agrees(garbage, 7, cfi, 6));
	assert_true(rp_unwind_fp_agrees(leaf, 5, cfi, 6));
	assert_false(rp_unwind_fp_agrees(astray, 5, cfi, 6));
	assert_false(rp_unwind_fp_agrees(two_hidden, 4, cfi, 6));
	/* A walk that stops where the unwind goes on (the C library's start
	 * code keeps no frame pointer) agrees on what it has. */
	assert_true(rp_unwind_fp_agrees(whole, 4, cfi, 6));
	/* Too short to tell, or another ip. */
	assert_false(rp_unwind_fp_agrees(whole, 2, cfi, 2));
	assert_false(rp_unwind_fp_agrees(whole + 1, 5, cfi, 6));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recorded_stack),
		cmocka_unit_test(test_hostile_stacks),
		cmocka_unit_test(test_fp_agrees),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
