/* ringprof doctor: see doctor.h.  Each check is a row of `checks`; it
 * reports one line (or one per thing it looks at) through report(). */
#include "doctor.h"

#include <ctype.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "client.h"
#include "parse.h"
#include "paths.h"
#include "text.h"

#define EXIT_USAGE 2
/* Capability bits (linux/capability.h) in /proc/self/status CapEff. */
#define CAP_SYS_ADMIN_BIT 21
#define CAP_PERFMON_BIT 38
#define CAP_BPF_BIT 39
/* Free space below this on a directory ringprofd writes is a warning. */
#define DISK_LOW_BYTES (1ull << 30)
/* A .text with fewer `push %rbp; mov %rsp,%rbp` prologues than one per
 * this many bytes was most likely built without frame pointers: with them
 * compilers emit one per function, and functions average well under it. */
#define FP_BYTES_PER_PROLOGUE 4096

enum level { OK, WARN, FAIL };
static const char *const level_names[] = { [OK] = "OK", [WARN] = "WARN", [FAIL] = "FAIL" };

struct doctor {
	const char *socket;
	struct rp_client *client;
	json_t *status;           /* GET /v1/status, NULL when unreachable */
	long pid;                 /* --pid, 0 when not given */
	bool privileged;          /* root, or CAP_BPF and CAP_PERFMON */
	bool json;
	json_t *results;
	bool failed;
};

static void report(struct doctor *d, const char *check, enum level level, const char *fix,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void report(struct doctor *d, const char *check, enum level level, const char *fix,
		   const char *fmt, ...)
{
	char msg[1024], shown[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->failed = d->failed || level == FAIL;
	if (d->json) {
		json_t *o = json_pack("{s:s, s:s, s:s}", "check", check, "status", level_names[level],
				      "message", rp_text_escape(msg, shown, sizeof(shown)));
		json_object_set_new(o, "fix", fix ? json_string(fix) : json_null());
		json_array_append_new(d->results, o);
		return;
	}
	printf("%-4s  %-16s %s\n", level_names[level], check, rp_text_escape(msg, shown, sizeof(shown)));
	if (fix && level != OK)
		printf("      %-16s fix: %s\n", "", fix);
}

/* ---- small readers ------------------------------------------------------- */

/* The first line of a small file, without its newline; false when it
 * cannot be read. */
static bool read_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	bool ok = f && fgets(out, (int)len, f);
	if (f)
		fclose(f);
	if (ok)
		out[strcspn(out, "\n")] = 0;
	return ok;
}

static long read_long(const char *path, long otherwise)
{
	char line[64];
	return read_line(path, line, sizeof(line)) ? strtol(line, NULL, 10) : otherwise;
}

/* Whether a line of path (e.g. /proc/cpuinfo's flags) holds word. */
static bool file_has_word(const char *path, const char *prefix, const char *word)
{
	FILE *f = fopen(path, "re");
	char line[8192];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, prefix, strlen(prefix)))
			continue;
		for (char *p = strstr(line, word); p && !found; p = strstr(p + 1, word))
			found = (p == line || isspace((unsigned char)p[-1])) &&
				(!p[strlen(word)] || isspace((unsigned char)p[strlen(word)]));
	}
	if (f)
		fclose(f);
	return found;
}

static bool has_cap(int bit)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long caps = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	if (f)
		fclose(f);
	return caps >> bit & 1;
}

/* A shared library the dynamic linker finds (ldconfig's cache), or one in
 * dirs; its path in out. */
static bool find_library(const char *name, const char *const *dirs, size_t ndirs, char *out,
			 size_t len)
{
	for (size_t i = 0; i < ndirs; i++) {
		if (!dirs[i])
			continue;
		snprintf(out, len, "%s/%s", dirs[i], name);
		if (access(out, R_OK) == 0)
			return true;
	}
	FILE *p = popen("/sbin/ldconfig -p 2>/dev/null", "r");
	char line[1024];
	bool found = false;
	while (p && fgets(line, sizeof(line), p)) {
		char *arrow = strstr(line, "=> ");
		if (!found && strstr(line, name) && arrow) {
			snprintf(out, len, "%s", arrow + 3);
			out[strcspn(out, "\n")] = 0;
			found = true;
		}
	}
	if (p)
		pclose(p);
	return found;
}

