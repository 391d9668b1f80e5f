/* ringprof: the command line for ringprofd's control API (docs/api.md).
 * Exit status: 0 done, 1 the daemon refused or could not be reached,
 * 2 a usage error. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "clock.h"
#include "doctor.h"
#include "parse.h"
#include "export.h"
#include "paths.h"
#include "reader.h"
#include "run.h"
#include "session.h"
#include "summary.h"
#include "text.h"
#include "names.h"

#define EXIT_USAGE 2
#define NAME_MAX_LEN (RP_NAME_LEN - 1)
#define REASON_MAX_LEN 255
#define CPU_SAMPLE_HZ_MAX 10000
#define POLL_INTERVAL_MS 100
/* How long past its duration a capture may take to complete. */
#define CAPTURE_GRACE_NS 30000000000ull
/* How long --wait waits for a session's exports by default. */
#define WAIT_TIMEOUT_DEFAULT "60s"
/* Hosts asked at once by snapshot --hosts. */
#define FANOUT_THREADS 64
/* How long `shutdown` waits for the daemon to seal its rings and exit. */
#define SHUTDOWN_WAIT_NS 60000000000ull

/* Every option a command may take; each command lists the ones it does. */
enum opt {
	O_LAST, O_END, O_NAME, O_RUN, O_REASON, O_DURATION, O_SOCKET, O_JSON, O_HELP, O_VERSION,
	O_HOSTS, O_TOKEN_FILE, O_CPU_HZ, O_FORMAT, O_OUTPUT, O_HOST, O_GROUP, O_PID, O_COMM,
	O_WAIT, O_WAIT_TIMEOUT, O_CGROUP, N_OPTS
};
/* getopt_long returns OPT_BASE + enum opt, clear of short option letters. */
#define OPT_BASE 256

static const struct option all_options[N_OPTS] = {
	[O_LAST] = { "last", required_argument, NULL, OPT_BASE + O_LAST },
	[O_END] = { "end", required_argument, NULL, OPT_BASE + O_END },
	[O_NAME] = { "name", required_argument, NULL, OPT_BASE + O_NAME },
	[O_RUN] = { "run", required_argument, NULL, OPT_BASE + O_RUN },
	[O_REASON] = { "reason", required_argument, NULL, OPT_BASE + O_REASON },
	[O_DURATION] = { "duration", required_argument, NULL, OPT_BASE + O_DURATION },
	[O_SOCKET] = { "socket", required_argument, NULL, OPT_BASE + O_SOCKET },
	[O_JSON] = { "json", no_argument, NULL, OPT_BASE + O_JSON },
	[O_HELP] = { "help", no_argument, NULL, 'h' },
	[O_VERSION] = { "version", no_argument, NULL, OPT_BASE + O_VERSION },
	[O_HOSTS] = { "hosts", required_argument, NULL, OPT_BASE + O_HOSTS },
	[O_TOKEN_FILE] = { "token-file", required_argument, NULL, OPT_BASE + O_TOKEN_FILE },
	[O_CPU_HZ] = { "cpu-sample-hz", required_argument, NULL, OPT_BASE + O_CPU_HZ },
	[O_FORMAT] = { "format", required_argument, NULL, OPT_BASE + O_FORMAT },
	[O_OUTPUT] = { "output", required_argument, NULL, 'o' },
	[O_HOST] = { "host", required_argument, NULL, OPT_BASE + O_HOST },
	[O_GROUP] = { "group", required_argument, NULL, OPT_BASE + O_GROUP },
	[O_PID] = { "pid", required_argument, NULL, OPT_BASE + O_PID },
	[O_COMM] = { "comm", required_argument, NULL, OPT_BASE + O_COMM },
	[O_WAIT] = { "wait", no_argument, NULL, OPT_BASE + O_WAIT },
	[O_WAIT_TIMEOUT] = { "wait-timeout", required_argument, NULL, OPT_BASE + O_WAIT_TIMEOUT },
	[O_CGROUP] = { "cgroup", required_argument, NULL, OPT_BASE + O_CGROUP },
};

#define BIT(o) (1u << (o))
#define COMMON_OPTS (BIT(O_SOCKET) | BIT(O_JSON) | BIT(O_HELP))
/* Commands that print text of their own, not the daemon's answer. */
#define TEXT_OPTS (BIT(O_SOCKET) | BIT(O_HELP))
#define NAMING_OPTS (BIT(O_NAME) | BIT(O_RUN) | BIT(O_REASON))
#define SESSION_OPTS (NAMING_OPTS | BIT(O_CPU_HZ))
/* Looking at one job: may be given more than once. */
#define FILTER_OPTS (BIT(O_PID) | BIT(O_COMM))
/* The job a session keeps: the daemon applies it when it writes the session. */
#define JOB_OPTS (BIT(O_PID) | BIT(O_CGROUP))
#define JOB_HELP \
	"  --pid PID,...     keep only these processes' events in the session\n" \
	"                    (host-wide counters stay).  Repeatable\n" \
	"  --cgroup PATH     and those of the processes in this cgroup and below,\n" \
	"                    as /proc/PID/cgroup shows it (\"0::PATH\")\n"
/* Waiting for the session's exports (snapshot, stop, capture). */
#define WAIT_OPTS (BIT(O_WAIT) | BIT(O_WAIT_TIMEOUT))
#define WAIT_HELP \
	"  --wait            return once the session's exports ([sessions] exports\n" \
	"                    of the daemon) are written or failed; print each file\n" \
	"                    with its size; exit 1 when one failed\n" \
	"  --wait-timeout D  give up waiting after D (default " WAIT_TIMEOUT_DEFAULT "; exit 1)\n"
#define FILTER_HELP \
	"  --pid PID,...     only these processes' events (CPU samples, ranges,\n" \
	"                    GPU work); host-wide counters stay.  Repeatable\n" \
	"  --comm NAME       and those of the processes of this name (comm, as ps\n" \
	"                    shows it: its first 15 characters).  Repeatable\n"
struct args {
	const char *val[N_OPTS];  /* option values; O_JSON non-NULL when given */
	struct rp_reader_filter filter; /* --pid and --comm, each time given */
	char **pos;               /* positional arguments */
	int npos;
	struct rp_client *client;
	uint64_t wait_ns;         /* --wait-timeout, with --wait */
};

struct command {
	const char *name;
	const char *synopsis;
	const char *help;
	unsigned opts;
	int npos;                 /* positional arguments required */
	int (*run)(const struct command *cmd, struct args *a);
};

/* Commands that parse their own arguments (argv[0] is the command's name)
 * and reach the daemon their own way; socket: the global --socket. */
static const struct {
	const char *name;
	int (*main)(int argc, char **argv, const char *socket);
} own_commands[] = {
	{ "run", rp_cli_run },
	{ "doctor", rp_cli_doctor },
};

static const char global_usage[] =
	"usage: ringprof [--socket PATH] [--json] COMMAND [OPTIONS]\n"
	"\n"
	"Drive ringprofd, the always-on profiler: freeze the recent past into a\n"
	"session, or record from now on.\n"
	"\n"
	"commands:\n"
	"  run -- CMD profile one command: a session from its start to its exit\n"
	"  doctor     check this host's set-up, each problem with its fix\n"
	"  status     the rings: fill, horizon, events, drops; collectors; open sessions\n"
	"  snapshot   save the last N seconds (--last 30s) as a session\n"
	"  start      start a session now; prints its id\n"
	"  stop ID    stop a session and show what it holds\n"
	"  capture    record for --duration and wait for the result\n"
	"  sessions   list sessions\n"
	"  summary S  what a session holds\n"
	"  export S   write a session as XProf, Perfetto, pprof, JSON, summary or\n"
	"             flame graph files\n"
	"  keep ID    keep a session: retention never deletes it\n"
	"  shutdown   stop the daemon on the socket (its owner or root)\n"
	"\n"
	"options:\n"
	"  --socket PATH  ringprofd's socket (default %s, from $RINGPROF_SOCKET when set)\n"
	"  --json         print the daemon's JSON answer instead of a summary\n"
	"  -h, --help     this help; 'ringprof COMMAND --help' for one command\n"
	"  --version      print the version\n";

