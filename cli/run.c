/* ringprof run: see run.h. */
#include "run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "parse.h"
#include "paths.h"
#include "reader.h"
#include "summary.h"
#include "text.h"
#include "names.h"

#define EXIT_USAGE 2
#define NAME_MAX_LEN (RP_NAME_LEN - 1)
#define CPU_SAMPLE_HZ_MAX 10000
/* How often the command's process tree is looked for in /proc: a child
 * that lives shorter may be missed. */
#define TREE_POLL_NS 50000000L
/* How long a private daemon may take to answer, and to exit. */
#define DAEMON_START_MS 15000
#define DAEMON_STOP_MS 30000
#define SOCKET_NAME "ringprofd.sock"
/* The longest control socket path ringprofd takes: sun_path less the
 * producer socket's ".producers" suffix. */
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - sizeof(".producers"))

/* ---- collector setups ----------------------------------------------------
 * Each in-workload collector that `run` sets up: its name (the option
 * --no-NAME turns it off) and what it changes in the command's
 * environment.  A new collector is one row. */
struct collector_setup {
	const char *name;
	const char *help;
	int (*setup)(void);  /* 0, or -errno with a message printed */
};

/* CPython 3.12+ writes /tmp/perf-PID.map for its Python frames, which the
 * sampler's stacks are symbolized with; older versions ignore it. */
static int setup_python_perf(void)
{
	return setenv("PYTHONPERFSUPPORT", "1", 1) < 0 ? -errno : 0;
}

/* oneDNN (XLA's CPU matmuls, PyTorch's on CPU) generates its kernels at
 * run time into anonymous memory and names them in /tmp/perf-PID.map
 * when asked (ONEDNN_JIT_PROFILE=2); only when written, so at no cost
 * while they run.  A value the command has is kept. */
static int setup_onednn_perf(void)
{
	return setenv("ONEDNN_JIT_PROFILE", "2", 0) < 0 ? -errno : 0;
}

/* Adds item to the colon-separated list in the environment variable var,
 * first or last. */
static int env_list_add(const char *var, const char *item, bool first)
{
	const char *old = getenv(var);
	if (!old || !*old)
		return setenv(var, item, 1) < 0 ? -errno : 0;
	char *both;
	if (asprintf(&both, "%s:%s", first ? item : old, first ? old : item) < 0)
		return -ENOMEM;
	int rc = setenv(var, both, 1) < 0 ? -errno : 0;
	free(both);
	return rc;
}

/* The Neuron collector (docs/neuron.md), preloaded whenever it is
 * installed: it does nothing in a process that never calls libnrt.
 * RINGPROF_NEURON_LIB names another build of it. */
static int setup_neuron(void)
{
	const char *lib = getenv("RINGPROF_NEURON_LIB");
	lib = lib && *lib ? lib : RINGPROF_NEURON_LIB_PATH;
	if (access(lib, R_OK) < 0)
		return 0;
	/* After what is there: a sanitizer's runtime must come first. */
	return env_list_add("LD_PRELOAD", lib, false);
}

/* ringprof run's start-up hook for Python programs (python/hook:
 * RINGPROF_PYTHON_HOOK_DIR, default the installed one) first on
 * PYTHONPATH, once, and var=1, which asks it for one thing
 * (docs/xla.md).  Nothing when the hook is not installed. */
static int python_hook(const char *var)
{
	const char *dir = getenv("RINGPROF_PYTHON_HOOK_DIR");
	dir = dir && *dir ? dir : RINGPROF_PYTHON_HOOK_DIR;
	char hook[PATH_MAX];
	snprintf(hook, sizeof(hook), "%s/sitecustomize.py", dir);
	if (access(hook, R_OK) < 0)
		return 0;
	if (setenv(var, "1", 1) < 0)
		return -errno;
	const char *path = getenv("PYTHONPATH");
	size_t len = strlen(dir);
	if (path && strncmp(path, dir, len) == 0 && (path[len] == ':' || !path[len]))
		return 0; /* another setup put it there */
	/* First: the hook runs the sitecustomize it hides itself. */
	return env_list_add("PYTHONPATH", dir, true);
}

/* The XLA collector's side in JAX programs (docs/xla.md): the hook
 * attaches a Python program once it has imported jax. */
static int setup_xla(void)
{
	return python_hook("RINGPROF_XLA_ATTACH");
}