/* ---- ELF: unwind tables and frame pointers ------------------------------ */

struct elf_facts {
	bool eh_frame;
	uint64_t text_bytes;
	uint64_t prologues;       /* push %rbp; mov %rsp,%rbp in .text (x86-64) */
	bool x86_64;
};

/* Reads the section table of a 64-bit ELF file.  -errno, -ENOEXEC. */
static int inspect_elf(const char *path, struct elf_facts *f)
{
	*f = (struct elf_facts){ 0 };
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		close(fd);
		return -ENOEXEC;
	}
	size_t size = (size_t)st.st_size;
	const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	const Elf64_Ehdr *eh = (const void *)m;
	int rc = -ENOEXEC;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
	    (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum || eh->e_shstrndx >= eh->e_shnum)
		goto out;
	const Elf64_Shdr *sh = (const void *)(m + eh->e_shoff);
	const Elf64_Shdr *strs = &sh[eh->e_shstrndx];
	if (strs->sh_offset > size || strs->sh_size > size - strs->sh_offset)
		goto out;
	f->x86_64 = eh->e_machine == EM_X86_64;
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_name >= strs->sh_size)
			continue;
		const char *name = (const char *)m + strs->sh_offset + sh[i].sh_name;
		size_t room = strs->sh_size - sh[i].sh_name;
		if (!strncmp(name, ".eh_frame", room) && sh[i].sh_size)
			f->eh_frame = true;
		bool text = !strncmp(name, ".text", room) && sh[i].sh_type == SHT_PROGBITS;
		if (text && sh[i].sh_offset <= size && sh[i].sh_size <= size - sh[i].sh_offset) {
			const unsigned char *t = m + sh[i].sh_offset;
			f->text_bytes = sh[i].sh_size;
			for (uint64_t k = 0; k + 4 <= sh[i].sh_size; k++)
				f->prologues += t[k] == 0x55 && t[k + 1] == 0x48 && t[k + 2] == 0x89 &&
						t[k + 3] == 0xe5;
		}
	}
	rc = 0;
out:
	munmap((void *)m, size);
	return rc;
}

/* "frame pointers likely / unlikely" from the prologue count. */
static bool frame_pointers_likely(const struct elf_facts *f)
{
	return f->text_bytes && f->prologues * FP_BYTES_PER_PROLOGUE >= f->text_bytes;
}

static const char fp_fix[] =
	"the sampler walks frame pointers: build with -fno-omit-frame-pointer (for Python: a "
	"build configured with CFLAGS=-fno-omit-frame-pointer, or Python 3.12+ from a distribution "
	"that enables them, e.g. Fedora 38+, Ubuntu 24.04+)";

/* One binary's unwind facts as a report line. */
static void report_binary(struct doctor *d, const char *check, const char *path, const char *extra)
{
	struct elf_facts f;
	int rc = inspect_elf(path, &f);
	if (rc < 0) {
		report(d, check, WARN, "run ringprof doctor as the file's owner or as root", "%s: "
		       "cannot read it as a 64-bit ELF file (%s)", path,
		       strerror(-rc));
		return;
	}
	if (!f.x86_64) {
		report(d, check, OK, NULL, "%s: .eh_frame %s; frame pointers not checked (not x86-64)",
		       path, f.eh_frame ? "present" : "absent");
		return;
	}
	bool fp = frame_pointers_likely(&f);
	report(d, check, fp && f.eh_frame ? OK : WARN, fp_fix,
	       "%s: frame pointers %s (%llu frame-pointer prologues in %llu KiB of .text), "
	       ".eh_frame %s%s", path, fp ? "likely" : "unlikely", (unsigned long long)f.prologues,
	       (unsigned long long)(f.text_bytes >> 10), f.eh_frame ? "present" : "absent",
	       extra ? extra : "");
}

/* ---- the checks ---------------------------------------------------------- */

static const char start_fix[] =
	"start it: 'sudo scripts/run.sh' from the source tree, 'systemctl start ringprofd', or "
	"'ringprof run -- CMD', which starts a private one for CMD";