static const char short_usage[] =
	"usage: ringprof [--socket PATH] [--json] COMMAND [OPTIONS]\n"
	"commands: run, doctor, status, snapshot, start, stop, capture, sessions, summary, export, keep,\n"
	"          shutdown\n"
	"Try 'ringprof --help'.\n";

static void print_global_usage(void)
{
	char buf[256];
	const char *def = rp_default_socket_path(buf, sizeof(buf));
	printf(global_usage, def ? def : "a path too long to show");
}

static void print_command_usage(const struct command *cmd, FILE *out)
{
	fprintf(out, "usage: ringprof %s %s\n", cmd->name, cmd->synopsis);
	if (out == stdout)
		fprintf(out, "\n%s"
			"  --socket PATH     ringprofd's socket\n"
			"%s"
			"  -h, --help        this help\n", cmd->help,
			cmd->opts & BIT(O_JSON) ? "  --json            print the daemon's JSON answer\n" : "");
	else
		fprintf(out, "Try 'ringprof %s --help'.\n", cmd->name);
}

/* s escaped for the terminal (text.h): what the daemon sends back quotes
 * names, reasons and paths others chose.  The result lives until a few
 * more calls on the same thread, enough for one printf. */
static const char *shown(const char *s)
{
	static _Thread_local char bufs[8][1024];
	static _Thread_local unsigned next;
	char *buf = bufs[next++ % 8];
	return rp_text_escape(s, buf, sizeof(bufs[0]));
}

static int usage_error(const struct command *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int usage_error(const struct command *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ringprof%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cmd)
		print_command_usage(cmd, stderr);
	else
		fputs(short_usage, stderr);
	return EXIT_USAGE;
}

/* A value the user typed that does not pass the same check the daemon
 * makes: say so without a round trip. */
static int bad_value(const struct command *cmd, const char *option, const struct rp_err *err)
{
	fprintf(stderr, "ringprof %s: %s: %s\n", cmd->name, option, shown(err->msg));
	return EXIT_USAGE;
}

static int daemon_error(const struct rp_err *err)
{
	fprintf(stderr, "ringprof: %s\n", shown(err->msg));
	return EXIT_FAILURE;
}

/* The option getopt just refused, as typed: a short one is in optopt
 * (it may sit inside a cluster such as -xh), a long one in argv. */
static const char *typed_option(char **argv, int short_opt)
{
	static char text[3];
	if (!short_opt)
		return argv[optind - 1];
	snprintf(text, sizeof(text), "-%c", short_opt);
	return text;
}

/* The options in mask, for cmd (NULL: those before the command) into a;
 * -1 to go on, else the exit status. */
static int get_options(const struct command *cmd, unsigned mask, int argc, char **argv,
		       struct args *a)
{
	struct option longopts[N_OPTS + 1];
	size_t n = 0;
	for (int o = 0; o < N_OPTS; o++)
		if (mask & BIT(o))
			longopts[n++] = all_options[o];
	longopts[n] = (struct option){ 0 };
	optind = 0;  /* GNU getopt: start over, this is a new argv */
	opterr = 0;
	int c;
	struct rp_err err = { 0 };
	/* '+' before the command: stop there, its options are its own. */
	const char *shortopts = !cmd ? "+:h" : mask & BIT(O_OUTPUT) ? ":ho:" : ":h";
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			a->val[O_OUTPUT] = optarg;
			break;
		case 'h':
			if (cmd)
				print_command_usage(cmd, stdout);
			else
				print_global_usage();
			return EXIT_SUCCESS;
		case OPT_BASE + O_VERSION:
			printf("ringprof %s\n", RINGPROF_VERSION);
			return EXIT_SUCCESS;
		case ':':
			return usage_error(cmd, "option '%s' needs a value", typed_option(argv, 0));
		case '?':
			return usage_error(cmd, "unknown option '%s'", typed_option(argv, optopt));
		case OPT_BASE + O_PID:
			if (rp_reader_filter_add_pids(&a->filter, optarg, &err) < 0)
				return usage_error(cmd, "--pid: %s", err.msg);
			break;
		case OPT_BASE + O_COMM:
			if (rp_reader_filter_add_comm(&a->filter, optarg, &err) < 0)
				return usage_error(cmd, "--comm: %s", err.msg);
			break;
		default:
			a->val[c - OPT_BASE] = optarg ? optarg : "";
		}
	}
	return -1;
}

/* A command's options and arguments into a; -1 to go on, else the exit
 * status. */
static int parse_args(const struct command *cmd, int argc, char **argv, struct args *a)
{
	int rc = get_options(cmd, cmd->opts, argc, argv, a);
	if (rc >= 0)
		return rc;
	a->pos = argv + optind;
	a->npos = argc - optind;
	if (a->npos > cmd->npos)
		return usage_error(cmd, "unexpected argument '%s'", a->pos[cmd->npos]);
	if (a->npos < cmd->npos)
		return usage_error(cmd, "missing argument %s", cmd->synopsis);
	return -1;
}

/* ---- formatting ---- */

static json_int_t jint(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "-";
}

static const char *jtext(const json_t *o, const char *key)
{
	return shown(jstr(o, key));
}

/* A length for people: to the millisecond once over one; "-" for none. */
static void fmt_len(uint64_t ns, char *out, size_t len)
{
	if (ns == 0)
		snprintf(out, len, "-");
	else
		rp_format_duration(ns >= 1000000 ? (ns + 500000) / 1000000 * 1000000 : ns, out, len);
}

static void fmt_seconds(double s, char *out, size_t len)
{
	fmt_len(s > 0 ? (uint64_t)(s * 1e9) : 0, out, len);
}

/* Wall-clock time to the millisecond: "2026-11-22T14:03:07.250Z". */
static void fmt_time(int64_t wall_ns, char *out, size_t len)
{
	char full[48];
	rp_format_time(wall_ns, full, sizeof(full));
	snprintf(out, len, "%.23sZ", full);
}

/* Columns of text, aligned on print; align[i] 'r' right-aligns column i. */
struct table {
	const char *align;
	size_t ncols, nrows;
	char **cells;
};

static void table_row(struct table *t, ...)
{
	char **cells = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*cells));
	if (!cells) {
		perror("ringprof");
		exit(EXIT_FAILURE);
	}
	t->cells = cells;
	va_list ap;
	va_start(ap, t);
	for (size_t i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		if (!(cells[t->nrows * t->ncols + i] = rp_text_escape_dup(s ? s : "-"))) {
			perror("ringprof");
			exit(EXIT_FAILURE);
		}
	}
	va_end(ap);
	t->nrows++;
}

static void table_print(struct table *t)
{
	size_t width[16] = { 0 };
	for (size_t i = 0; i < t->nrows * t->ncols; i++) {
		size_t n = strlen(t->cells[i] ? t->cells[i] : "");
		if (n > width[i % t->ncols])
			width[i % t->ncols] = n;
	}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			bool last = c + 1 == t->ncols;
			int w = (int)width[c];
			if (t->align[c] == 'r')
				printf("%*s%s", w, s, last ? "" : "  ");
			else
				printf("%-*s%s", last ? 0 : w, s, last ? "" : "  ");
		}
		putchar('\n');
	}
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
}

static uint64_t window_len(const json_t *w)
{
	json_int_t s = jint(w, "start_wall_ns"), e = jint(w, "end_wall_ns");
	return e > s ? (uint64_t)(e - s) : 0;
}

