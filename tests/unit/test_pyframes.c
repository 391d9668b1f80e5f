/* collectors/cpu/pyframes: line tables of 3.10 and 3.11+, the code object
 * reader against made-up (and hostile) process memory, the merge into
 * native stacks, and the whole of it on python3-fake (fake_python.c), a
 * process with a CPython 3.11's symbols and a code object.  The walk in
 * BPF and the whole path with real interpreters run in
 * tests/integration/test_python_frames.py.
 *
 * Usage: test-pyframes PYTHON3_FAKE */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <inttypes.h>
#include <linux/types.h>
#include <unistd.h>

#include "pyframes.h"
#include "sampler_record.h"
#include "symtest_child.h"

static const char *fake_python;

/* ---- line tables ---- */

static void test_line_311(void **state)
{
	(void)state;
	/* From line 10: 3 units at +1 (no column), 2 at +0 (short form),
	 * 1 at +2 (one-line form), 1 at -3 (long form), 1 without a line. */
	const uint8_t t[] = {
		0x80 | 13 << 3 | 2, 2,            /* 0..2: 11 */
		0x80 | 0 << 3 | 1, 5,             /* 3..4: 11 */
		0x80 | 12 << 3 | 0, 1, 9,         /* 5: 13 */
		0x80 | 14 << 3 | 0, 7, 0, 1, 2,   /* 6: 10 (delta -3: zigzag 7) */
		0x80 | 15 << 3 | 0,               /* 7: none */
	};
	uint32_t want[] = {11, 11, 11, 11, 11, 13, 10, 0, 0};
	for (uint32_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(rp_py_line(11, t, sizeof(t), 10, i), want[i]);
	/* Cut anywhere, it answers within what it has, or 0. */
	for (size_t len = 0; len < sizeof(t); len++)
		for (uint32_t i = 0; i < 9; i++) {
			uint32_t line = rp_py_line(12, t, len, 10, i);
			assert_true(line == 0 || line == want[i]);
		}
	/* Not an entry's first byte: corrupt. */
	const uint8_t bad[] = {0x12, 0x34};
	assert_int_equal(rp_py_line(13, bad, sizeof(bad), 10, 0), 0);
	/* A varint that never ends, a line below 1. */
	const uint8_t endless[] = {0x80 | 13 << 3, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f,
				   0x7f, 0x7f, 0x7f, 0x7f};
	assert_int_equal(rp_py_line(11, endless, sizeof(endless), 10, 0), 0);
	const uint8_t below[] = {0x80 | 13 << 3, 41}; /* -20 */
	assert_int_equal(rp_py_line(11, below, sizeof(below), 10, 0), 0);
}

static void test_line_310(void **state)
{
	(void)state;
	/* Bytes, line delta: 4 bytes at +1, 6 at +2, 2 without a line, 2 at -1. */
	const uint8_t t[] = {4, 1, 6, 2, 2, 0x80, 2, 0xff};
	/* lasti counts code units (2 bytes). */
	uint32_t want[] = {21, 21, 23, 23, 23, 0, 22};
	for (uint32_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(rp_py_line(10, t, sizeof(t), 20, i), want[i]);
	assert_int_equal(rp_py_line(10, t, sizeof(t), 20, 7), 0);
	assert_int_equal(rp_py_line(10, t, 3, 20, 2), 0); /* an odd end is ignored */
}

/* ---- code objects in made-up memory ---- */

struct region {
	uint64_t addr;
	uint8_t bytes[512];
	size_t len;
};

struct memory {
	struct region r[8];
	size_t n;
	unsigned reads;
};

static int fake_read(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len)
{
	struct memory *m = ctx;
	(void)pid;
	m->reads++;
	for (size_t i = 0; i < m->n; i++)
		if (addr >= m->r[i].addr && len <= m->r[i].len &&
		    addr - m->r[i].addr <= m->r[i].len - len) {
			memcpy(buf, m->r[i].bytes + (addr - m->r[i].addr), len);
			return 0;
		}
	return -EFAULT;
}

static struct region *region(struct memory *m, uint64_t addr, size_t len)
{
	struct region *r = &m->r[m->n++];
	*r = (struct region){.addr = addr, .len = len};
	return r;
}

static void put(struct region *r, size_t off, uint64_t v, size_t size)
{
	memcpy(r->bytes + off, &v, size);
}

#define CODE 0x10000
#define CODE_TYPE 0xc0de
#define QUALNAME 0x20000
#define FILENAME 0x30000
#define LINETABLE 0x40000

/* A compact str of CPython 3.11 (PyASCIIObject 48 bytes, compact 72):
 * kind 1 ASCII, or kind 2 / 4 characters. */
static void str_311(struct memory *m, uint64_t addr, unsigned kind, const uint32_t *chars,
		    size_t n)
{
	bool ascii = kind == 1;
	struct region *r = region(m, addr, (ascii ? 48 : 72) + n * kind);
	put(r, 16, n, 8);
	put(r, 32, kind << 2 | 1 << 5 | (unsigned)ascii << 6, 4);
	for (size_t i = 0; i < n; i++)
		put(r, (ascii ? 48 : 72) + i * kind, chars[i], kind);
}

static void ascii_311(struct memory *m, uint64_t addr, const char *s)
{
	uint32_t chars[64];
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i++)
		chars[i] = (unsigned char)s[i];
	str_311(m, addr, 1, chars, n);
}

/* A 3.11 code object: Outer.leaf in /srv/job.py from line 7, each code
 * unit a line further. */
static struct region *code_311(struct memory *m)
{
	*m = (struct memory){0};
	struct region *co = region(m, CODE, 256);
	put(co, 8, CODE_TYPE, 8);
	put(co, 128, QUALNAME, 8);
	put(co, 112, FILENAME, 8);
	put(co, 72, 7, 4);
	put(co, 136, LINETABLE, 8);
	ascii_311(m, QUALNAME, "Outer.leaf");
	ascii_311(m, FILENAME, "/srv/job.py");
	struct region *t = region(m, LINETABLE, 32 + 4);
	put(t, 16, 4, 8);
	for (int i = 0; i < 2; i++) { /* a unit each, a line further */
		t->bytes[32 + 2 * i] = 0x80 | 13 << 3;
		t->bytes[33 + 2 * i] = 2;
	}
	return co;
}

static void test_describe(void **state)
{
	(void)state;
	struct memory m;
	struct rp_py_code c;
	code_311(&m);
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 1, &c), 0);
	assert_string_equal(c.name, "Outer.leaf\t/srv/job.py");
	assert_int_equal(c.line, 9);
	/* Past the table: the first line. */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, 0, 500, &c), 0);
	assert_int_equal(c.line, 7);
	assert_int_equal(rp_py_describe(9, fake_read, &m, 1, CODE, 0, 0, &c), -ENOTSUP);
}