/* The GPU collector (docs/gpu.md), which the CUDA driver loads at cuInit,
 * whenever it is installed and the command has no injection library of its
 * own.  RINGPROF_CUPTI_INJECTION names another build of it. */
static int setup_cuda(void)
{
	const char *lib = getenv("RINGPROF_CUPTI_INJECTION");
	lib = lib && *lib ? lib : RINGPROF_CUPTI_INJECTION_PATH;
	const char *own = getenv("CUDA_INJECTION64_PATH");
	if ((own && *own) || access(lib, R_OK) < 0)
		return 0;
	if (setenv("CUDA_INJECTION64_PATH", lib, 1) < 0)
		return -errno;
	/* In a PyTorch program it records once torch.profiler shares CUPTI
	 * with it: the hook makes that so when torch is imported. */
	return python_hook("RINGPROF_TORCH_SHARE");
}

static const struct collector_setup collectors[] = {
	{ "python-perf", "Python frames in CPU samples (PYTHONPERFSUPPORT=1, Python 3.12+)",
	  setup_python_perf },
	{ "onednn-perf", "oneDNN's generated kernels (XLA and PyTorch on CPU) named in CPU "
	  "samples (ONEDNN_JIT_PROFILE=2)", setup_onednn_perf },
	{ "neuron", "Neuron runtime calls (LD_PRELOAD of libringprof-neuron.so, when installed)",
	  setup_neuron },
	{ "cuda", "GPU activity (CUDA_INJECTION64_PATH=libringprof-cupti.so, when installed; "
	  "in PyTorch programs a PYTHONPATH hook shares CUPTI with torch.profiler)", setup_cuda },
	{ "xla", "XLA ops of Python programs that import jax (PYTHONPATH hook that calls "
	  "ringprof.xla.attach(), when installed)", setup_xla },
};
#define NCOLLECTORS (sizeof(collectors) / sizeof(collectors[0]))

/* ---- options ------------------------------------------------------------- */

struct run_opts {
	const char *name, *run, *logdir, *socket;
	unsigned sample_hz;
	bool off[NCOLLECTORS];
	char **cmd;
};

enum { O_NAME = 256, O_RUN, O_LOGDIR, O_HZ, O_SOCKET, O_NO_FIRST };

static void usage(FILE *out)
{
	fprintf(out, "usage: ringprof run [--name N] [--run R] [--logdir DIR] [--sample-hz HZ]\n"
		     "                    [--no-COLLECTOR] [--socket PATH] [--] CMD [ARGS...]\n");
	if (out != stdout) {
		fprintf(out, "Try 'ringprof run --help'.\n");
		return;
	}
	fprintf(out,
		"\nProfile one command: a session opens as CMD starts and stops when it exits\n"
		"(Ctrl-C and SIGTERM go to CMD's process group; ringprof waits for it).  The\n"
		"session keeps only the events of CMD's process tree (followed in /proc every\n"
		"50 ms while it runs; at most %d processes).  At the end the session's path\n"
		"and summary go to stderr.  Exit status: CMD's (128+N when signal N killed\n"
		"it); 1 when ringprof could not profile it, and CMD did not run.\n"
		"\n"
		"With no ringprofd on the socket, a private one runs for CMD's lifetime (its\n"
		"socket and rings in a temporary directory, the CPU sampler when privileges\n"
		"allow) and writes the session to --logdir.\n"
		"\n"
		"  --name N          session id (default: from the time)\n"
		"  --run R           run directory the session goes into\n"
		"  --logdir DIR      the private daemon's log directory (default\n"
		"                    ./ringprof-sessions); a running daemon keeps its own\n"
		"  --sample-hz HZ    sample CPUs at HZ per CPU (1 to 10000) during the run\n"
		"  --socket PATH     ringprofd's socket (default: $RINGPROF_SOCKET, then the\n"
		"                    default socket)\n",
		RP_FILTER_MAX);
	for (size_t i = 0; i < NCOLLECTORS; i++)
		fprintf(out, "  --no-%-13s no %s\n", collectors[i].name, collectors[i].help);
	fprintf(out, "  -h, --help        this help\n\n"
		     "CMD's environment gets RINGPROF_SOCKET, so that libringprof and the Python\n"
		     "package in it annotate into the same daemon.\n");
}

static int usage_error(const char *fmt, const char *what)
{
	fprintf(stderr, "ringprof run: ");
	fprintf(stderr, fmt, what);
	fputc('\n', stderr);
	usage(stderr);
	return EXIT_USAGE;
}