/* A window's line; why, in parentheses, when given. */
static void print_window(const char *label, const json_t *w, const char *why)
{
	char len[32], from[32], to[32];
	fmt_len(window_len(w), len, sizeof(len));
	fmt_time(jint(w, "start_wall_ns"), from, sizeof(from));
	fmt_time(jint(w, "end_wall_ns"), to, sizeof(to));
	printf("%-10s %-8s %s .. %s%s%s%s\n", label, len, from, to, why ? " (" : "", why ? why : "",
	       why ? ")" : "");
}

/* Why covered (what the rings held) is shorter than requested (what was
 * asked), into buf; NULL when it is not (to the millisecond). */
static const char *short_reason(const json_t *req, const json_t *cov, char *buf, size_t len)
{
	uint64_t want = window_len(req), got = window_len(cov);
	if (!want || !got || got + 1000000 >= want)
		return NULL;
	char held[32], up[32] = "";
	fmt_len(got, held, sizeof(held));
	/* The host clock starts at boot: a window asked to start before it
	 * begins at start_ns 0 (see docs/api.md). */
	json_int_t boot_wall = jint(req, "end_wall_ns") - jint(req, "end_ns");
	if (jint(req, "start_ns") == 0 && jint(req, "start_wall_ns") < boot_wall)
		fmt_len((uint64_t)(jint(req, "end_wall_ns") - boot_wall), up, sizeof(up));
	snprintf(buf, len, "%s%s%sthe rings hold %s", up[0] ? "the host booted " : "", up,
		 up[0] ? " before the window's end; " : "", held);
	return buf;
}

/* A session object: what it is, where, the window asked for and the one
 * the rings could cover (with why, when short), and per-device counts. */
static int print_session(const json_t *s)
{
	printf("%-10s %s (%s, %s)\n", "session", jtext(s, "id"), jtext(s, "kind"), jtext(s, "state"));
	printf("%-10s %s\n", "run", jtext(s, "run"));
	printf("%-10s %s\n", "path", jtext(s, "path"));
	const json_t *req = json_object_get(s, "requested"), *cov = json_object_get(s, "covered");
	char why[160];
	if (req && window_len(req))
		print_window("requested", req, NULL);
	if (cov && window_len(cov))
		print_window("covered", cov, req ? short_reason(req, cov, why, sizeof(why)) : NULL);
	else if (!strcmp(jstr(s, "state"), "complete"))
		printf("%-10s nothing: the rings held no events in that window\n", "covered");
	const json_t *devs = json_object_get(s, "devices");
	if (json_array_size(devs)) {
		struct table t = { .align = "lrrrr", .ncols = 5 };
		table_row(&t, "DEVICE", "EVENTS", "CHUNKS", "DROPPED", "SIZE");
		size_t i;
		const json_t *d;
		json_array_foreach(devs, i, d) {
			char ev[24], ch[24], dr[24], sz[24];
			snprintf(ev, sizeof(ev), "%lld", (long long)jint(d, "events"));
			snprintf(ch, sizeof(ch), "%lld", (long long)jint(d, "chunks"));
			snprintf(dr, sizeof(dr), "%lld", (long long)jint(d, "dropped"));
			rp_format_size((uint64_t)jint(d, "bytes"), sz, sizeof(sz));
			table_row(&t, jstr(d, "device"), ev, ch, dr, sz);
		}
		putchar('\n');
		table_print(&t);
		table_free(&t);
	}
	if (!strcmp(jstr(s, "state"), "failed")) {
		fprintf(stderr, "ringprof: session %s failed: %s\n", jtext(s, "id"), jtext(s, "error"));
		return EXIT_FAILURE;
	}
	return EXIT_SUCCESS;
}

static int print_json(json_t *j)
{
	if (j && json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) == 0)
		putchar('\n');
	return EXIT_SUCCESS;
}

/* ---- talking to the daemon ---- */

static int call(struct args *a, const char *method, const char *path, json_t *body, json_t **resp)
{
	struct rp_err err = { 0 };
	int rc = rp_client_call(a->client, method, path, body, resp, &err);
	json_decref(body);
	return rc < 0 ? daemon_error(&err) : EXIT_SUCCESS;
}

/* Checks --name/--run/--reason and adds them to body. */
static int add_naming(const struct command *cmd, const struct args *a, json_t *body)
{
	struct rp_err err = { 0 };
	if (a->val[O_NAME] && rp_check_name(a->val[O_NAME], NAME_MAX_LEN, "session name", &err) < 0)
		return bad_value(cmd, "--name", &err);
	if (a->val[O_RUN] && rp_check_name(a->val[O_RUN], NAME_MAX_LEN, "run name", &err) < 0)
		return bad_value(cmd, "--run", &err);
	if (a->val[O_REASON] && strlen(a->val[O_REASON]) > REASON_MAX_LEN) {
		rp_err_set(&err, -EINVAL, "%zu bytes long: keep it to %d bytes",
			   strlen(a->val[O_REASON]), REASON_MAX_LEN);
		return bad_value(cmd, "--reason", &err);
	}
	static const struct {
		enum opt opt;
		const char *field;
	} fields[] = { { O_NAME, "name" }, { O_RUN, "run" }, { O_REASON, "reason" } };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (a->val[fields[i].opt] && json_object_set_new(body, fields[i].field,
								 json_string(a->val[fields[i].opt])) < 0)
			return usage_error(cmd, "%s is not valid UTF-8", fields[i].field);
	return -1;
}

/* Adds --pid and --cgroup to a request's body. */
static void add_job_opts(const struct args *a, json_t *body)
{
	if (a->filter.npids) {
		json_t *pids = json_array();
		for (unsigned i = 0; i < a->filter.npids; i++)
			json_array_append_new(pids, json_integer(a->filter.pids[i]));
		json_object_set_new(body, "pids", pids);
	}
	if (a->val[O_CGROUP])
		json_object_set_new(body, "cgroup", json_string(a->val[O_CGROUP]));
}

/* Checks --name/--run/--reason and --cpu-sample-hz and adds them to the
 * body of POST /v1/sessions. */
static int add_session_opts(const struct command *cmd, const struct args *a, json_t *body)
{
	unsigned hz;
	struct rp_err err = { 0 };
	if (a->val[O_CPU_HZ]) {
		if (rp_parse_uint(a->val[O_CPU_HZ], 1, CPU_SAMPLE_HZ_MAX, &hz, &err) < 0)
			return bad_value(cmd, "--cpu-sample-hz", &err);
		json_object_set_new(body, "cpu_sample_hz", json_integer(hz));
	}
	add_job_opts(a, body);
	return add_naming(cmd, a, body);
}

/* Checks a duration option; the daemon gets the text as typed. */
static int check_duration(const struct command *cmd, const char *option, const char *text,
			  uint64_t *ns)
{
	struct rp_err err = { 0 };
	return rp_parse_duration(text, ns, &err) < 0 ? bad_value(cmd, option, &err) : -1;
}