static void test_describe_unicode(void **state)
{
	(void)state;
	struct memory m;
	struct rp_py_code c;
	code_311(&m);
	m.n = 1; /* the strings again */
	uint32_t wide[] = {'f', 0xe9, 0x20ac, '\t', 'x'};
	str_311(&m, QUALNAME, 2, wide, 5);
	uint32_t astral[] = {'/', 0x1f40d, '.', 'p', 'y'};
	str_311(&m, FILENAME, 4, astral, 5);
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), 0);
	/* The tab, the separator, becomes a space. */
	assert_string_equal(c.name, "f\xc3\xa9\xe2\x82\xac x\t/\xf0\x9f\x90\x8d.py");
}

/* Whatever the process's memory holds, the reader answers -EINVAL or a
 * bounded name, reading a bounded amount. */
static void test_describe_hostile(void **state)
{
	(void)state;
	struct memory m;
	struct rp_py_code c;
	struct region *co;

	code_311(&m);
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE + 1, 0, &c), -EINVAL);
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, 0, 0, 0, &c), -EINVAL);
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE + 300, 0, 0, &c), -EINVAL);

	co = code_311(&m);
	put(co, 128, 0xdead0000, 8); /* unmapped qualname */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), -EINVAL);

	code_311(&m);
	put(&m.r[1], 16, (uint64_t)1 << 62, 8); /* absurd length: read past the region */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), -EINVAL);
	put(&m.r[1], 16, (uint64_t)-5, 8); /* negative */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), -EINVAL);
	put(&m.r[1], 16, 10, 8);
	put(&m.r[1], 32, 3 << 2 | 1 << 5, 4); /* kind 3 */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), -EINVAL);
	put(&m.r[1], 32, 1 << 2, 4); /* not compact */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), -EINVAL);

	/* A broken line table costs the line, not the name. */
	co = code_311(&m);
	put(&m.r[3], 16, (uint64_t)1 << 40, 8);
	m.reads = 0;
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 3, &c), 0);
	assert_string_equal(c.name, "Outer.leaf\t/srv/job.py");
	assert_int_equal(c.line, 7);
	assert_true(m.reads <= 8);
	put(co, 136, 0, 8);
	put(co, 72, (uint64_t)-3, 4); /* and a first line below 1: none */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 3, &c), 0);
	assert_int_equal(c.line, 0);

	/* A long path keeps its end, the name stays within RP_NAME_MAX. */
	uint32_t chars[400];
	for (size_t i = 0; i < 400; i++)
		chars[i] = i < 392 ? 'd' : (unsigned char)"/leaf.py"[i - 392];
	code_311(&m);
	m.n = 2;
	str_311(&m, FILENAME, 1, chars, 400); /* 48 + 400 bytes fits */
	assert_int_equal(rp_py_describe(11, fake_read, &m, 1, CODE, CODE_TYPE, 0, &c), 0);
	assert_true(strlen(c.name) <= RP_NAME_MAX);
	size_t len = strlen(c.name);
	assert_string_equal(c.name + len - 8, "/leaf.py");
	assert_memory_equal(c.name, "Outer.leaf\t", 11);
}