static void check_daemon(struct doctor *d)
{
	struct rp_err err = { 0 };
	int rc = rp_client_call(d->client, "GET", "/v1/status", NULL, &d->status, &err);
	if (rc < 0) {
		d->status = NULL;
		report(d, "daemon", FAIL, rc == -EACCES ? "see the socket check" : start_fix, "%s",
		       err.msg);
		return;
	}
	report(d, "daemon", OK, NULL, "ringprofd %s, pid %lld, on %s",
	       json_string_value(json_object_get(d->status, "version")),
	       (long long)json_integer_value(json_object_get(d->status, "pid")), d->socket);
}

/* The caller's groups, as "root(0), adm(4)". */
static void caller_groups(char *out, size_t len)
{
	gid_t gids[257];
	gids[0] = getegid();
	int n = getgroups(256, gids + 1);
	n = n < 0 ? 1 : n + 1;
	size_t w = 0;
	out[0] = 0;
	for (int i = 0; i < n && w < len; i++) {
		if (i > 0 && gids[i] == gids[0])
			continue;
		const struct group *g = getgrgid(gids[i]);
		int k = snprintf(out + w, len - w, "%s%s(%u)", i ? ", " : "", g ? g->gr_name : "?",
				 (unsigned)gids[i]);
		w += k > 0 ? (size_t)k : 0;
	}
}

static void check_one_socket(struct doctor *d, const char *check, const char *path)
{
	struct stat st;
	char groups[512], fix[512];
	caller_groups(groups, sizeof(groups));
	if (stat(path, &st) < 0) {
		int e = errno;
		snprintf(fix, sizeof(fix), e == EACCES ? "a directory on the way to it is closed to "
			 "you: ask its owner, or run as a member of its group" : "%s", start_fix);
		report(d, check, FAIL, fix, "%s: %s", path, strerror(e));
		return;
	}
	const struct group *g = getgrgid(st.st_gid);
	char gname[64];
	snprintf(gname, sizeof(gname), "%s", g ? g->gr_name : "?");
	if (access(path, R_OK | W_OK) < 0) {
		snprintf(fix, sizeof(fix), "join group %s (sudo usermod -aG %s $USER, then log in "
			 "again), or run as its owner", gname, gname);
		report(d, check, FAIL, fix, "%s (mode %04o, owner uid %u, group %s) is closed to uid %u "
		       "in groups %s", path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, gname,
		       (unsigned)getuid(), groups);
		return;
	}
	report(d, check, OK, NULL, "%s (mode %04o, group %s) is open to you (uid %u, groups %s)",
	       path, (unsigned)(st.st_mode & 07777), gname, (unsigned)getuid(), groups);
}

static void check_socket(struct doctor *d)
{
	char producers[PATH_MAX];
	check_one_socket(d, "socket", d->socket);
	if (rp_producer_socket_path(d->socket, producers, sizeof(producers)))
		check_one_socket(d, "producer-socket", producers);
}

static void check_sampler(struct doctor *d)
{
	const json_t *col;
	size_t i;
	if (!d->status) {
		report(d, "sampler", WARN, "see the daemon check", "not known: the daemon did not answer");
		return;
	}
	json_array_foreach(json_object_get(d->status, "collectors"), i, col) {
		const char *name = json_string_value(json_object_get(col, "name"));
		const char *state = json_string_value(json_object_get(col, "state"));
		const char *reason = json_string_value(json_object_get(col, "reason"));
		if (!name || strcmp(name, "cpu_sampler"))
			continue;
		if (state && !strcmp(state, "running"))
			report(d, "sampler", OK, NULL, "running at %lld Hz",
			       (long long)json_integer_value(json_object_get(col, "frequency_hz")));
		else
			report(d, "sampler", WARN, "see the bpf lines below; then restart ringprofd",
			       "%s: %s", state ? state : "?", reason ? reason : "no reason given");
		return;
	}
	report(d, "sampler", WARN, "upgrade ringprofd", "the daemon reports no cpu_sampler");
}