/* -1 to go on, else the exit status. */
static int parse_opts(int argc, char **argv, struct run_opts *o)
{
	struct option longopts[O_NO_FIRST - O_NAME + NCOLLECTORS + 2] = {
		{ "name", required_argument, NULL, O_NAME },
		{ "run", required_argument, NULL, O_RUN },
		{ "logdir", required_argument, NULL, O_LOGDIR },
		{ "sample-hz", required_argument, NULL, O_HZ },
		{ "socket", required_argument, NULL, O_SOCKET },
	};
	char names[NCOLLECTORS][64];
	size_t n = O_NO_FIRST - O_NAME;
	for (size_t i = 0; i < NCOLLECTORS; i++) {
		snprintf(names[i], sizeof(names[i]), "no-%s", collectors[i].name);
		longopts[n++] = (struct option){ names[i], no_argument, NULL, O_NO_FIRST + (int)i };
	}
	longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	longopts[n] = (struct option){ 0 };
	optind = 0;
	opterr = 0;
	struct rp_err err = { 0 };
	/* '+': options end at CMD, whose own options are its own. */
	for (int c; (c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1;) {
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case O_NAME:
			if (rp_check_name(optarg, NAME_MAX_LEN, "session name", &err) < 0)
				return usage_error("--name: %s", err.msg);
			o->name = optarg;
			break;
		case O_RUN:
			if (rp_check_name(optarg, NAME_MAX_LEN, "run name", &err) < 0)
				return usage_error("--run: %s", err.msg);
			o->run = optarg;
			break;
		case O_LOGDIR:
			o->logdir = optarg;
			break;
		case O_HZ:
			if (rp_parse_uint(optarg, 1, CPU_SAMPLE_HZ_MAX, &o->sample_hz, &err) < 0)
				return usage_error("--sample-hz: %s", err.msg);
			break;
		case O_SOCKET:
			o->socket = optarg;
			break;
		case ':':
			return usage_error("option '%s' needs a value", argv[optind - 1]);
		case '?':
			return usage_error("unknown option '%s'", argv[optind - 1]);
		default:
			o->off[c - O_NO_FIRST] = true;
		}
	}
	if (optind == argc)
		return usage_error("%s", "give the command to profile: ringprof run -- CMD [ARGS...]");
	o->cmd = argv + optind;
	return -1;
}

/* The signals ringprof passes on to the command; blocked from the start
 * to the end of the run, so that the session is always stopped. */
static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
static sigset_t waited, unblocked; /* forwarded + SIGCHLD; the mask before */

static void block_signals(void)
{
	sigemptyset(&waited);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&waited, forwarded[i]);
	sigaddset(&waited, SIGCHLD);
	sigprocmask(SIG_BLOCK, &waited, &unblocked);
}

/* ---- the private daemon -------------------------------------------------- */

struct private_daemon {
	pid_t pid;
	char dir[PATH_MAX - 32]; /* temporary: socket, rings, log */
	char socket[PATH_MAX];
	char log[PATH_MAX];
};

static bool executable_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* ringprofd next to this ringprof (installed side by side, or the build
 * tree's daemon/ beside cli/), else in PATH. */
static int find_ringprofd(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		*slash = 0;
		static const char *const beside[] = { "%s/ringprofd", "%s/../daemon/ringprofd" };
		for (size_t i = 0; i < sizeof(beside) / sizeof(beside[0]); i++)
			if ((size_t)snprintf(out, len, beside[i], self) < len && executable_file(out))
				return 0;
	}
	const char *path = getenv("PATH");
	for (const char *p = path; p && *p;) {
		size_t seg = strcspn(p, ":");
		if ((size_t)snprintf(out, len, "%.*s/ringprofd", (int)seg, seg ? p : ".") < len &&
		    executable_file(out))
			return 0;
		p += seg + (p[seg] == ':');
	}
	return -ENOENT;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Waits up to ms for pid; its status, or -1 when it still runs. */
static int wait_exit(pid_t pid, long ms)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int status;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (ms_since(&t0) > ms)
			return -1;
		usleep(20000);
	}
	return status;
}