/* ---- merging ---- */

#define PY(code, lasti, outermost) (RP_PY_FRAME(code, lasti) | (outermost))

static void test_merge(void **state)
{
	(void)state;
	uint64_t out[16];
	/* The loop at 0x5000..0x6000 in the interpreter's 0x4000..0x7000. */
	const struct rp_py_native at = {0x5000, 0x6000, 0x4000, 0x7000};
	/* Native leaf first: two runs of the loop. */
	const uint64_t user[] = {0x5010, 0x7000, 0x5020, 0x8000};
	const uint64_t py[] = {PY(0x100, 1, 0), PY(0x200, 2, 1), PY(0x300, 3, 0), PY(0x400, 4, 1)};
	unsigned n = rp_py_merge(user, 4, py, 4, &at, out, 16);
	const uint64_t want[] = {RP_PY_FRAME(0x100, 1), RP_PY_FRAME(0x200, 2), 0x7000,
				 RP_PY_FRAME(0x300, 3), RP_PY_FRAME(0x400, 4), 0x8000};
	assert_int_equal(n, 6);
	assert_memory_equal(out, want, sizeof(want));

	/* The native walk never reached the loop: Python frames go after the
	 * interpreter's first frame, and the guesses past it go; else after
	 * all. */
	const uint64_t c_leaf[] = {0x9000, 0x4100, 0x7000};
	n = rp_py_merge(c_leaf, 3, py, 4, &at, out, 16);
	const uint64_t under[] = {0x9000, 0x4100, RP_PY_FRAME(0x100, 1), RP_PY_FRAME(0x200, 2),
				  RP_PY_FRAME(0x300, 3), RP_PY_FRAME(0x400, 4)};
	assert_int_equal(n, 6);
	assert_memory_equal(out, under, sizeof(under));
	n = rp_py_merge(user + 1, 1, py, 4, &at, out, 16);
	const uint64_t after[] = {0x7000, RP_PY_FRAME(0x100, 1), RP_PY_FRAME(0x200, 2),
				  RP_PY_FRAME(0x300, 3), RP_PY_FRAME(0x400, 4)};
	assert_int_equal(n, 5);
	assert_memory_equal(out, after, sizeof(after));

	/* More loop frames than runs read: the rest stay native. */
	n = rp_py_merge(user, 4, py, 2, &at, out, 16);
	const uint64_t fewer[] = {RP_PY_FRAME(0x100, 1), RP_PY_FRAME(0x200, 2), 0x7000, 0x5020,
				  0x8000};
	assert_int_equal(n, 5);
	assert_memory_equal(out, fewer, sizeof(fewer));

	/* Bounded by max, the callers' end cut. */
	n = rp_py_merge(user, 4, py, 4, &at, out, 3);
	assert_int_equal(n, 3);
	assert_memory_equal(out, want, 3 * sizeof(uint64_t));
	assert_int_equal(rp_py_merge(user, 4, py, 4, &at, out, 0), 0);
}

/* ---- a process ---- */

struct installed {
	uint32_t pid;
	struct rp_py_proc py;
	int installs, removals;
};

static int install(void *ctx, uint32_t pid, const struct rp_py_proc *py)
{
	struct installed *in = ctx;
	in->pid = pid;
	if (py) {
		in->py = *py;
		in->installs++;
	} else {
		in->removals++;
	}
	return 0;
}

struct collected {
	struct rp_event ev[4];
	char names[4][RP_NAME_MAX + 1];
	int n;
};