static void check_bpf(struct doctor *d)
{
	static const char priv_fix[] =
		"run ringprofd as root (the systemd unit does), or give it the capabilities: "
		"sudo setcap cap_bpf,cap_perfmon+ep $(command -v ringprofd)";
	if (d->privileged)
		report(d, "bpf-privileges", OK, NULL, "%s", getuid() == 0 ? "root" :
		       "CAP_BPF and CAP_PERFMON");
	else
		report(d, "bpf-privileges", WARN, priv_fix, "uid %u has neither root nor CAP_BPF and "
		       "CAP_PERFMON: a ringprofd started by you (ringprof run) samples no CPUs",
		       (unsigned)getuid());
	if (access("/sys/kernel/btf/vmlinux", R_OK) == 0)
		report(d, "btf", OK, NULL, "/sys/kernel/btf/vmlinux present");
	else
		report(d, "btf", WARN, "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (most "
		       "distribution kernels since 2020 are)", "/sys/kernel/btf/vmlinux missing: "
		       "the sampler cannot load");
	long paranoid = read_long("/proc/sys/kernel/perf_event_paranoid", -100);
	if (paranoid == -100)
		report(d, "perf-paranoid", WARN, "mount /proc (the sampler needs it too)",
		       "/proc/sys/kernel/perf_event_paranoid unreadable");
	else if (paranoid > 2 && !has_cap(CAP_PERFMON_BIT) && !has_cap(CAP_SYS_ADMIN_BIT))
		report(d, "perf-paranoid", WARN, "sudo sysctl kernel.perf_event_paranoid=2, or run "
		       "ringprofd with CAP_PERFMON", "kernel.perf_event_paranoid = %ld: perf events are "
		       "closed to processes without CAP_PERFMON", paranoid);
	else
		report(d, "perf-paranoid", OK, NULL, "kernel.perf_event_paranoid = %ld%s", paranoid,
		       paranoid > 2 ? " (CAP_PERFMON is not bound by it)" : "");
	long kptr = read_long("/proc/sys/kernel/kptr_restrict", -1);
	char line[256];
	bool addresses = false;
	FILE *f = fopen("/proc/kallsyms", "re");
	for (int i = 0; f && i < 64 && fgets(line, sizeof(line), f); i++)
		addresses = addresses || strtoull(line, NULL, 16) != 0;
	if (f)
		fclose(f);
	if (addresses)
		report(d, "kallsyms", OK, NULL, "/proc/kallsyms shows addresses (kptr_restrict = %ld): "
		       "kernel frames get names", kptr);
	else
		report(d, "kallsyms", WARN, kptr >= 2 ? "sudo sysctl kernel.kptr_restrict=1 and run "
		       "'ringprof summary/export' as root" : "run 'ringprof summary/export' as root",
		       "/proc/kallsyms shows no addresses to uid %u (kptr_restrict = %ld): kernel "
		       "frames stay unnamed", (unsigned)getuid(), kptr);
}

/* The python3 in PATH: what it runs (sys.executable), the CFLAGS it was
 * built with, its version, and the libpython it loaded (from its own
 * /proc/self/maps; empty when it is linked statically). */
static void check_python(struct doctor *d)
{
	FILE *p = popen("python3 -c 'import sys, sysconfig\n"
			"print(sys.executable)\n"
			"print(sysconfig.get_config_var(\"CFLAGS\") or \"\")\n"
			"print(\"%d.%d\" % sys.version_info[:2])\n"
			"libs = [l.split()[-1] for l in open(\"/proc/self/maps\") if \"libpython\" in l]\n"
			"print(libs[0] if libs else \"\")' 2>/dev/null", "r");
	char lines[4][PATH_MAX] = { { 0 } };
	for (int i = 0; p && i < 4 && fgets(lines[i], sizeof(lines[i]), p); i++)
		lines[i][strcspn(lines[i], "\n")] = 0;
	int rc = p ? pclose(p) : -1;
	if (rc != 0 || !lines[0][0]) {
		report(d, "python", OK, NULL, "no python3 in PATH: not checked");
		return;
	}
	char extra[PATH_MAX + 128];
	bool cflags_fp = strstr(lines[1], "-fno-omit-frame-pointer") != NULL;
	unsigned major = 0, minor = 0;
	bool perf_maps = sscanf(lines[2], "%u.%u", &major, &minor) == 2 &&
			 (major > 3 || (major == 3 && minor >= 12));
	snprintf(extra, sizeof(extra), "; Python %s, CFLAGS %s -fno-omit-frame-pointer%s", lines[2],
		 cflags_fp ? "with" : "without", perf_maps ? "; ringprof run names Python frames "
		 "(PYTHONPERFSUPPORT)" : "");
	report_binary(d, "python", lines[3][0] ? lines[3] : lines[0], extra);
}

