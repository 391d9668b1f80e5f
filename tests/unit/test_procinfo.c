/* Process information: name, command line and executable mappings with
 * build-ids, from a fake /proc and from the real one (argv[1]: symtest,
 * built with the build-id argv[2]). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procinfo.h"
#include "symtest_child.h"
#include "scratch.h"

#define SEC 1000000000ull

static const char *symtest;
static uint8_t symtest_id[RP_BUILD_ID_MAX];
static char root[64];

struct got {
	int n;
	struct rp_event ev[300];
	char name[300][RP_NAME_MAX + 1];
};

static int collect(void *ctx, const struct rp_event *ev)
{
	struct got *g = ctx;
	assert_true(g->n < 300);
	g->ev[g->n] = *ev;
	snprintf(g->name[g->n], sizeof(g->name[0]), "%s", ev->name ? ev->name : "");
	g->ev[g->n].name = g->name[g->n];
	g->n++;
	return 0;
}

static const struct rp_event *find(const struct got *g, uint8_t kind, const char *name)
{
	for (int i = 0; i < g->n; i++)
		if (g->ev[i].kind == kind && (!name || !strcmp(g->ev[i].name, name)))
			return &g->ev[i];
	return NULL;
}

static void write_file(uint32_t pid, const char *name, const char *text, size_t len)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%u", root, pid);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%u/%s", root, pid, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void remove_proc_dir(uint32_t pid)
{
	char dir[160];
	scratch_pathf(dir, sizeof(dir), "%s/%u", root, pid);
	assert_int_equal(scratch_remove(dir), 0);
}

static int setup(void **state)
{
	(void)state;
	return scratch_make(root, sizeof(root), "procinfo");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(root);
}

static struct rp_event sample_at(uint32_t pid, uint64_t ts, uint64_t *frames, uint16_t n)
{
	return (struct rp_event){ .kind = RP_EV_CPU_SAMPLE, .ts = ts, .pid = pid, .tid = pid,
				  .name = "from-sample",
				  .u.sample = { .nframes = n, .nkernel = 1, .frames = frames } };
}

struct gone {
	uint32_t n, pid[2048];
};

static void note_gone(void *ctx, uint32_t pid)
{
	struct gone *g = ctx;
	if (g->n < 2048)
		g->pid[g->n] = pid;
	g->n++;
}

static void fake_process(void **state)
{
	(void)state;
	struct stat st;
	assert_int_equal(stat(symtest, &st), 0);
	char maps[2048];
	snprintf(maps, sizeof(maps),
		 "55d000000000-55d000001000 r--p 00000000 08:01 %lu %s\n"
		 "55d000001000-55d000002000 r-xp 00001000 08:01 %lu %s\n"
		 "55d000002000-55d000003000 rw-p 00002000 08:01 %lu %s\n"
		 "55e000001000-55e000002000 r-xp 00001000 08:01 1 %s\n"
		 "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n"
		 "7f0000010000-7f0000011000 r-xp 00004000 08:01 77 /tmp/replaced.so (deleted)\n"
		 "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]\n"
		 "7ffd00010000-7ffd00011000 rw-p 00000000 00:00 0                          [stack]\n",
		 (unsigned long)st.st_ino, symtest, (unsigned long)st.st_ino, symtest,
		 (unsigned long)st.st_ino, symtest, symtest);
	write_file(4242, "maps", maps, strlen(maps));
	write_file(4242, "comm", "trainer\n", 8);
	write_file(4242, "cmdline", "python3\0train.py\0--lr\0" "0.1\0", 26);

	struct rp_procinfo *p;
	struct rp_err err = { 0 };
	assert_int_equal(rp_procinfo_new(root, &p, &err), 0);
	static struct got g;
	uint64_t frames[2] = { 0xffffffff81000000ull, 0x55d000001100 };
	struct rp_event s = sample_at(4242, 5 * SEC, frames, 2);
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 6);
	const struct rp_event *e = find(&g, RP_EV_PROCESS_NAME, "trainer");
	assert_non_null(e);
	assert_true(e->ts == 5 * SEC && e->pid == 4242 && e->tid == 4242);
	assert_non_null(find(&g, RP_EV_PROCESS_CMDLINE, "python3 train.py --lr 0.1"));

	e = &g.ev[2];
	assert_int_equal(e->kind, RP_EV_MAPPING);
	assert_string_equal(e->name, symtest);
	assert_true(e->u.mapping.start == 0x55d000001000 && e->u.mapping.end == 0x55d000002000 &&
		    e->u.mapping.offset == 0x1000);
	assert_int_equal(e->u.mapping.build_id_len, RP_BUILD_ID_MAX);
	assert_memory_equal(e->u.mapping.build_id, symtest_id, RP_BUILD_ID_MAX);
	e = &g.ev[3]; /* the path is not the mapped inode: no build-id */
	assert_true(e->kind == RP_EV_MAPPING && e->u.mapping.start == 0x55e000001000);
	assert_int_equal(e->u.mapping.build_id_len, 0);
	e = &g.ev[4];
	assert_string_equal(e->name, "/tmp/replaced.so");
	assert_true(e->u.mapping.offset == 0x4000 && e->u.mapping.build_id_len == 0);
	e = &g.ev[5];
	assert_string_equal(e->name, "[vdso]");
	assert_int_equal(e->u.mapping.build_id_len, 0);

	/* Inside a known mapping: nothing to do. */
	g.n = 0;
	s.ts = 100 * SEC;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 0);
	/* Outside (JIT code): a re-read at most once a second, backing off
	 * while nothing changes. */
	frames[1] = 0x7f0000000010;
	s.ts = 5 * SEC + SEC / 2;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	struct rp_procinfo_stats ps;
	rp_procinfo_stats(p, &ps);
	assert_int_equal(ps.scans, 1);
	s.ts = 6 * SEC;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	rp_procinfo_stats(p, &ps);
	assert_int_equal(ps.scans, 2);
	assert_int_equal(g.n, 0);
	/* dlopen: a new mapping is handed on alone, once the back-off (2 s
	 * after an unchanged re-read) has passed. */
	char more[2300];
	snprintf(more, sizeof(more), "%s7f0000100000-7f0000200000 r-xp 00010000 08:01 %lu %s\n",
		 maps, (unsigned long)st.st_ino, symtest);
	write_file(4242, "maps", more, strlen(more));
	frames[1] = 0x7f0000100010;
	s.ts = 7 * SEC;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 0);
	s.ts = 8 * SEC;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 1);
	assert_true(g.ev[0].kind == RP_EV_MAPPING && g.ev[0].u.mapping.start == 0x7f0000100000 &&
		    g.ev[0].ts == 8 * SEC);
	assert_memory_equal(g.ev[0].u.mapping.build_id, symtest_id, RP_BUILD_ID_MAX);
	rp_procinfo_stats(p, &ps);
	assert_int_equal(ps.build_ids, 1); /* one file, read once */
	assert_int_equal(ps.processes, 1);
	assert_int_equal(ps.mappings, 5);

	/* Exited, then the pid reused: described afresh.  Without comm, the
	 * sample's comm names the process when the sample is of its main
	 * thread. */
	remove_proc_dir(4242);
	struct gone gone = { 0 };
	rp_procinfo_reap(p, note_gone, &gone);
	assert_int_equal(gone.n, 1);
	assert_int_equal(gone.pid[0], 4242);
	rp_procinfo_reap(p, note_gone, &gone);
	assert_int_equal(gone.n, 1);
	write_file(4242, "maps", "", 0);
	g.n = 0;
	frames[1] = 0x55d000001100;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 1);
	assert_non_null(find(&g, RP_EV_PROCESS_NAME, "from-sample"));
	rp_procinfo_free(p);
}