static int cmd_status(const struct command *cmd, struct args *a)
{
	(void)cmd;
	json_t *r = NULL;
	int rc = call(a, "GET", "/v1/status", NULL, &r);
	if (rc || a->val[O_JSON]) {
		if (!rc)
			print_json(r);
		json_decref(r);
		return rc;
	}
	char up[32];
	fmt_seconds(json_number_value(json_object_get(r, "uptime_s")), up, sizeof(up));
	printf("ringprofd %s on %s, pid %lld, up %s\n", jtext(r, "version"), jtext(r, "host"),
	       (long long)jint(r, "pid"), up);
	printf("rings in %s, sessions in %s\n\n", jtext(r, "state_dir"), jtext(r, "logdir"));

	struct table t = { .align = "lrrrrrrl", .ncols = 8 };
	table_row(&t, "DEVICE", "FILL", "HORIZON", "EVENTS", "DROPPED", "PRODUCERS", "PROCESSES",
		  "USED");
	size_t i;
	const json_t *ring;
	json_array_foreach(json_object_get(r, "rings"), i, ring) {
		char fill[16], hor[32], ev[24], dr[24], pr[16], seen[16], used[32], budget[32],
			both[72];
		snprintf(fill, sizeof(fill), "%.1f%%", json_number_value(json_object_get(ring, "fill")) * 100);
		fmt_seconds(json_number_value(json_object_get(ring, "horizon_s")), hor, sizeof(hor));
		snprintf(ev, sizeof(ev), "%lld", (long long)jint(ring, "events"));
		snprintf(dr, sizeof(dr), "%lld", (long long)jint(ring, "dropped"));
		snprintf(pr, sizeof(pr), "%lld", (long long)jint(ring, "producers"));
		snprintf(seen, sizeof(seen), "%lld", (long long)jint(ring, "processes_seen"));
		rp_format_size((uint64_t)jint(ring, "bytes_used"), used, sizeof(used));
		rp_format_size((uint64_t)jint(ring, "budget_bytes"), budget, sizeof(budget));
		snprintf(both, sizeof(both), "%s of %s", used, budget);
		table_row(&t, jstr(ring, "device"), fill, hor, ev, dr, pr, seen, both);
	}
	if (t.nrows > 1)
		table_print(&t);
	else
		printf("no rings yet: they appear when a producer connects\n");
	table_free(&t);
	/* Collectors in workloads that left the work to another tool. */
	json_array_foreach(json_object_get(r, "rings"), i, ring) {
		size_t k;
		const json_t *a;
		json_array_foreach(json_object_get(ring, "stood_aside"), k, a)
			printf("%s: pid %lld: %s: another tool records it\n", jtext(ring, "device"),
			       (long long)jint(a, "pid"), jtext(a, "thread"));
	}

	/* A collector that does not run says why, and the fix. */
	const json_t *col;
	json_array_foreach(json_object_get(r, "collectors"), i, col) {
		if (i == 0)
			printf("\ncollectors:\n");
		if (!strcmp(jstr(col, "state"), "running") && json_object_get(col, "frequency_hz"))
			printf("  %s: running at %lld Hz, %lld events, %lld lost\n", jtext(col, "name"),
			       (long long)jint(col, "frequency_hz"), (long long)jint(col, "events"),
			       (long long)jint(col, "lost"));
		else if (!strcmp(jstr(col, "state"), "running"))
			printf("  %s: running, %lld events, %lld lost\n", jtext(col, "name"),
			       (long long)jint(col, "events"), (long long)jint(col, "lost"));
		else
			printf("  %s: %s: %s\n", jtext(col, "name"), jtext(col, "state"), jtext(col, "reason"));
		if (json_object_get(col, "detail"))
			printf("    %s\n", jtext(col, "detail"));
	}

	const json_t *open = json_object_get(r, "open_sessions");
	printf("\nopen sessions:");
	if (!json_array_size(open))
		printf(" none");
	json_array_foreach(open, i, ring)
		printf(" %s", shown(json_string_value(ring)));
	putchar('\n');
	json_decref(r);
	return EXIT_SUCCESS;
}

/* Why a ring held less than was asked for, and the lever that keeps
 * more: its max_age when that is what limits it, its budget when it is
 * full, nothing when it has not been recording that long. */
static void print_ring_lever(const json_t *ring)
{
	double fill = json_number_value(json_object_get(ring, "fill"));
	double horizon = json_number_value(json_object_get(ring, "horizon_s"));
	double max_age = json_number_value(json_object_get(ring, "max_age_s"));
	const char *dev = jstr(ring, "device");
	char hor[32], age[32], budget[32];
	fmt_seconds(horizon, hor, sizeof(hor));
	fmt_seconds(max_age, age, sizeof(age));
	rp_format_size((uint64_t)jint(ring, "budget_bytes"), budget, sizeof(budget));
	if (max_age > 0 && horizon >= 0.9 * max_age)
		printf("  ring %s holds %s, its max_age (%s): raise or remove max_age "
		       "([ring.%s] or [rings])\n", dev, hor, age, dev);
	else if (fill >= 0.9)
		printf("  ring %s is full: its budget of %s holds %s at the current rate: raise "
		       "budget ([ring.%s] or [rings])\n", dev, budget, hor, dev);
	else
		printf("  ring %s holds %s, %.0f%% of its budget: it has not been recording "
		       "longer; it reaches further back as ringprofd keeps running\n", dev, hor,
		       fill * 100);
}

/* A snapshot that covered less than requested: by how much, and why. */
static void print_short_coverage(struct args *a, const json_t *s)
{
	const json_t *req = json_object_get(s, "requested"), *cov = json_object_get(s, "covered");
	if (!req || !cov || !window_len(cov) || window_len(cov) + 1000000 >= window_len(req))
		return;
	/* The covered line said how much; this says why, ring by ring. */
	printf("why: a ring keeps about budget / (compressed bytes per second), up to its "
	       "max_age:\n");
	json_t *r = NULL;
	struct rp_err err = { 0 };
	if (rp_client_call(a->client, "GET", "/v1/status", NULL, &r, &err) < 0) {
		printf("  (ringprof status shows each ring's FILL and HORIZON)\n");
		return;
	}
	size_t i;
	const json_t *ring;
	json_array_foreach(json_object_get(r, "rings"), i, ring)
		print_ring_lever(ring);
	json_decref(r);
}

/* ---- waiting for exports (--wait) ---- */

/* --wait and --wait-timeout into a->wait_ns; -1 to go on, else the exit
 * status. */
static int check_wait(const struct command *cmd, struct args *a)
{
	struct rp_err err = { 0 };
	if (a->val[O_WAIT_TIMEOUT] && !a->val[O_WAIT])
		return usage_error(cmd, "--wait-timeout goes with --wait");
	if (a->val[O_WAIT] && rp_parse_duration(a->val[O_WAIT_TIMEOUT] ? a->val[O_WAIT_TIMEOUT] :
						WAIT_TIMEOUT_DEFAULT, &a->wait_ns, &err) < 0)
		return bad_value(cmd, "--wait-timeout", &err);
	return -1;
}

/* What session s still has to come, in words into buf; false when
 * nothing: it is closed and none of its exports is pending. */
static bool exports_pending(const json_t *s, char *buf, size_t len)
{
	size_t n = 0;
	const char *f;
	json_t *st;
	buf[0] = '\0';
	if (!strcmp(jstr(s, "state"), "open")) {
		snprintf(buf, len, "the session is still open");
		return true;
	}
	json_object_foreach(json_object_get(s, "exports"), f, st)
		if (!strcmp(jstr(st, "state"), "pending") && n < len) {
			int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "the exports ", f);
			n += w > 0 ? (size_t)w : 0;
		}
	return buf[0] != '\0';
}

/* Polls the daemon (client) for session *s until its exports are all
 * written or failed, replacing *s with each answer: polling, not a
 * request held open in the daemon, whose API workers are few.  -ETIMEDOUT
 * after timeout_ns, naming what is pending. */
static int await_exports(struct rp_client *client, json_t **s, uint64_t timeout_ns,
			 struct rp_err *err)
{
	char path[128], pending[256];
	const char *id = jstr(*s, "id");
	if (rp_check_name(id, NAME_MAX_LEN, "session id", err) < 0)
		return -EINVAL;
	snprintf(path, sizeof(path), "/v1/sessions/%s", id);
	uint64_t deadline = rp_clock_now_ns() + timeout_ns;
	while (exports_pending(*s, pending, sizeof(pending))) {
		if (rp_clock_now_ns() >= deadline) {
			char d[32];
			rp_format_duration(timeout_ns, d, sizeof(d));
			return rp_err_set(err, -ETIMEDOUT, "session %s: %s still pending after %s: the "
					  "daemon exports sessions one at a time, in the order they "
					  "closed (ringprof_exports_queued in /metrics); wait longer "
					  "with --wait-timeout", id, pending, d);
		}
		usleep(POLL_INTERVAL_MS * 1000);
		json_t *next = NULL;
		int rc = rp_client_call(client, "GET", path, NULL, &next, err);
		if (rc < 0)
			return rc;
		json_decref(*s);
		*s = next;
	}
	return 0;
}

