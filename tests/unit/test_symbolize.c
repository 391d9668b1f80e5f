/* The symbolizer: symtest's functions through its recorded mappings
 * (argv[1], built with the build-id argv[2]), also after it exited; a
 * build-id mismatch; kallsyms and perf maps from fake files; C++ names
 * of symtest-cpp (argv[3], absent without a C++ compiler) demangled. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procinfo.h"
#include "symbolize.h"
#include "symtest_child.h"
#include "scratch.h"

static const char *symtest, *symtest_cpp;
static uint8_t symtest_id[RP_BUILD_ID_MAX];
static char dir[64];

static int setup(void **state)
{
	(void)state;
	return scratch_make(dir, sizeof(dir), "symbolize");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(dir);
}

static void write_file(const char *name, const char *text)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* Mappings as ringprofd records them, handed to a symbolizer. */
struct mappings {
	int n;
	struct rp_event ev[64];
	char name[64][RP_NAME_MAX + 1];
};

static int keep_mapping(void *ctx, const struct rp_event *ev)
{
	struct mappings *m = ctx;
	if (ev->kind == RP_EV_MAPPING && m->n < 64) {
		m->ev[m->n] = *ev;
		snprintf(m->name[m->n], sizeof(m->name[0]), "%s", ev->name);
		m->n++;
	}
	return 0;
}

static void add_all(struct rp_symbolizer *s, const struct mappings *m)
{
	for (int i = 0; i < m->n; i++) {
		const struct rp_event *e = &m->ev[i];
		assert_int_equal(rp_symbolizer_add_mapping(s, e->pid, e->u.mapping.start,
							   e->u.mapping.end, e->u.mapping.offset,
							   m->name[i], e->u.mapping.build_id,
							   e->u.mapping.build_id_len),
				 0);
	}
}

struct func {
	char name[64];
	unsigned long addr;
	unsigned line;
};

static void check_named(struct rp_symbolizer *s, uint32_t pid, const struct func *f)
{
	struct rp_symbol sym;
	rp_symbolize(s, pid, f->addr, false, &sym);
	assert_non_null(sym.function);
	assert_string_equal(sym.function, f->name);
	assert_int_equal(sym.offset, 0);
	assert_string_equal(sym.module, "symtest");
	assert_non_null(sym.file);
	assert_non_null(strstr(sym.file, "symtest.c"));
	assert_int_equal(sym.line, f->line);
	rp_symbolize(s, pid, f->addr + 4, false, &sym);
	assert_string_equal(sym.function, f->name);
	assert_int_equal(sym.offset, 4);
	char buf[64];
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), f->name);
}

/* symtest runs; its mappings are read the way ringprofd reads them; its
 * functions are named while it runs and after it exited. */