/* At most RP_PROCINFO_MAX_MAPPINGS mappings a process, lowest first; many
 * processes (the table grows) each described once. */
static void bounds(void **state)
{
	(void)state;
	static char maps[400 * 64];
	size_t len = 0;
	for (int i = 0; i < 300; i++)
		len += (size_t)snprintf(maps + len, sizeof(maps) - len,
					"%x000-%x800 r-xp 00000000 08:01 %d /lib/l%d.so\n",
					0x100 + i, 0x100 + i, 1000 + i, i);
	write_file(7, "maps", maps, len);
	struct rp_procinfo *p;
	struct rp_err err = { 0 };
	assert_int_equal(rp_procinfo_new(root, &p, &err), 0);
	static struct got g;
	uint64_t frames[1] = { 0x100100 };
	struct rp_event s = sample_at(7, SEC, frames, 1);
	s.u.sample.nkernel = 0;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_int_equal(g.n, 1 + RP_PROCINFO_MAX_MAPPINGS); /* the name, from the sample */
	assert_string_equal(g.name[RP_PROCINFO_MAX_MAPPINGS], "/lib/l255.so");

	for (uint32_t pid = 100; pid < 2100; pid++) {
		g.n = 0;
		s.pid = s.tid = pid;
		assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
		assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	}
	struct rp_procinfo_stats ps;
	rp_procinfo_stats(p, &ps);
	assert_int_equal(ps.processes, 2001);
	struct gone gone = { 0 };
	rp_procinfo_reap(p, note_gone, &gone); /* none of 100..2099 has a directory */
	assert_int_equal(gone.n, 2000);
	for (uint32_t pid = 100; pid < 2100; pid += 500) { /* forgotten: described again */
		s.pid = s.tid = pid;
		assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	}
	rp_procinfo_stats(p, &ps);
	assert_int_equal(ps.processes, 2005);
	rp_procinfo_free(p);
}