/* "wrote PATH (SIZE)": an export written, with its size. */
static void print_file(const char *dir, const char *file, uint64_t bytes)
{
	char size[32];
	rp_format_size(bytes, size, sizeof(size));
	printf("wrote %s%s%s (%s)\n", dir ? shown(dir) : "", dir ? "/" : "", shown(file), size);
}

/* Session s's exports as they stand: each file written (text: on
 * stdout), each failure on stderr with the command that retries it.
 * Returns the number failed. */
static size_t print_exports(const json_t *s, bool text)
{
	char host[256], file[300];
	size_t failed = 0;
	const char *f;
	json_t *st;
	snprintf(host, sizeof(host), "%s", jstr(s, "host"));
	rp_session_file_host(host);
	json_object_foreach(json_object_get(s, "exports"), f, st) {
		unsigned mask = 0;
		struct rp_err err = { 0 };
		bool known = rp_export_parse_formats(f, &mask, &err) == 0 && mask && !(mask & (mask - 1));
		snprintf(file, sizeof(file), "%s%s", host,
			 known ? rp_export_suffix((enum rp_export_format)__builtin_ctz(mask)) : "");
		if (!strcmp(jstr(st, "state"), "written") && text) {
			print_file(jstr(s, "path"), file, (uint64_t)jint(st, "bytes"));
		} else if (!strcmp(jstr(st, "state"), "failed")) {
			failed++;
			fprintf(stderr, "ringprof: the %s export of session %s failed: %s (retry: "
				"ringprof export %s --format %s)\n", shown(f), jtext(s, "id"),
				jtext(st, "error"), jtext(s, "path"), shown(f));
		}
	}
	return failed;
}

/* Prints a session answer (or its JSON) and frees it; with --wait, once
 * its exports are done, and then those. */
static int show_session(struct args *a, json_t *s)
{
	struct rp_err err = { 0 };
	int waited = a->val[O_WAIT] ? await_exports(a->client, &s, a->wait_ns, &err) : 0;
	int rc = a->val[O_JSON] ? print_json(s) : print_session(s);
	if (waited < 0)
		rc = daemon_error(&err);
	else if (a->val[O_WAIT] && print_exports(s, !a->val[O_JSON]))
		rc = EXIT_FAILURE;
	if (!a->val[O_JSON])
		print_short_coverage(a, s);
	json_decref(s);
	return rc;
}

/* One host of snapshot --hosts: its request and what came back. */
struct host_call {
	const char *host;         /* as given: "trainer-07:7070" */
	char *base_url;
	json_t *body;             /* each thread encodes its own copy */
	json_t *session;          /* the answer */
	struct rp_err err;
	int rc;
};

struct fanout {
	struct host_call *calls;
	size_t n;
	const char *token;
	uint64_t wait_ns;         /* 0: do not wait for exports */
	atomic_size_t next;
};

static void *fanout_worker(void *arg)
{
	struct fanout *f = arg;
	for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->n;) {
		struct host_call *h = &f->calls[i];
		struct rp_client_opts co = { .base_url = h->base_url, .token = f->token,
					     .client_name = "cli" };
		struct rp_client *client;
		h->rc = rp_client_new(&co, &client, &h->err);
		if (h->rc == 0) {
			h->rc = rp_client_call(client, "POST", "/v1/snapshot", h->body, &h->session,
					       &h->err);
			if (h->rc == 0 && f->wait_ns)
				h->rc = await_exports(client, &h->session, f->wait_ns, &h->err);
			rp_client_free(client);
		}
		if (h->rc == 0 && !strcmp(jstr(h->session, "state"), "failed"))
			h->rc = rp_err_set(&h->err, -EIO, "session %s failed: %s", jstr(h->session, "id"),
					   jstr(h->session, "error"));
	}
	return NULL;
}

/* "host:port" (or a URL) -> base URL. */
static char *base_url_of(const char *host)
{
	char *url;
	if (strstr(host, "://"))
		return strdup(host);
	return asprintf(&url, "http://%s", host) < 0 ? NULL : url;
}