/* The file-backed executable mappings of --pid, each once. */
static void check_pid(struct doctor *d)
{
	if (!d->pid)
		return;
	char path[64], line[PATH_MAX + 128], last[PATH_MAX] = "";
	snprintf(path, sizeof(path), "/proc/%ld/maps", d->pid);
	FILE *f = fopen(path, "re");
	if (!f) {
		report(d, "pid", FAIL, "give the pid of a running process you may trace (same user, "
		       "or root)", "%s: %s", path, strerror(errno));
		return;
	}
	unsigned n = 0;
	while (fgets(line, sizeof(line), f)) {
		char perms[8];
		int off = 0;
		if (sscanf(line, "%*s %7s %*s %*s %*s %n", perms, &off) < 1 || !off || perms[2] != 'x')
			continue;
		char *file = line + off;
		file[strcspn(file, "\n")] = 0;
		if (file[0] != '/' || !strcmp(file, last))
			continue;
		snprintf(last, sizeof(last), "%s", file);
		char check[32];
		snprintf(check, sizeof(check), "pid-%ld", d->pid);
		report_binary(d, check, file, NULL);
		n++;
	}
	fclose(f);
	if (!n)
		report(d, "pid", WARN, "give the pid of the process that runs the workload",
		       "process %ld maps no executable file", d->pid);
}

/* Free space on a directory the daemon writes, against what it needs. */
static void check_space(struct doctor *d, const char *check, const char *dir, uint64_t need,
			const char *need_what)
{
	/* A directory not made yet (no session so far) fills its parent. */
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", dir);
	struct statvfs vfs;
	int rc;
	char *slash;
	while ((rc = statvfs(path, &vfs)) < 0 && errno == ENOENT && (slash = strrchr(path, '/')) &&
	       slash != path)
		*slash = 0;
	if (rc < 0) {
		report(d, check, WARN, "make it readable to you, or run ringprof doctor as root",
		       "%s: %s", path, strerror(errno));
		return;
	}
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	char a[32], n[32];
	rp_format_size(avail, a, sizeof(a));
	rp_format_size(need, n, sizeof(n));
	bool low = avail < need || avail < DISK_LOW_BYTES;
	report(d, check, low ? WARN : OK, "free space there, or lower the budgets (docs/configuration.md)",
	       "%s: %s free%s%s; %s %s", dir, a, strcmp(path, dir) ? " on " : "",
	       strcmp(path, dir) ? path : "", need_what, n);
}

static void check_disk(struct doctor *d)
{
	if (!d->status) {
		report(d, "disk", WARN, "see the daemon check", "not known: the daemon did not answer");
		return;
	}
	uint64_t rings = 0;
	const json_t *r;
	size_t i;
	json_array_foreach(json_object_get(d->status, "rings"), i, r)
		rings += (uint64_t)json_integer_value(json_object_get(r, "budget_bytes"));
	const char *state = json_string_value(json_object_get(d->status, "state_dir"));
	const char *logdir = json_string_value(json_object_get(d->status, "logdir"));
	uint64_t quota = (uint64_t)json_integer_value(json_object_get(d->status, "sessions_max_bytes"));
	if (state)
		check_space(d, "disk-rings", state, rings, "the rings' budgets take");
	if (logdir)
		check_space(d, "disk-sessions", logdir, quota, "the sessions' quota ([sessions] max_bytes) is");
}