/* The real /proc: a running symtest is described with its build-id. */
static void real_process(void **state)
{
	(void)state;
	struct symtest_child child;
	assert_int_equal(symtest_start(symtest, &child), 0);
	pid_t pid = child.pid;
	char fn[64];
	unsigned long addr;
	int line;
	assert_int_equal(fscanf(child.out, "%63s %lx %d", fn, &addr, &line), 3);

	struct rp_procinfo *p;
	struct rp_err err = { 0 };
	assert_int_equal(rp_procinfo_new("/proc", &p, &err), 0);
	static struct got g;
	uint64_t frames[1] = { addr };
	struct rp_event s = sample_at((uint32_t)pid, SEC, frames, 1);
	s.u.sample.nkernel = 0;
	assert_int_equal(rp_procinfo_sample(p, &s, collect, &g), 0);
	assert_non_null(find(&g, RP_EV_PROCESS_NAME, "symtest"));
	assert_non_null(find(&g, RP_EV_PROCESS_CMDLINE, symtest));
	const struct rp_event *m = NULL;
	for (int i = 0; i < g.n; i++)
		if (g.ev[i].kind == RP_EV_MAPPING && addr >= g.ev[i].u.mapping.start &&
		    addr < g.ev[i].u.mapping.end)
			m = &g.ev[i];
	assert_non_null(m);
	char real[4096];
	assert_non_null(realpath(symtest, real));
	assert_string_equal(m->name, real);
	assert_int_equal(m->u.mapping.build_id_len, RP_BUILD_ID_MAX);
	assert_memory_equal(m->u.mapping.build_id, symtest_id, RP_BUILD_ID_MAX);
	assert_non_null(find(&g, RP_EV_MAPPING, "[vdso]"));

	assert_int_equal(symtest_end(&child), 0);
	struct gone gone = { 0 };
	rp_procinfo_reap(p, note_gone, &gone);
	assert_int_equal(gone.n, 1);
	assert_int_equal(gone.pid[0], (uint32_t)pid);
	rp_procinfo_free(p);
}

int main(int argc, char **argv)
{
	if (symtest_args(argc, argv, &symtest, symtest_id))
		return 2;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(fake_process, setup, teardown),
		cmocka_unit_test_setup_teardown(bounds, setup, teardown),
		cmocka_unit_test(real_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