/* Ask every host, FANOUT_THREADS at a time; -errno when no thread starts. */
static int run_fanout(struct fanout *f)
{
	pthread_t threads[FANOUT_THREADS];
	size_t n = 0;
	int rc = 0;
	while (n < f->n && n < FANOUT_THREADS &&
	       (rc = pthread_create(&threads[n], NULL, fanout_worker, f)) == 0)
		n++;
	for (size_t i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return n ? 0 : -rc;
}

/* Each host's session path or error, as a table or JSON; the exit status. */
static int report_hosts(const struct args *a, const struct fanout *f)
{
	size_t failed = 0;
	json_t *results = json_array();
	struct table t = { .align = "ll", .ncols = 2 };
	table_row(&t, "HOST", "RESULT");
	for (size_t i = 0; i < f->n; i++) {
		const struct host_call *h = &f->calls[i];
		json_t *r = json_pack("{s:s}", "host", h->host);
		if (h->rc < 0) {
			failed++;
			json_object_set_new(r, "error", json_string(h->err.msg));
			table_row(&t, h->host, h->err.msg);
		} else {
			json_object_set(r, "session", h->session);
			table_row(&t, h->host, jstr(h->session, "path"));
		}
		json_array_append_new(results, r);
	}
	if (a->val[O_JSON]) {
		json_t *doc = json_pack("{s:O}", "hosts", results);
		print_json(doc);
		json_decref(doc);
	} else {
		table_print(&t);
	}
	for (size_t i = 0; i < f->n && a->val[O_WAIT]; i++)
		if (f->calls[i].rc == 0 && print_exports(f->calls[i].session, !a->val[O_JSON]))
			failed++;
	if (failed)
		fprintf(stderr, "ringprof: %zu of %zu hosts failed\n", failed, f->n);
	table_free(&t);
	json_decref(results);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The same snapshot on every host of --hosts at once: one window (body
 * holds its absolute end) and one name, so that hosts sharing a log
 * directory write one session.  A host that fails does not stop the
 * others. */
static int snapshot_hosts(const struct command *cmd, struct args *a, json_t *body)
{
	char token[256];
	struct rp_err err = { 0 };
	const char *env = getenv("RINGPROF_TOKEN");
	if (a->val[O_TOKEN_FILE]) {
		if (rp_client_read_token(a->val[O_TOKEN_FILE], token, sizeof(token), &err) < 0)
			return bad_value(cmd, "--token-file", &err);
	} else if (env && *env) {
		snprintf(token, sizeof(token), "%s", env);
	} else {
		return usage_error(cmd, "--hosts talks TCP, which needs the daemons' bearer token: "
				   "give --token-file FILE or set RINGPROF_TOKEN");
	}
	struct fanout f = { .token = token, .wait_ns = a->val[O_WAIT] ? a->wait_ns : 0 };
	char *list = strdup(a->val[O_HOSTS]), *save = NULL;
	bool oom = !list;
	for (char *h = list ? strtok_r(list, ",", &save) : NULL; h && !oom;
	     h = strtok_r(NULL, ",", &save)) {
		struct host_call *grown = realloc(f.calls, (f.n + 1) * sizeof(*grown));
		oom = !grown;
		if (grown) {
			f.calls = grown;
			struct host_call *c = &f.calls[f.n++];
			*c = (struct host_call){ .host = h, .base_url = base_url_of(h),
						 .body = json_deep_copy(body) };
			oom = !c->base_url || !c->body;
		}
	}
	int rc;
	if (oom) {
		perror("ringprof");
		rc = EXIT_FAILURE;
	} else if (!f.n) {
		rc = usage_error(cmd, "--hosts names no host: give host:port[,host:port...]");
	} else if ((rc = run_fanout(&f)) < 0) {
		fprintf(stderr, "ringprof: cannot start threads: %s\n", strerror(-rc));
		rc = EXIT_FAILURE;
	} else {
		rc = report_hosts(a, &f);
	}
	for (size_t i = 0; i < f.n; i++) {
		free(f.calls[i].base_url);
		json_decref(f.calls[i].body);
		json_decref(f.calls[i].session);
	}
	free(f.calls);
	free(list);
	return rc;
}

static int cmd_snapshot(const struct command *cmd, struct args *a)
{
	uint64_t ns;
	int64_t end = 0;
	struct rp_err err = { 0 };
	int rc;
	bool hosts = a->val[O_HOSTS] != NULL;
	if (hosts && a->val[O_SOCKET])
		return usage_error(cmd, "give --socket or --hosts, not both");
	if ((rc = check_wait(cmd, a)) >= 0)
		return rc;
	if (a->val[O_LAST] && (rc = check_duration(cmd, "--last", a->val[O_LAST], &ns)) >= 0)
		return rc;
	if (a->val[O_END] && rp_parse_time(a->val[O_END], &end, &err) < 0)
		return bad_value(cmd, "--end", &err);
	/* Every host freezes the same wall-clock window: "now" is taken here,
	 * once, and so is the name. */
	if (hosts && !a->val[O_END]) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		end = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	}
	json_t *body = json_object(), *s = NULL;
	if (a->val[O_LAST])
		json_object_set_new(body, "last", json_string(a->val[O_LAST]));
	if (a->val[O_END] || hosts)
		json_object_set_new(body, "end", json_integer(end));
	add_job_opts(a, body);
	if ((rc = add_naming(cmd, a, body)) >= 0) {
		json_decref(body);
		return rc;
	}
	if (hosts) {
		char id[32];
		rp_session_id_from_time(end, id);
		if (!a->val[O_NAME])
			json_object_set_new(body, "name", json_string(id));
		rc = snapshot_hosts(cmd, a, body);
		json_decref(body);
		return rc;
	}
	if ((rc = call(a, "POST", "/v1/snapshot", body, &s)))
		return rc;
	return show_session(a, s);
}

static int cmd_start(const struct command *cmd, struct args *a)
{
	json_t *body = json_object(), *s = NULL;
	int rc = add_session_opts(cmd, a, body);
	if (rc >= 0) {
		json_decref(body);
		return rc;
	}
	if ((rc = call(a, "POST", "/v1/sessions", body, &s)))
		return rc;
	if (a->val[O_JSON])
		print_json(s);
	else
		printf("%s\n", jtext(s, "id"));
	json_decref(s);
	return EXIT_SUCCESS;
}

/* "/v1/sessions/ID[suffix]" for an id that passes the name rule, so it
 * cannot reshape the URL. */
static int session_path(const struct command *cmd, const char *id, const char *suffix,
			char *out, size_t len)
{
	struct rp_err err = { 0 };
	if (rp_check_name(id, NAME_MAX_LEN, "session id", &err) < 0)
		return bad_value(cmd, "ID", &err);
	snprintf(out, len, "/v1/sessions/%s%s", id, suffix);
	return -1;
}

/* POST /v1/sessions/ID<suffix> for the command's ID with body (taken;
 * may be NULL); the exit status, and on success the answer in *s. */
static int post_to_session(const struct command *cmd, struct args *a, const char *suffix,
			   json_t *body, json_t **s)
{
	char path[128];
	int rc = session_path(cmd, a->pos[0], suffix, path, sizeof(path));
	if (rc >= 0) {
		json_decref(body);
		return rc;
	}
	return call(a, "POST", path, body, s);
}

static int cmd_stop(const struct command *cmd, struct args *a)
{
	json_t *s = NULL;
	int rc = check_wait(cmd, a);
	if (rc >= 0)
		return rc;
	json_t *body = NULL;
	if (a->filter.npids || a->val[O_CGROUP])
		add_job_opts(a, body = json_object());
	rc = post_to_session(cmd, a, "/stop", body, &s);
	return rc ? rc : show_session(a, s);
}

static int cmd_keep(const struct command *cmd, struct args *a)
{
	json_t *s = NULL;
	int rc = post_to_session(cmd, a, "/keep", NULL, &s);
	if (rc)
		return rc;
	if (a->val[O_JSON])
		print_json(s);
	else
		printf("kept %s: retention will not delete it (remove %s/KEEP to undo)\n",
		       jtext(s, "id"), jtext(s, "path"));
	json_decref(s);
	return EXIT_SUCCESS;
}

static int cmd_capture(const struct command *cmd, struct args *a)
{
	if (!a->val[O_DURATION])
		return usage_error(cmd, "give --duration, e.g. --duration 10s");
	uint64_t ns;
	int rc = check_duration(cmd, "--duration", a->val[O_DURATION], &ns);
	if (rc >= 0 || (rc = check_wait(cmd, a)) >= 0)
		return rc;
	json_t *body = json_pack("{s:s}", "duration", a->val[O_DURATION]), *s = NULL;
	if ((rc = add_session_opts(cmd, a, body)) >= 0) {
		json_decref(body);
		return rc;
	}
	if ((rc = call(a, "POST", "/v1/sessions", body, &s)))
		return rc;
	char path[128], id[NAME_MAX_LEN + 1];
	snprintf(id, sizeof(id), "%s", jstr(s, "id"));
	json_decref(s);
	if ((rc = session_path(cmd, id, "", path, sizeof(path))) >= 0)
		return rc;
	if (isatty(STDERR_FILENO)) {
		char d[32];
		rp_format_duration(ns, d, sizeof(d));
		fprintf(stderr, "capturing %s into session %s ...\n", d, id);
	}
	uint64_t deadline = rp_clock_now_ns() + ns + CAPTURE_GRACE_NS;
	for (;;) {
		s = NULL;
		if ((rc = call(a, "GET", path, NULL, &s)))
			return rc;
		if (strcmp(jstr(s, "state"), "open"))
			return show_session(a, s);
		json_decref(s);
		if (rp_clock_now_ns() > deadline) {
			fprintf(stderr, "ringprof: session %s is still open %llus after its %s ended: "
				"the daemon may be stuck; stop it with 'ringprof stop %s'\n",
				id, (unsigned long long)(CAPTURE_GRACE_NS / 1000000000ull),
				a->val[O_DURATION], id);
			return EXIT_FAILURE;
		}
		usleep(POLL_INTERVAL_MS * 1000);
	}
}

static int cmd_sessions(const struct command *cmd, struct args *a)
{
	(void)cmd;
	json_t *r = NULL;
	int rc = call(a, "GET", "/v1/sessions", NULL, &r);
	if (rc || a->val[O_JSON]) {
		if (!rc)
			print_json(r);
		json_decref(r);
		return rc;
	}
	const json_t *list = json_object_get(r, "sessions");
	if (!json_array_size(list)) {
		printf("no sessions yet: make one with 'ringprof snapshot'\n");
		json_decref(r);
		return EXIT_SUCCESS;
	}
	struct table t = { .align = "llllllrrl", .ncols = 9 };
	table_row(&t, "CREATED", "ID", "RUN", "HOST", "KIND", "STATE", "WINDOW", "EVENTS", "PATH");
	size_t i, k;
	const json_t *s, *d;
	json_array_foreach(list, i, s) {
		const json_t *w = json_object_get(s, "covered");
		if (!w || !window_len(w))
			w = json_object_get(s, "requested");
		char win[32], ev[24] = "-";
		fmt_len(w ? window_len(w) : 0, win, sizeof(win));
		if (json_object_get(s, "devices")) {
			long long total = 0;
			json_array_foreach(json_object_get(s, "devices"), k, d)
				total += jint(d, "events");
			snprintf(ev, sizeof(ev), "%lld", total);
		}
		char state[32], created[32] = "-";
		snprintf(state, sizeof(state), "%s%s", jstr(s, "state"),
			 json_is_true(json_object_get(s, "keep")) ? ",kept" : "");
		const json_t *c = json_object_get(json_object_get(s, "trigger"), "created_wall_ns");
		/* A manifest from before created_wall_ns: its window's start. */
		if (!json_is_integer(c))
			c = json_object_get(json_object_get(s, "requested"), "start_wall_ns");
		if (json_is_integer(c))
			fmt_time(json_integer_value(c), created, sizeof(created));
		table_row(&t, created, jstr(s, "id"), jstr(s, "run"), jstr(s, "host"), jstr(s, "kind"),
			  state, win, ev, jstr(s, "path"));
	}
	table_print(&t);
	table_free(&t);
	json_decref(r);
	return EXIT_SUCCESS;
}

/* SESSION is a session id (the daemon says where it is) or the path of a
 * session directory, which works without a daemon.  -1 with dir set, or
 * the exit status. */
static int session_dir(const struct command *cmd, struct args *a, char *dir, size_t len)
{
	const char *arg = a->pos[0];
	struct stat st;
	if (strchr(arg, '/') || (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))) {
		snprintf(dir, len, "%s", arg);
		return -1;
	}
	char path[128];
	int rc = session_path(cmd, arg, "", path, sizeof(path));
	if (rc >= 0)
		return rc;
	json_t *s = NULL;
	if ((rc = call(a, "GET", path, NULL, &s)))
		return rc;
	snprintf(dir, len, "%s", jstr(s, "path"));
	json_decref(s);
	return -1;
}