static void check_nvidia(struct doctor *d)
{
	char line[256], lib[PATH_MAX];
	if (!read_line("/proc/driver/nvidia/version", line, sizeof(line))) {
		report(d, "nvidia", OK, NULL, "not present: no NVIDIA driver (/proc/driver/nvidia/version)");
		return;
	}
	report(d, "nvidia", OK, NULL, "%s", line);
	const char *cuda = getenv("CUDA_HOME");
	char cuda_dir[PATH_MAX] = "";
	if (cuda)
		snprintf(cuda_dir, sizeof(cuda_dir), "%s/extras/CUPTI/lib64", cuda);
	const char *dirs[] = { cuda ? cuda_dir : NULL, "/usr/local/cuda/extras/CUPTI/lib64" };
	if (find_library("libcupti.so", dirs, 2, lib, sizeof(lib)))
		report(d, "cupti", OK, NULL, "%s", lib);
	else
		report(d, "cupti", WARN, "install the CUDA toolkit's CUPTI (cuda-cupti package) and set "
		       "CUDA_HOME, or add its lib64 to ld.so.conf", "libcupti.so not found (ldconfig, "
		       "$CUDA_HOME/extras/CUPTI/lib64, /usr/local/cuda)");
	FILE *f = fopen("/proc/driver/nvidia/params", "re");
	long admin_only = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "RmProfilingAdminOnly: %ld", &admin_only) == 1)
			break;
	if (f)
		fclose(f);
	if (admin_only == 1 && geteuid() != 0)
		report(d, "gpu-profiling", WARN, "options nvidia NVreg_RestrictProfilingToAdminUsers=0 in "
		       "/etc/modprobe.d, then reload the driver; or profile as root",
		       "RmProfilingAdminOnly = 1: GPU counters are for admins only");
	else
		report(d, "gpu-profiling", OK, NULL, "RmProfilingAdminOnly = %ld%s", admin_only,
		       admin_only == 1 ? " (you are root)" : "");
	bool dcgm = false;
	DIR *proc = opendir("/proc");
	for (struct dirent *e; proc && !dcgm && (e = readdir(proc));) {
		char path[300];
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", e->d_name);
		dcgm = read_line(path, line, sizeof(line)) && !strcmp(line, "nv-hostengine");
	}
	if (proc)
		closedir(proc);
	if (dcgm)
		report(d, "dcgm", WARN, "pause DCGM profiling while you profile: dcgmi profile --pause "
		       "(--resume after)", "nv-hostengine runs: DCGM may hold the GPU's profiling counters");
	else
		report(d, "dcgm", OK, NULL, "no nv-hostengine: the profiling counters are free");
}

static void check_neuron(struct doctor *d)
{
	char lib[PATH_MAX];
	const char *dirs[] = { "/opt/aws/neuron/lib" };
	bool have_lib = find_library("libnrt.so.1", dirs, 1, lib, sizeof(lib));
	unsigned devices = 0;
	DIR *dev = opendir("/dev");
	for (struct dirent *e; dev && (e = readdir(dev));)
		devices += !strncmp(e->d_name, "neuron", 6) && isdigit((unsigned char)e->d_name[6]);
	if (dev)
		closedir(dev);
	if (!have_lib && !devices)
		report(d, "neuron", OK, NULL, "not present: no /dev/neuron* and no libnrt.so.1");
	else if (!have_lib)
		report(d, "neuron", WARN, "install aws-neuronx-runtime-lib", "%u Neuron devices but no "
		       "libnrt.so.1", devices);
	else
		report(d, "neuron", OK, NULL, "%s, %u devices", lib, devices);
}

static void check_clock(struct doctor *d)
{
	char source[64] = "?";
	(void)read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", source,
			sizeof(source));
	bool x86 = file_has_word("/proc/cpuinfo", "flags", "tsc");
	bool invariant = file_has_word("/proc/cpuinfo", "flags", "constant_tsc") &&
			 file_has_word("/proc/cpuinfo", "flags", "nonstop_tsc");
	if (!x86)
		report(d, "clock", OK, NULL, "clocksource %s (no TSC on this CPU)", source);
	else if (!invariant)
		report(d, "clock", WARN, "on a VM, ask for a host with invariant TSC; timestamps still "
		       "work, they cost more", "the TSC is not invariant (constant_tsc nonstop_tsc "
		       "missing); clocksource %s", source);
	else if (strcmp(source, "tsc"))
		report(d, "clock", WARN, "echo tsc | sudo tee /sys/devices/system/clocksource/"
		       "clocksource0/current_clocksource (if the kernel accepts it)",
		       "clocksource %s, not tsc: every timestamp is a slower clock read", source);
	else
		report(d, "clock", OK, NULL, "invariant TSC, clocksource tsc");
}