static void print_log(const char *log)
{
	FILE *f = fopen(log, "r");
	char line[1024];
	while (f && fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	if (f)
		fclose(f);
}

/* Starts ringprofd in a new temporary directory, writing sessions to
 * logdir; returns once it answers on its socket, in d->client. */
static int start_private(struct private_daemon *d, const char *logdir, struct rp_client **client)
{
	char exe[PATH_MAX], abs_logdir[PATH_MAX], state[PATH_MAX + 8];
	if (find_ringprofd(exe, sizeof(exe)) < 0) {
		fprintf(stderr, "ringprof run: no ringprofd is running and none was found beside "
				"ringprof or in PATH: install ringprofd, or start one (scripts/run.sh)\n");
		return -ENOENT;
	}
	if (logdir[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(abs_logdir, sizeof(abs_logdir), "%s/%s", cwd, logdir) >=
			    sizeof(abs_logdir)) {
			fprintf(stderr, "ringprof run: --logdir %s: path too long\n", logdir);
			return -ENAMETOOLONG;
		}
		logdir = abs_logdir;
	}
	/* In $TMPDIR, unless the socket's path would be too long there. */
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) + sizeof("/ringprof-run-XXXXXX/" SOCKET_NAME) > SOCKET_PATH_MAX)
		tmp = "/tmp";
	snprintf(d->dir, sizeof(d->dir), "%s/ringprof-run-XXXXXX", tmp);
	if (!mkdtemp(d->dir)) {
		fprintf(stderr, "ringprof run: cannot make a temporary directory %s: %s\n", d->dir,
			strerror(errno));
		d->dir[0] = 0;
		return -errno;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/" SOCKET_NAME, d->dir);
	snprintf(d->log, sizeof(d->log), "%s/ringprofd.log", d->dir);
	snprintf(state, sizeof(state), "%s/rings", d->dir);
	int logfd = open(d->log, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (logfd < 0) {
		fprintf(stderr, "ringprof run: cannot create %s: %s\n", d->log, strerror(errno));
		return -errno;
	}
	char *argv[] = { exe, "--foreground", "--socket", d->socket, "--state-dir", state,
			 "--logdir", (char *)logdir, NULL };
	d->pid = fork();
	if (d->pid == 0) {
		/* Its own process group: Ctrl-C on the terminal is the command's,
		 * and ringprof stops the daemon after the session. */
		setpgid(0, 0);
		sigprocmask(SIG_SETMASK, &unblocked, NULL);
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(exe, argv);
		fprintf(stderr, "cannot run %s: %s\n", exe, strerror(errno));
		_exit(127);
	}
	close(logfd);
	if (d->pid < 0) {
		fprintf(stderr, "ringprof run: cannot fork: %s\n", strerror(errno));
		return -errno;
	}
	struct rp_client_opts co = { .socket_path = d->socket, .client_name = "cli",
				     .timeout_ms = 5000 };
	struct rp_err err = { 0 };
	if (rp_client_new(&co, client, &err) < 0) {
		fprintf(stderr, "ringprof run: %s\n", err.msg);
		return -ENOMEM;
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		json_t *st = NULL;
		int rc = rp_client_call(*client, "GET", "/v1/status", NULL, &st, &err);
		json_decref(st);
		if (rc == 0)
			break;
		int status;
		bool dead = waitpid(d->pid, &status, WNOHANG) == d->pid;
		if (dead || ms_since(&t0) > DAEMON_START_MS) {
			fprintf(stderr, "ringprof run: the private ringprofd (%s) %s; its log:\n", exe,
				dead ? "exited" : "did not answer in time");
			print_log(d->log);
			if (dead)
				d->pid = 0;
			return -EIO;
		}
		usleep(20000);
	}
	fprintf(stderr, "ringprof run: no ringprofd on the socket: started a private one "
			"(sessions in %s)\n", logdir);
	return 0;
}

/* Asks the private daemon to stop (POST /v1/shutdown), waits, and removes
 * its temporary directory. */
static void stop_private(struct private_daemon *d, struct rp_client *client)
{
	if (d->pid > 0) {
		json_t *r = NULL;
		struct rp_err err = { 0 };
		if (!client || rp_client_call(client, "POST", "/v1/shutdown", NULL, &r, &err) < 0)
			(void)kill(d->pid, SIGTERM);
		json_decref(r);
		if (wait_exit(d->pid, DAEMON_STOP_MS) < 0) {
			fprintf(stderr, "ringprof run: the private ringprofd did not exit in %ds: "
					"killing it\n", DAEMON_STOP_MS / 1000);
			(void)kill(d->pid, SIGKILL);
			(void)waitpid(d->pid, NULL, 0);
		}
	}
	if (d->dir[0])
		(void)nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the command's process tree ----------------------------------------- */

struct tree {
	uint32_t pids[RP_FILTER_MAX];
	unsigned n;
	bool overflow;
};

static bool in_tree(const struct tree *t, uint32_t pid)
{
	for (unsigned i = 0; i < t->n; i++)
		if (t->pids[i] == pid)
			return true;
	return false;
}

static void tree_add(struct tree *t, uint32_t pid)
{
	if (in_tree(t, pid))
		return;
	if (t->n == RP_FILTER_MAX) {
		if (!t->overflow)
			fprintf(stderr, "ringprof run: the command has more than %d processes: the "
					"session keeps the first %d\n", RP_FILTER_MAX, RP_FILTER_MAX);
		t->overflow = true;
		return;
	}
	t->pids[t->n++] = pid;
}

/* The parent of pid from /proc/PID/stat; 0 when it is gone. */
static uint32_t parent_of(uint32_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
	const char *end = strrchr(buf, ')');
	unsigned ppid = 0;
	char state;
	return end && sscanf(end + 1, " %c %u", &state, &ppid) == 2 ? ppid : 0;
}

/* Adds the descendants of the processes in t that run now; repeats until
 * none is new, as a grandchild may come before its parent in /proc. */
static void tree_scan(struct tree *t)
{
	for (unsigned before = 0; before != t->n && !t->overflow;) {
		before = t->n;
		DIR *proc = opendir("/proc");
		for (struct dirent *e; proc && (e = readdir(proc));) {
			char *end;
			unsigned long pid = strtoul(e->d_name, &end, 10);
			if (*end || !pid || in_tree(t, (uint32_t)pid))
				continue;
			uint32_t ppid = parent_of((uint32_t)pid);
			if (ppid && in_tree(t, ppid))
				tree_add(t, (uint32_t)pid);
		}
		if (proc)
			closedir(proc);
	}
}

/* ---- the run ------------------------------------------------------------- */

/* Runs the command in its own process group (the terminal's foreground one
 * when there is a terminal, so that Ctrl-C reaches it once), passing on
 * the signals ringprof gets, following its process tree; its wait status. */
static int run_command(char **cmd, struct tree *t)
{
	int tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
	pid_t child = fork();
	if (child == 0) {
		setpgid(0, 0);
		if (tty >= 0) {
			signal(SIGTTOU, SIG_IGN);
			(void)tcsetpgrp(tty, getpid());
			signal(SIGTTOU, SIG_DFL);
		}
		sigprocmask(SIG_SETMASK, &unblocked, NULL);
		execvp(cmd[0], cmd);
		fprintf(stderr, "ringprof run: cannot run %s: %s\n", cmd[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	if (child < 0) {
		fprintf(stderr, "ringprof run: cannot fork: %s\n", strerror(errno));
		return -1;
	}
	setpgid(child, child); /* also here: no signal may find it unset */
	tree_add(t, (uint32_t)child);
	int status = 0;
	struct timespec poll = { 0, TREE_POLL_NS };
	for (;;) {
		pid_t done = waitpid(child, &status, WNOHANG);
		if (done == child)
			break;
		tree_scan(t);
		int sig = sigtimedwait(&waited, NULL, &poll);
		if (sig > 0 && sig != SIGCHLD)
			(void)kill(-child, sig);
	}
	if (tty >= 0) {
		signal(SIGTTOU, SIG_IGN);
		(void)tcsetpgrp(tty, getpgrp());
		signal(SIGTTOU, SIG_DFL);
	}
	return status;
}

/* POST /v1/sessions for the command; its id in id. */
static int start_session(struct rp_client *c, const struct run_opts *o, char *id, size_t len)
{
	char reason[256];
	size_t n = (size_t)snprintf(reason, sizeof(reason), "ringprof run:");
	for (char **a = o->cmd; *a && n < sizeof(reason); a++)
		n += (size_t)snprintf(reason + n, sizeof(reason) - n, " %s", *a);
	json_t *body = json_object(), *s = NULL;
	if (o->name)
		json_object_set_new(body, "name", json_string(o->name));
	if (o->run)
		json_object_set_new(body, "run", json_string(o->run));
	if (o->sample_hz)
		json_object_set_new(body, "cpu_sample_hz", json_integer(o->sample_hz));
	/* Not UTF-8 (a command line may be anything): no reason. */
	(void)json_object_set_new(body, "reason", json_string(reason));
	struct rp_err err = { 0 };
	int rc = rp_client_call(c, "POST", "/v1/sessions", body, &s, &err);
	json_decref(body);
	if (rc < 0) {
		fprintf(stderr, "ringprof run: cannot start a session: %s\n", err.msg);
		return rc;
	}
	snprintf(id, len, "%s", json_string_value(json_object_get(s, "id")));
	json_decref(s);
	return 0;
}

/* POST /v1/sessions/ID/stop with the process tree; prints the session's
 * path and summary. */
static int stop_session(struct rp_client *c, const char *id, const struct tree *t)
{
	char path[128], shown[1024];
	snprintf(path, sizeof(path), "/v1/sessions/%s/stop", id);
	json_t *pids = json_array(), *s = NULL;
	for (unsigned i = 0; i < t->n; i++)
		json_array_append_new(pids, json_integer(t->pids[i]));
	json_t *body = json_pack("{s:o}", "pids", pids);
	struct rp_err err = { 0 };
	int rc = rp_client_call(c, "POST", path, body, &s, &err);
	json_decref(body);
	if (rc < 0) {
		fprintf(stderr, "ringprof run: cannot stop session %s: %s\n", id,
			rp_text_escape(err.msg, shown, sizeof(shown)));
		return rc;
	}
	const char *dir = json_string_value(json_object_get(s, "path"));
	const char *state = json_string_value(json_object_get(s, "state"));
	fprintf(stderr, "\nringprof run: session %s (%s): %s\n", id, state ? state : "?",
		rp_text_escape(dir ? dir : "-", shown, sizeof(shown)));
	if (dir && rp_summary_write(dir, NULL, stderr, &err) < 0)
		fprintf(stderr, "ringprof run: no summary: %s\n",
			rp_text_escape(err.msg, shown, sizeof(shown)));
	rc = state && !strcmp(state, "failed") ? -EIO : 0;
	json_decref(s);
	return rc;
}

int rp_cli_run(int argc, char **argv, const char *socket)
{
	struct run_opts o = { .socket = socket };
	int rc = parse_opts(argc, argv, &o);
	if (rc >= 0)
		return rc;
	bool logdir_given = o.logdir != NULL;
	if (!o.logdir)
		o.logdir = "ringprof-sessions";
	char sockbuf[PATH_MAX];
	if (!o.socket && !(o.socket = rp_default_socket_path(sockbuf, sizeof(sockbuf)))) {
		fprintf(stderr, "ringprof run: the default socket path is too long: give --socket\n");
		return EXIT_FAILURE;
	}

	block_signals();
	struct rp_client *client = NULL;
	struct rp_client_opts co = { .socket_path = o.socket, .client_name = "cli" };
	struct rp_err err = { 0 };
	struct private_daemon priv = { 0 };
	json_t *st = NULL;
	if (rp_client_new(&co, &client, &err) < 0) {
		fprintf(stderr, "ringprof run: %s\n", err.msg);
		return EXIT_FAILURE;
	}
	rc = rp_client_call(client, "GET", "/v1/status", NULL, &st, &err);
	json_decref(st);
	if (rc == -ENOENT || rc == -ECONNREFUSED) {
		rp_client_free(client);
		client = NULL;
		rc = start_private(&priv, o.logdir, &client);
		o.socket = priv.socket;
	} else if (rc == 0 && logdir_given) {
		fprintf(stderr, "ringprof run: ringprofd runs on %s: the session goes to its log "
				"directory, not --logdir %s\n", o.socket, o.logdir);
	} else if (rc < 0) {
		/* There is a daemon, and it refused us (permissions): starting
		 * another would hide the fix. */
		fprintf(stderr, "ringprof run: %s\n", err.msg);
	}

	int status = -1;
	char id[NAME_MAX_LEN + 1];
	if (rc == 0 && setenv("RINGPROF_SOCKET", o.socket, 1) < 0)
		rc = -errno;
	for (size_t i = 0; rc == 0 && i < NCOLLECTORS; i++)
		if (!o.off[i] && (rc = collectors[i].setup()) < 0)
			fprintf(stderr, "ringprof run: cannot set up %s: %s (--no-%s runs without it)\n",
				collectors[i].name, strerror(-rc), collectors[i].name);
	if (rc == 0)
		rc = start_session(client, &o, id, sizeof(id));
	struct tree t = { 0 };
	if (rc == 0) {
		status = run_command(o.cmd, &t);
		(void)stop_session(client, id, &t);
	}
	stop_private(&priv, client);
	rp_client_free(client);
	if (status < 0)
		return EXIT_FAILURE;
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}