static int cmd_summary(const struct command *cmd, struct args *a)
{
	char dir[4096];
	int rc = session_dir(cmd, a, dir, sizeof(dir));
	if (rc >= 0)
		return rc;
	struct rp_err err = { 0 };
	if (rp_summary_write(dir, &a->filter, stdout, &err) < 0) {
		fprintf(stderr, "ringprof: %s\n", shown(err.msg));
		return EXIT_FAILURE;
	}
	return EXIT_SUCCESS;
}

static int print_written(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		fprintf(stderr, "ringprof: %s was written but cannot be read back: %s\n",
			shown(path), strerror(errno));
		return EXIT_FAILURE;
	}
	print_file(NULL, path, (uint64_t)st.st_size);
	return EXIT_SUCCESS;
}

/* rp_export_opts.progress of `export` into the session directory: each
 * file written, as it is. */
static bool print_export(void *ctx, const char *host, enum rp_export_format f, int dirfd,
			 const char *file, const struct rp_err *err)
{
	struct stat st;
	(void)host;
	(void)f;
	if (!err && fstatat(dirfd, file, &st, AT_SYMLINK_NOFOLLOW) == 0)
		print_file(ctx, file, (uint64_t)st.st_size);
	return true;
}

/* With -o, one format of one host's part to that path; without, every
 * format asked for, of every host (or --host), into the session
 * directory as <host><suffix>. */
static int cmd_export(const struct command *cmd, struct args *a)
{
	struct rp_err err = { 0 };
	unsigned mask = RP_EXPORT_DEFAULT;
	if (a->val[O_FORMAT] && rp_export_parse_formats(a->val[O_FORMAT], &mask, &err) < 0)
		return usage_error(cmd, "--format: %s", err.msg);
	if (!mask)
		return usage_error(cmd, "--format none exports nothing: name a format");
	struct rp_export_opts opts = { .filter = &a->filter };
	if (a->val[O_GROUP] &&
	    rp_export_parse_grouping(a->val[O_GROUP], &opts.perfetto_grouping, &err) < 0)
		return usage_error(cmd, "--group: %s", err.msg);
	if (a->val[O_GROUP] && !(mask & 1u << RP_EXPORT_PERFETTO))
		return usage_error(cmd, "--group groups the Perfetto trace's tracks: add perfetto "
				   "to --format");
	const char *out = a->val[O_OUTPUT];
	if (!out && (a->filter.npids || a->filter.ncomms))
		return usage_error(cmd, "--pid and --comm write one job's view: give -o PATH (and "
				   "one --format), so that the session's own exports stay whole");
	if (out && (mask & (mask - 1)))
		return usage_error(cmd, "-o writes one file: give one --format (xplane, perfetto, "
				   "pprof, json, summary, flamegraph or folded)");
	char dir[4096];
	int rc = session_dir(cmd, a, dir, sizeof(dir));
	if (rc >= 0)
		return rc;
	if (!out) {
		opts.progress = print_export;
		opts.progress_ctx = dir;
		if (rp_export_session(dir, a->val[O_HOST], mask, &opts, &err) < 0) {
			fprintf(stderr, "ringprof: %s\n", shown(err.msg));
			return EXIT_FAILURE;
		}
		printf("exported %s\n", dir);
		return EXIT_SUCCESS;
	}
	json_t *all, *m, *chosen = NULL;
	if (rp_session_manifests(dir, &all, &err) < 0) {
		fprintf(stderr, "ringprof: %s\n", shown(err.msg));
		return EXIT_FAILURE;
	}
	size_t i, n = 0;
	json_array_foreach(all, i, m) {
		const char *h = jstr(m, "host");
		if (!a->val[O_HOST] || strcmp(h, a->val[O_HOST]) == 0) {
			chosen = m;
			n++;
		}
	}
	rc = EXIT_FAILURE;
	if (n == 0)
		fprintf(stderr, "ringprof: %s holds no complete part%s%s: check the session and "
			"--host\n", dir, a->val[O_HOST] ? " of host " : "",
			a->val[O_HOST] ? a->val[O_HOST] : "");
	else if (n > 1)
		rc = usage_error(cmd, "%s was written by %zu hosts: name one with --host", dir, n);
	else if (rp_export_host(dir, chosen, (enum rp_export_format)__builtin_ctz(mask), out,
				&opts, &err) < 0)
		fprintf(stderr, "ringprof: %s\n", shown(err.msg));
	else
		rc = print_written(out);
	json_decref(all);
	return rc;
}

/* Whether pid runs: it exists and is not a zombie (its parent, say a
 * test harness, has yet to reap it; it has exited all the same). */