static const struct {
	void (*run)(struct doctor *d);
} checks[] = {
	{ check_daemon }, { check_socket }, { check_sampler }, { check_bpf }, { check_python },
	{ check_pid }, { check_disk }, { check_nvidia }, { check_neuron }, { check_clock },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: ringprof doctor [--pid PID] [--json] [--socket PATH]\n");
	if (out != stdout) {
		fprintf(out, "Try 'ringprof doctor --help'.\n");
		return;
	}
	fprintf(out,
		"\nCheck this host's set-up for ringprof, one line per check: OK, WARN or FAIL,\n"
		"each problem with its fix.  Checks: the daemon and its version; the sockets'\n"
		"permissions against your groups; the CPU sampler, BPF privileges, BTF,\n"
		"perf_event_paranoid, kallsyms; frame pointers (x86-64: a count of\n"
		"'push %%rbp; mov %%rsp,%%rbp' prologues in .text, one per %d bytes or more)\n"
		"and .eh_frame of the libpython that python3 in PATH loads, and of the\n"
		"libraries of --pid; free disk against the ring budgets and the sessions'\n"
		"quota; NVIDIA driver, libcupti, RmProfilingAdminOnly, DCGM; Neuron runtime;\n"
		"the clock source.  Hardware that is absent is OK (\"not present\").\n"
		"Exit status 1 when a check FAILs.\n\n"
		"  --pid PID         also check the executable files process PID maps\n"
		"  --json            an array of {check, status, message, fix}\n"
		"  --socket PATH     ringprofd's socket\n"
		"  -h, --help        this help\n", FP_BYTES_PER_PROLOGUE);
}

int rp_cli_doctor(int argc, char **argv, const char *socket)
{
	struct doctor d = { .socket = socket };
	enum { O_PID = 256, O_JSON, O_SOCKET };
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, O_PID },
		{ "json", no_argument, NULL, O_JSON },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	optind = 0;
	opterr = 0;
	struct rp_err err = { 0 };
	unsigned pid;
	for (int c; (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1;) {
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case O_PID:
			if (rp_parse_uint(optarg, 1, INT32_MAX, &pid, &err) < 0) {
				fprintf(stderr, "ringprof doctor: --pid: %s\n", err.msg);
				return EXIT_USAGE;
			}
			d.pid = pid;
			break;
		case O_JSON:
			d.json = true;
			break;
		case O_SOCKET:
			d.socket = optarg;
			break;
		default:
			fprintf(stderr, "ringprof doctor: %s '%s'\n", c == ':' ? "option needs a value"
				: "unknown option", argv[optind - 1]);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringprof doctor: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EXIT_USAGE;
	}
	char buf[PATH_MAX];
	if (!d.socket && !(d.socket = rp_default_socket_path(buf, sizeof(buf)))) {
		fprintf(stderr, "ringprof doctor: the default socket path is too long: give --socket\n");
		return EXIT_USAGE;
	}
	struct rp_client_opts co = { .socket_path = d.socket, .client_name = "cli",
				     .timeout_ms = 5000 };
	if (rp_client_new(&co, &d.client, &err) < 0) {
		fprintf(stderr, "ringprof doctor: %s\n", err.msg);
		return EXIT_FAILURE;
	}
	d.privileged = geteuid() == 0 || (has_cap(CAP_BPF_BIT) && has_cap(CAP_PERFMON_BIT));
	d.results = json_array();
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
		checks[i].run(&d);
	if (d.json && json_dumpf(d.results, stdout, JSON_INDENT(2)) == 0)
		putchar('\n');
	json_decref(d.results);
	json_decref(d.status);
	rp_client_free(d.client);
	return d.failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