static void live_then_exited(void **state)
{
	(void)state;
	struct symtest_child child;
	assert_int_equal(symtest_start(symtest, &child), 0);
	pid_t pid = child.pid;
	struct func fn[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(fscanf(child.out, "%63s %lx %u", fn[i].name, &fn[i].addr,
					&fn[i].line), 3);

	struct rp_procinfo *p;
	struct rp_err err = { 0 };
	assert_int_equal(rp_procinfo_new("/proc", &p, &err), 0);
	static struct mappings m;
	uint64_t frame = fn[0].addr;
	struct rp_event sample = { .kind = RP_EV_CPU_SAMPLE, .pid = (uint32_t)pid,
				   .tid = (uint32_t)pid,
				   .u.sample = { .nframes = 1, .frames = &frame } };
	assert_int_equal(rp_procinfo_sample(p, &sample, keep_mapping, &m), 0);
	rp_procinfo_free(p);

	struct rp_symbolizer *s;
	assert_int_equal(rp_symbolizer_new(NULL, &s, &err), 0);
	add_all(s, &m);
	add_all(s, &m); /* repeated in every chunk: no change */
	check_named(s, (uint32_t)pid, &fn[0]);
	check_named(s, (uint32_t)pid, &fn[1]);
	rp_symbolizer_free(s);

	assert_int_equal(symtest_end(&child), 0); /* exited, status 0 */
	assert_int_equal(rp_symbolizer_new(NULL, &s, &err), 0);
	add_all(s, &m);
	check_named(s, (uint32_t)pid, &fn[1]);
	check_named(s, (uint32_t)pid, &fn[0]);
	struct rp_symbolizer_stats st;
	rp_symbolizer_stats(s, &st);
	assert_true(st.frames == 4 && st.named == 4 && st.mismatched == 0 && st.unreadable == 0);

	/* The vdso has no file: module+offset, and no complaint. */
	for (int i = 0; i < m.n; i++) {
		if (strcmp(m.name[i], "[vdso]"))
			continue;
		struct rp_symbol sym;
		char buf[64];
		rp_symbolize(s, (uint32_t)pid, m.ev[i].u.mapping.start + 0x10, false, &sym);
		assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[vdso]+0x10");
	}
	rp_symbolizer_stats(s, &st);
	assert_int_equal(st.unreadable, 0);
	rp_symbolizer_free(s);
}

/* A file whose build-id is not the recorded one is not trusted. */
static void build_id_mismatch(void **state)
{
	(void)state;
	struct rp_symbolizer *s;
	struct rp_err err = { 0 };
	assert_int_equal(rp_symbolizer_new(NULL, &s, &err), 0);
	uint8_t other[RP_BUILD_ID_MAX];
	memcpy(other, symtest_id, sizeof(other));
	other[7] ^= 1;
	assert_int_equal(rp_symbolizer_add_mapping(s, 5, 0x10000, 0x20000, 0x1000, symtest, other,
						   sizeof(other)), 0);
	/* Shorter recorded ids compare by their start; 0 bytes: not checked. */
	assert_int_equal(rp_symbolizer_add_mapping(s, 6, 0x10000, 0x20000, 0x1000, symtest,
						   symtest_id, 8), 0);
	assert_int_equal(rp_symbolizer_add_mapping(s, 5, 0x30000, 0x20000, 0, symtest, NULL, 0),
			 -EINVAL);
	assert_int_equal(rp_symbolizer_add_mapping(s, 5, 0x30000, 0x40000, 0, "/nonexistent/lib.so",
						   NULL, 0), 0);
	struct rp_symbol sym;
	char buf[64];
	rp_symbolize(s, 5, 0x10123, false, &sym);
	assert_null(sym.function);
	assert_string_equal(sym.module, "symtest");
	assert_int_equal(sym.offset, 0x1123);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "symtest+0x1123");
	rp_symbolize(s, 5, 0x30010, false, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "lib.so+0x10");
	rp_symbolize(s, 5, 0x50000, false, &sym); /* no mapping, no perf map */
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[unknown]+0x50000");
	struct rp_symbolizer_stats st;
	rp_symbolizer_stats(s, &st);
	assert_int_equal(st.mismatched, 1);
	assert_int_equal(st.unreadable, 1);
	rp_symbolize(s, 6, 0x10123, false, &sym);
	rp_symbolizer_stats(s, &st);
	assert_int_equal(st.mismatched, 1); /* the 8-byte prefix matches */
	rp_symbolizer_free(s);
}

/* A mapping replaces the ones it overlaps: what the process maps there
 * now is what names the address. */