static bool pid_running(pid_t pid)
{
	char path[64], stat[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	bool read = f && fgets(stat, sizeof(stat), f);
	if (f)
		fclose(f);
	const char *end = read ? strrchr(stat, ')') : NULL;
	return kill(pid, 0) == 0 && !(end && end[1] == ' ' && end[2] == 'Z');
}

/* POST /v1/shutdown, then waits for the daemon to exit (it seals its
 * rings first), so that a script may start the next one right after. */
static int cmd_shutdown(const struct command *cmd, struct args *a)
{
	(void)cmd;
	json_t *r = NULL;
	int rc = call(a, "POST", "/v1/shutdown", NULL, &r);
	if (rc)
		return rc;
	pid_t pid = (pid_t)jint(r, "pid");
	json_decref(r);
	uint64_t deadline = rp_clock_now_ns() + SHUTDOWN_WAIT_NS;
	/* The pid as the daemon sees it: in another pid namespace kill()
	 * finds nothing (ESRCH) and there is nothing to wait for here. */
	while (pid > 0 && pid_running(pid) && rp_clock_now_ns() < deadline)
		usleep(POLL_INTERVAL_MS * 1000);
	if (pid > 0 && pid_running(pid)) {
		fprintf(stderr, "ringprof: ringprofd (pid %d) is still sealing its rings after %llus\n",
			(int)pid, (unsigned long long)(SHUTDOWN_WAIT_NS / 1000000000ull));
		return EXIT_FAILURE;
	}
	printf("ringprofd (pid %d) stopped\n", (int)pid);
	return EXIT_SUCCESS;
}

static const struct command commands[] = {
	{ "status", "", "Show the rings, the collectors (why one does not run) and open sessions.\n\n",
	  COMMON_OPTS, 0, cmd_status },
	{ "snapshot", "[--last 30s] [--end TIME] [--name N] [--run R] [--reason TEXT]\n"
	  "                        [--pid PID,...] [--cgroup PATH] [--hosts H:PORT,... [--token-file F]]",
	  "Save the recent past as a session on disk.\n\n"
	  "  --last DURATION   how far back (500ms, 30s, 5m; default: the daemon's)\n"
	  "  --end TIME        window end: RFC 3339 or Unix ns (default: now)\n"
	  "  --name N          session id (default: from the time)\n"
	  "  --run R           run directory the session goes into\n"
	  "  --reason TEXT     why, kept with the session\n"
	  "  --hosts LIST      the same window on every daemon of LIST (host:port of\n"
	  "                    their [api] tcp_listen, comma-separated), at once; the\n"
	  "                    end defaults to now here and the name to one from it,\n"
	  "                    so hosts sharing a log directory write one session.\n"
	  "                    Prints each host's session path or error; exit 1 when\n"
	  "                    any host failed\n"
	  "  --token-file F    the daemons' bearer token (default: $RINGPROF_TOKEN)\n"
	  JOB_HELP
	  WAIT_HELP
	  "                    (with --hosts: each host's, from that host)\n",
	  COMMON_OPTS | NAMING_OPTS | BIT(O_LAST) | BIT(O_END) | BIT(O_HOSTS) | BIT(O_TOKEN_FILE) |
	  JOB_OPTS | WAIT_OPTS,
	  0, cmd_snapshot },
	{ "start", "[--name N] [--run R] [--reason TEXT] [--cpu-sample-hz HZ] [--pid PID,...]\n"
	  "                     [--cgroup PATH]",
	  "Start a session now and print its id; end it with 'ringprof stop ID'.\n\n"
	  "  --name N          session id (default: from the time)\n"
	  "  --run R           run directory the session goes into\n"
	  "  --reason TEXT     why, kept with the session\n"
	  "  --cpu-sample-hz HZ\n"
	  "                    sample CPUs at HZ per CPU (1 to 10000) while the\n"
	  "                    session is open, when above the daemon's rate\n"
	  JOB_HELP
	  "                    (read at the start and again at the stop)\n",
	  COMMON_OPTS | SESSION_OPTS | JOB_OPTS, 0, cmd_start },
	{ "stop", "ID [--pid PID,...] [--cgroup PATH] [--wait [--wait-timeout D]]",
	  "Stop an open session and show what it holds.\n\n"
	  JOB_HELP
	  "                    (added to those the start named)\n"
	  WAIT_HELP, COMMON_OPTS | JOB_OPTS | WAIT_OPTS, 1, cmd_stop },
	{ "capture", "--duration 2s [--name N] [--run R] [--reason TEXT] [--cpu-sample-hz HZ]\n"
	  "                       [--pid PID,...] [--cgroup PATH]",
	  "Record from now for a while, wait until the session is complete, show it.\n\n"
	  "  --duration D      how long (500ms, 30s, 5m)\n"
	  "  --name N          session id (default: from the time)\n"
	  "  --run R           run directory the session goes into\n"
	  "  --reason TEXT     why, kept with the session\n"
	  "  --cpu-sample-hz HZ\n"
	  "                    sample CPUs at HZ per CPU (1 to 10000) during the\n"
	  "                    capture, when above the daemon's rate\n"
	  JOB_HELP
	  WAIT_HELP,
	  COMMON_OPTS | SESSION_OPTS | BIT(O_DURATION) | JOB_OPTS | WAIT_OPTS, 0, cmd_capture },
	{ "sessions", "", "List the sessions, oldest made first (CREATED: when the daemon made\n"
	  "it, not the window's start): one line per host that wrote a part.\n\n",
	  COMMON_OPTS, 0, cmd_sessions },
	{ "keep", "ID", "Keep a session: retention never deletes it.\n\n", COMMON_OPTS, 1, cmd_keep },
	{ "shutdown", "", "Stop the daemon on the socket: it seals its rings, removes its socket and\n"
	  "pidfile and exits; waits until it has.  Only root and the daemon's own user\n"
	  "may, and only on the Unix socket.\n\n", TEXT_OPTS, 0, cmd_shutdown },
	{ "summary", "SESSION [--pid PID,...] [--comm NAME]",
	  "Summarise a session: window, events per device, annotation ranges\n"
	  "(count, mean, p50, p99, max), counters, instants, drops, the top\n"
	  "functions of the CPU samples (self and total; symbolized here, so run\n"
	  "it on the recording host, as root for kernel names; C++ names\n"
	  "demangled) and CPU time per process, with a warning for a process\n"
	  "whose stacks look cut short (built without frame pointers); each\n"
	  "host's part in turn when several hosts wrote it.\n"
	  "SESSION is a session id or the path of a session directory.\n\n"
	  FILTER_HELP,
	  TEXT_OPTS | FILTER_OPTS, 1, cmd_summary },
	{ "export", "SESSION [--format F,...] [-o PATH] [--host H] [--group G]\n"
	  "                      [--pid PID,...] [--comm NAME]",
	  "Write a session, from its raw chunks, in the formats viewers open:\n"
	  "  xplane    <host>.xplane.pb: XProf / TensorBoard's Profile tab\n"
	  "  perfetto  <host>.pftrace: ui.perfetto.dev, trace_processor\n"
	  "  pprof     <host>.cpu.pb.gz: go tool pprof (CPU samples)\n"
	  "  json      <host>.json: trace events, counters, CPU samples for scripts\n"
	  "  summary   <host>.summary.txt: what 'ringprof summary' prints\n"
	  "  flamegraph <host>.flamegraph.svg: CPU samples as an interactive flame\n"
	  "            graph (a browser opens it; click to zoom, Search)\n"
	  "  folded    <host>.folded: CPU samples as collapsed stacks for\n"
	  "            flamegraph.pl, inferno, speedscope\n"
	  "Prints each file written with its size.  Frames are symbolized here: run it on the recording host (as root for\n"
	  "kernel names); C++ names are demangled.  SESSION is a session id or a\n"
	  "session directory.\n\n"
	  "  --format F,...    formats to write, or all (default: all but flamegraph\n"
	  "                    and folded)\n"
	  "  -o, --output PATH write one format to PATH instead of the session\n"
	  "                    directory (for a session several hosts wrote, with --host)\n"
	  "  --host H          only host H's part\n"
	  "  --group G         how the Perfetto trace groups its tracks (perfetto only):\n"
	  "                    process (process > thread, device > stream; default),\n"
	  "                    device (the ring that recorded the events > process >\n"
	  "                    thread, beside its streams) or thread (each thread a\n"
	  "                    top-level track, no process groups)\n"
	  FILTER_HELP
	  "                    Both need -o, so that the session's own exports stay whole\n",
	  TEXT_OPTS | BIT(O_FORMAT) | BIT(O_OUTPUT) | BIT(O_HOST) | BIT(O_GROUP) | FILTER_OPTS, 1,
	  cmd_export },
};

int main(int argc, char **argv)
{
	struct args a = { 0 };
	int rc = get_options(NULL, COMMON_OPTS | BIT(O_VERSION), argc, argv, &a);
	if (rc >= 0)
		return rc;
	if (optind == argc)
		return usage_error(NULL, "no command given");
	for (size_t i = 0; i < sizeof(own_commands) / sizeof(own_commands[0]); i++)
		if (!strcmp(argv[optind], own_commands[i].name))
			return own_commands[i].main(argc - optind, argv + optind, a.val[O_SOCKET]);
	const struct command *cmd = NULL;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[optind], commands[i].name))
			cmd = &commands[i];
	if (!cmd)
		return usage_error(NULL, "unknown command '%s'", argv[optind]);
	if ((rc = parse_args(cmd, argc - optind, argv + optind, &a)) >= 0)
		return rc;

	struct rp_err err = { 0 };
	struct rp_client_opts co = { .socket_path = a.val[O_SOCKET], .client_name = "cli" };
	if (rp_client_new(&co, &a.client, &err) < 0)
		return daemon_error(&err);
	rc = cmd->run(cmd, &a);
	rp_client_free(a.client);
	return rc;
}