static int collect(void *ctx, const struct rp_event *ev)
{
	struct collected *c = ctx;
	assert_true(c->n < 4);
	c->ev[c->n] = *ev;
	snprintf(c->names[c->n], sizeof(c->names[0]), "%s", ev->name);
	c->ev[c->n].name = c->names[c->n];
	c->n++;
	return 0;
}

static void test_process(void **state)
{
	(void)state;
	if (!fake_python)
		skip();
	struct symtest_child child;
	assert_int_equal(symtest_start(fake_python, &child), 0);
	uint64_t runtime, eval, code;
	assert_int_equal(fscanf(child.out, "%" SCNx64 " %" SCNx64 " %" SCNx64, &runtime, &eval, &code),
			 3);

	struct installed in = {0};
	struct rp_pyframes_opts o = {.proc_root = "/proc", .install = install, .install_ctx = &in};
	struct rp_pyframes *p;
	struct rp_err err;
	assert_int_equal(rp_pyframes_new(&o, &p, &err), 0);

	/* The leaf in the loop: replaced by the Python frame it runs. */
	uint64_t user[] = {eval + 2, 0x1234}, frames[RP_STACK_MAX];
	uint64_t py[] = {RP_PY_FRAME(code, 1) | 1};
	struct rp_event sample = {.kind = RP_EV_CPU_SAMPLE, .ts = 1, .pid = (uint32_t)child.pid,
				  .tid = (uint32_t)child.pid,
				  .u.sample = {.nframes = 2, .frames = user}};
	struct rp_event out;
	struct collected got = {0};
	assert_int_equal(rp_pyframes_sample(p, &sample, py, 1, collect, &got, &out, frames), 0);
	assert_int_equal(in.installs, 1);
	assert_int_equal(in.pid, child.pid);
	assert_true(in.py.runtime == runtime);
	assert_int_equal(in.py.ts_thread_id, 152); /* 3.11's, from Py_Version */
	/* The BPF walk reads a thread state at once: every field it uses in. */
	assert_true(in.py.ts_read <= RP_PY_TS_READ && in.py.ts_thread_id + 8 <= in.py.ts_read &&
		    in.py.ts_next + 8 <= in.py.ts_read && in.py.ts_frame + 8 <= in.py.ts_read &&
		    in.py.ts_datastack + 24 <= in.py.ts_read);
	assert_int_equal(got.n, 1);
	assert_int_equal(got.ev[0].kind, RP_EV_PY_CODE);
	assert_string_equal(got.ev[0].name, "Fake.step\t/srv/fake.py");
	assert_true(got.ev[0].u.py_code.code == code);
	assert_int_equal(got.ev[0].u.py_code.lasti, 1);
	assert_int_equal(got.ev[0].u.py_code.line, 42);
	assert_int_equal(out.u.sample.nframes, 2);
	assert_true(out.u.sample.frames[0] == RP_PY_FRAME(code, 1));
	assert_true(out.u.sample.frames[1] == 0x1234);

	/* Known now: no second event.  Not a code object: none either. */
	assert_int_equal(rp_pyframes_sample(p, &sample, py, 1, collect, &got, &out, frames), 0);
	uint64_t bad[] = {RP_PY_FRAME(code + 16, 0)};
	assert_int_equal(rp_pyframes_sample(p, &sample, bad, 1, collect, &got, &out, frames), 0);
	assert_int_equal(got.n, 1);
	assert_int_equal(in.installs, 1);

	/* This test is no Python: its samples pass as they are. */
	struct rp_event mine = sample;
	mine.pid = mine.tid = (uint32_t)getpid();
	assert_int_equal(rp_pyframes_sample(p, &mine, py, 1, collect, &got, &out, frames), 0);
	assert_true(out.u.sample.frames == user && out.u.sample.nframes == 2);
	assert_int_equal(in.installs, 1);

	/* Gone: the sampler is told. */
	assert_int_not_equal(symtest_end(&child), -1);
	rp_pyframes_reap(p);
	assert_int_equal(in.removals, 1);
	struct rp_pyframes_stats st;
	rp_pyframes_stats(p, &st);
	assert_true(st.processes == 1 && st.codes == 1 && st.unreadable == 1);
	rp_pyframes_free(p);
}

int main(int argc, char **argv)
{
	fake_python = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_line_311),
		cmocka_unit_test(test_line_310),
		cmocka_unit_test(test_describe),
		cmocka_unit_test(test_describe_unicode),
		cmocka_unit_test(test_describe_hostile),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