static void overlapping_mappings(void **state)
{
	(void)state;
	struct rp_symbolizer *s;
	struct rp_err err = { 0 };
	assert_int_equal(rp_symbolizer_new(NULL, &s, &err), 0);
	assert_int_equal(rp_symbolizer_add_mapping(s, 1, 0x1000, 0x3000, 0, "/a/old.so", NULL, 0), 0);
	assert_int_equal(rp_symbolizer_add_mapping(s, 1, 0x5000, 0x6000, 0, "/a/far.so", NULL, 0), 0);
	assert_int_equal(rp_symbolizer_add_mapping(s, 1, 0x2000, 0x4000, 0, "/a/new.so", NULL, 0), 0);
	struct rp_symbol sym;
	char buf[64];
	rp_symbolize(s, 1, 0x1800, false, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[unknown]+0x1800");
	rp_symbolize(s, 1, 0x2800, false, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "new.so+0x800");
	rp_symbolize(s, 1, 0x5800, false, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "far.so+0x800");
	rp_symbolize(s, 2, 0x2800, false, &sym); /* another process */
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[unknown]+0x2800");
	rp_symbolizer_free(s);
}

static void kallsyms(void **state)
{
	(void)state;
	write_file("kallsyms", "ffffffff81000000 T _stext\n"
			       "ffffffff81002000 t do_idle\n"
			       "ffffffff81001000 T __x64_sys_read\n"
			       "ffffffff82000000 D some_data\n"
			       "ffffffffc0a00000 t nv_fn\t[nvidia]\n"
			       "garbage line\n");
	char path[128];
	snprintf(path, sizeof(path), "%s/kallsyms", dir);
	struct rp_symbolizer_opts o = { .kallsyms = path };
	struct rp_symbolizer *s;
	struct rp_err err = { 0 };
	assert_int_equal(rp_symbolizer_new(&o, &s, &err), 0);
	struct rp_symbol sym;
	char buf[64];
	rp_symbolize(s, 1, 0xffffffff81001010ull, true, &sym);
	assert_string_equal(sym.function, "__x64_sys_read");
	assert_int_equal(sym.offset, 0x10);
	assert_string_equal(sym.module, "[kernel]");
	rp_symbolize(s, 1, 0xffffffff82000010ull, true, &sym); /* data symbols are skipped */
	assert_string_equal(sym.function, "do_idle");
	rp_symbolize(s, 1, 0xffffffffc0a00004ull, true, &sym);
	assert_string_equal(sym.function, "nv_fn");
	assert_string_equal(sym.module, "[nvidia]");
	rp_symbolize(s, 1, 0xffffffff80000000ull, true, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[kernel]+0xffffffff80000000");
	struct rp_symbolizer_stats st;
	rp_symbolizer_stats(s, &st);
	assert_false(st.kallsyms_zeroed || st.kallsyms_missing);
	rp_symbolizer_free(s);

	/* What a user without root sees: every address 0. */
	write_file("kallsyms", "0000000000000000 T _stext\n0000000000000000 t do_idle\n");
	assert_int_equal(rp_symbolizer_new(&o, &s, &err), 0);
	rp_symbolize(s, 1, 0xffffffff81001010ull, true, &sym);
	assert_null(sym.function);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[kernel]+0xffffffff81001010");
	rp_symbolizer_stats(s, &st);
	assert_true(st.kallsyms_zeroed && !st.kallsyms_missing);
	rp_symbolizer_free(s);

	o.kallsyms = "/nonexistent/kallsyms";
	assert_int_equal(rp_symbolizer_new(&o, &s, &err), 0);
	rp_symbolize(s, 1, 0xffffffff81001010ull, true, &sym);
	assert_null(sym.function);
	rp_symbolizer_stats(s, &st);
	assert_true(st.kallsyms_missing && !st.kallsyms_zeroed);
	rp_symbolizer_free(s);
}

static void perf_map(void **state)
{
	(void)state;
	/* The last line's C++ name demangles to 600 x's and "::run()". */
	char map[1024], xs[601];
	memset(xs, 'x', 600);
	xs[600] = 0;
	snprintf(map, sizeof(map), "7f0000001000 40 py::train_step:/x/train.py\n"
				   "7f0000000000 1000 [jit] trampoline\n"
				   "0x7f0000002000 0x10 hex_prefixed\n"
				   "7f0000001000 20 py::replaced:/x/train.py\n"
				   "not a line\n"
				   "7f0000003000 0 empty_size\n"
				   "7f0000004000 10 _ZN3jit6kernelEv\n"
				   "7f0000005000 10 _Znot_a_cxx_name\n"
				   "7f0000006000 10 _ZN600%s3runEv\n", xs);
	write_file("perf-4242.map", map);
	struct rp_symbolizer_opts o = { .perf_map_dir = dir };
	struct rp_symbolizer *s;
	struct rp_err err = { 0 };
	assert_int_equal(rp_symbolizer_new(&o, &s, &err), 0);
	/* A mapping elsewhere makes the process known; JIT code has none. */
	assert_int_equal(rp_symbolizer_add_mapping(s, 4242, 0x400000, 0x401000, 0, "/x/python3",
						   NULL, 0), 0);
	struct rp_symbol sym;
	char buf[64];
	rp_symbolize(s, 4242, 0x7f0000001008, false, &sym);
	assert_string_equal(sym.function, "py::replaced:/x/train.py"); /* the later line wins */
	assert_string_equal(sym.module, "[jit]");
	assert_int_equal(sym.offset, 8);
	rp_symbolize(s, 4242, 0x7f0000001030, false, &sym);
	assert_string_equal(sym.function, "py::train_step:/x/train.py");
	rp_symbolize(s, 4242, 0x7f0000000010, false, &sym);
	assert_string_equal(sym.function, "[jit] trampoline");
	rp_symbolize(s, 4242, 0x7f0000002004, false, &sym);
	assert_string_equal(sym.function, "hex_prefixed");
	rp_symbolize(s, 4242, 0x7f0000003000, false, &sym);
	assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), "[unknown]+0x7f0000003000");
	assert_null(sym.mangled);
	rp_symbolize(s, 4242, 0x7f0000004004, false, &sym); /* C++ JIT code: demangled */
	assert_string_equal(sym.function, "jit::kernel()");
	assert_string_equal(sym.mangled, "_ZN3jit6kernelEv");
	rp_symbolize(s, 4242, 0x7f0000005004, false, &sym); /* does not demangle: as it is */
	assert_string_equal(sym.function, "_Znot_a_cxx_name");
	assert_null(sym.mangled);
	/* A demangled name longer than any buffer of the exporters: whole. */
	rp_symbolize(s, 4242, 0x7f0000006004, false, &sym);
	assert_int_equal(strlen(rp_symbol_name(&sym, buf, sizeof(buf))), 600 + strlen("::run()"));
	assert_string_equal(sym.function + 600, "::run()");
	rp_symbolize(s, 4243, 0x7f0000001008, false, &sym); /* no map of its own */
	assert_null(sym.function);
	rp_symbolizer_free(s);
}

/* symtest-cpp's functions are named demangled, their symbols kept as
 * mangled; each name demangled once however often it is seen. */
static void cpp_names(void **state)
{
	(void)state;
	if (!symtest_cpp)
		skip(); /* built without a C++ compiler */
	struct symtest_child child;
	assert_int_equal(symtest_start(symtest_cpp, &child), 0);
	unsigned long addr[2];
	assert_int_equal(fscanf(child.out, "%lx %lx", &addr[0], &addr[1]), 2);
	struct rp_procinfo *p;
	struct rp_err err = { 0 };
	assert_int_equal(rp_procinfo_new("/proc", &p, &err), 0);
	static struct mappings m;
	m.n = 0;
	uint64_t frame = addr[0];
	struct rp_event sample = { .kind = RP_EV_CPU_SAMPLE, .pid = (uint32_t)child.pid,
				   .tid = (uint32_t)child.pid,
				   .u.sample = { .nframes = 1, .frames = &frame } };
	assert_int_equal(rp_procinfo_sample(p, &sample, keep_mapping, &m), 0);
	rp_procinfo_free(p);
	assert_int_equal(symtest_end(&child), 0);

	struct rp_symbolizer *s;
	assert_int_equal(rp_symbolizer_new(NULL, &s, &err), 0);
	add_all(s, &m);
	static const struct { const char *name, *mangled; } want[2] = {
		{ "rp::symtest::Matrix<float>::rows(int)", "_ZN2rp7symtest6MatrixIfE4rowsEi" },
		{ "double rp::symtest::scaled<double>(double, int)", "_ZN2rp7symtest6scaledIdEET_S2_i" },
	};
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 2; i++) {
			struct rp_symbol sym;
			char buf[128];
			rp_symbolize(s, (uint32_t)child.pid, addr[i] + (unsigned)round, false, &sym);
			assert_string_equal(sym.function, want[i].name);
			assert_string_equal(sym.mangled, want[i].mangled);
			assert_string_equal(rp_symbol_name(&sym, buf, sizeof(buf)), want[i].name);
		}
	rp_symbolizer_free(s);
}

int main(int argc, char **argv)
{
	symtest_cpp = argc > 3 ? argv[3] : NULL;
	if (symtest_args(argc > 3 ? 3 : argc, argv, &symtest, symtest_id))
		return 2;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(live_then_exited),
		cmocka_unit_test(build_id_mismatch),
		cmocka_unit_test(overlapping_mappings),
		cmocka_unit_test_setup_teardown(kallsyms, setup, teardown),
		cmocka_unit_test_setup_teardown(perf_map, setup, teardown),
		cmocka_unit_test(cpp_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
