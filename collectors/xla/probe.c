/* ringprof-xla-probe: pull one profiling window from an XLA runtime's
 * profiler server and summarize it, or decode a saved XSpace (the decode
 * benchmark).  The integration tests drive it; the daemon's XLA collector
 * does the same per window. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "profiler.h"
#include "xspace.h"

#define DEFAULT_MAX_BYTES ((size_t)256 << 20)
#define DEFAULT_TOP 10

struct op_key {
	char *name, *module;
	uint64_t count;
};

struct summary {
	json_t *planes;     /* plane -> events */
	struct op_key *ops; /* XLA op events, one row per (name, module) */
	size_t nops, ops_cap;
	uint64_t hlo_events, steps;
	int64_t first_step, last_step;
	json_t *step_names; /* annotation name -> events */
	json_t *step_events; /* [step_num, start_ns, duration_ns], with --steps */
	uint64_t min_start, max_end;
	uint64_t win_min, win_max; /* of the window being decoded */
	json_t *stats;      /* known stat -> events carrying it */
	bool count_only;
	uint64_t events;
};

struct args {
	const char *addr, *decode, *save;
	struct rp_xla_profile_opts opts;
	unsigned timeout_ms;
	size_t max_bytes;
	int top, repeat, windows;
	bool json, continuous, steps;
};

static void json_incr(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	(void)json_object_set_new(obj, key, json_integer(v ? json_integer_value(v) + 1 : 1));
}

/* Linear search: a window holds a few hundred distinct ops at most. */
static int count_op(struct summary *s, const struct rp_xla_event *ev)
{
	for (size_t i = 0; i < s->nops; i++)
		if (!strcmp(s->ops[i].name, ev->name) &&
		    strlen(s->ops[i].module) == ev->hlo_module_len &&
		    !memcmp(s->ops[i].module, ev->hlo_module, ev->hlo_module_len)) {
			s->ops[i].count++;
			return 0;
		}
	if (s->nops == s->ops_cap) {
		size_t cap = s->ops_cap ? 2 * s->ops_cap : 64;
		struct op_key *o = realloc(s->ops, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		s->ops = o, s->ops_cap = cap;
	}
	s->ops[s->nops] = (struct op_key){strdup(ev->name),
					  strndup(ev->hlo_module, ev->hlo_module_len), 1};
	return s->ops[s->nops++].name ? 0 : -ENOMEM;
}

static int on_event(const struct rp_xla_event *ev, void *arg)
{
	struct summary *s = arg;
	if (s->count_only)
		return 0;
	s->events++;
	json_incr(s->planes, ev->plane);
	for (int k = 0; k < RP_XLA_KNOWN_COUNT; k++)
		if (ev->has & (1u << k))
			json_incr(s->stats, rp_xla_known_name(k));
	uint64_t end = ev->start_ns + ev->duration_ns;
	if (!s->min_start || ev->start_ns < s->min_start)
		s->min_start = ev->start_ns;
	s->max_end = end > s->max_end ? end : s->max_end;
	if (!s->win_min || ev->start_ns < s->win_min)
		s->win_min = ev->start_ns;
	s->win_max = end > s->win_max ? end : s->win_max;
	if ((ev->has & (1u << RP_XLA_STEP_NUM))) {
		if (!s->steps || ev->step_num < s->first_step)
			s->first_step = ev->step_num;
		if (!s->steps || ev->step_num > s->last_step)
			s->last_step = ev->step_num;
		s->steps++;
		json_incr(s->step_names, ev->name);
		if (s->step_events)
			(void)json_array_append_new(s->step_events, json_pack("[I, I, I]",
				(json_int_t)ev->step_num, (json_int_t)ev->start_ns,
				(json_int_t)ev->duration_ns));
	}
	uint32_t hlo = 1u << RP_XLA_HLO_OP | 1u << RP_XLA_HLO_MODULE;
	if ((ev->has & hlo) != hlo)
		return 0;
	s->hlo_events++;
	return count_op(s, ev);
}

static int cmp_ops(const void *a, const void *b)
{
	const struct op_key *x = a, *y = b;
	return (x->count < y->count) - (x->count > y->count);
}

static json_t *summary_json(struct summary *s, int top)
{
	if (s->nops)
		qsort(s->ops, s->nops, sizeof(*s->ops), cmp_ops);
	json_t *ops = json_array();
	for (size_t i = 0; i < s->nops && (int)i < top; i++)
		(void)json_array_append_new(ops, json_pack("{s:s, s:s, s:I}", "name",
			s->ops[i].name, "hlo_module", s->ops[i].module,
			"count", (json_int_t)s->ops[i].count));
	return json_pack("{s:I, s:O, s:I, s:O, s:{s:I, s:I, s:I, s:O}, s:I, s:I, s:o}",
			 "events", (json_int_t)s->events, "planes", s->planes,
			 "hlo_events", (json_int_t)s->hlo_events, "stats", s->stats,
			 "steps", "count", (json_int_t)s->steps, "first", (json_int_t)s->first_step,
			 "last", (json_int_t)s->last_step, "names", s->step_names,
			 "min_start_ns", (json_int_t)s->min_start,
			 "max_end_ns", (json_int_t)s->max_end, "top_ops", ops);
}

static void summary_free(struct summary *s)
{
	for (size_t i = 0; i < s->nops; i++) {
		free(s->ops[i].name);
		free(s->ops[i].module);
	}
	free(s->ops);
	json_decref(s->planes);
	json_decref(s->stats);
	json_decref(s->step_names);
	json_decref(s->step_events);
}

static void print_text(json_t *j, const struct args *a)
{
	printf("%lld events, %lld XLA op events (hlo_op + hlo_module), %lld step annotations\n",
	       (long long)json_integer_value(json_object_get(j, "events")),
	       (long long)json_integer_value(json_object_get(j, "hlo_events")),
	       (long long)json_integer_value(json_object_get(json_object_get(j, "steps"), "count")));
	const char *plane;
	json_t *v;
	json_object_foreach(json_object_get(j, "planes"), plane, v)
		printf("  plane %-24s %lld events\n", plane, (long long)json_integer_value(v));
	size_t i;
	json_array_foreach(json_object_get(j, "top_ops"), i, v)
		printf("  op %-40s %-24s %lld\n", json_string_value(json_object_get(v, "name")),
		       json_string_value(json_object_get(v, "hlo_module")),
		       (long long)json_integer_value(json_object_get(v, "count")));
	if (a->windows > 1)
		printf("%d windows, largest gap between them %.3f ms\n", a->windows,
		       (double)json_integer_value(json_object_get(j, "max_gap_ns")) / 1e6);
	if (a->repeat > 1)
		printf("decode: %.2f M events per CPU second (%d repeats)\n",
		       json_real_value(json_object_get(j, "decode_events_per_cpu_s")) / 1e6,
		       a->repeat - 1);
}

static int read_file(const char *path, struct rp_xla_window *w)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	int r = fseek(f, 0, SEEK_END) ? -errno : 0;
	long size = r ? -1 : ftell(f);
	w->len = size > 0 ? (size_t)size : 0;
	w->xspace = malloc(w->len ? w->len : 1);
	rewind(f);
	if (!r && (!w->xspace || fread(w->xspace, 1, w->len, f) != w->len))
		r = -EIO;
	fclose(f);
	w->wall_offset_ns = rp_clock_wall_offset_ns();
	return r;
}

static int write_file(const char *path, const struct rp_xla_window *w)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -errno;
	int r = fwrite(w->xspace, 1, w->len, f) == w->len ? 0 : -EIO;
	return fclose(f) || r ? -EIO : 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ringprof-xla-probe HOST:PORT [options]   pull one window\n"
		"       ringprof-xla-probe --decode FILE [--repeat N] [options]   decode a saved\n"
		"                      XSpace; N-1 more decodes measure the decoder's speed\n"
		"  --duration-ms N     window length (1000)\n"
		"  --timeout-ms N      deadline of the call (duration + 10000)\n"
		"  --max-bytes N       response size cap (%zu)\n"
		"  --host-level N      host tracer level 0-3 (1)\n"
		"  --device-level N    device tracer level 0-1 (1)\n"
		"  --python-level N    Python tracer level 0-1 (0)\n"
		"  --windows N         pull N windows in a row; reports the largest gap (1)\n"
		"  --continuous        StartContinuousProfiling, then per window: wait the\n"
		"                      duration, GetSnapshot; StopContinuousProfiling at the end\n"
		"  --save FILE         write the XSpace received\n"
		"  --top N             op rows to print (%d)\n"
		"  --json              print the summary as JSON\n"
		"  --steps             with --json: every step annotation's step_num, start, duration\n",
		DEFAULT_MAX_BYTES, DEFAULT_TOP);
}


static int parse_args(int argc, char **argv, struct args *a)
{
	enum { DURATION = 256, TIMEOUT, MAXB, HOST, DEVICE, PY, CONT, SAVE, TOP, JSON, DECODE,
	       REPEAT, STEPS, WINDOWS, HELP };
	static const struct option opts[] = {
		{"duration-ms", 1, 0, DURATION}, {"timeout-ms", 1, 0, TIMEOUT},
		{"max-bytes", 1, 0, MAXB}, {"host-level", 1, 0, HOST},
		{"device-level", 1, 0, DEVICE}, {"python-level", 1, 0, PY},
		{"continuous", 0, 0, CONT}, {"save", 1, 0, SAVE}, {"top", 1, 0, TOP},
		{"json", 0, 0, JSON}, {"decode", 1, 0, DECODE}, {"repeat", 1, 0, REPEAT}, {"steps", 0, 0, STEPS},
		{"windows", 1, 0, WINDOWS},
		{"help", 0, 0, HELP}, {0},
	};
	*a = (struct args){.max_bytes = DEFAULT_MAX_BYTES, .top = DEFAULT_TOP, .repeat = 1,
			   .windows = 1};
	rp_xla_profile_opts_default(&a->opts);
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		unsigned long long v = optarg ? strtoull(optarg, NULL, 0) : 0;
		switch (c) {
		case DURATION: a->opts.duration_ms = v; break;
		case TIMEOUT: a->timeout_ms = (unsigned)v; break;
		case MAXB: a->max_bytes = (size_t)v; break;
		case HOST: a->opts.host_tracer_level = (unsigned)v; break;
		case DEVICE: a->opts.device_tracer_level = (unsigned)v; break;
		case PY: a->opts.python_tracer_level = (unsigned)v; break;
		case CONT: a->continuous = true; break;
		case SAVE: a->save = optarg; break;
		case TOP: a->top = (int)v; break;
		case JSON: a->json = true; break;
		case DECODE: a->decode = optarg; break;
		case REPEAT: a->repeat = v ? (int)v : 1; break;
		case STEPS: a->steps = true; break;
		case WINDOWS: a->windows = v ? (int)v : 1; break;
		case HELP: usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (optind < argc)
		a->addr = argv[optind++];
	if (optind != argc || !a->addr == !a->decode)
		return -EINVAL;
	if (!a->timeout_ms)
		a->timeout_ms = (unsigned)a->opts.duration_ms + 10000;
	return 0;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
	(void)nanosleep(&ts, NULL);
}

/* Window i of n, from the server or from a file: Profile calls back to
 * back, or one continuous session (started before the first window,
 * stopped after the last) with a snapshot per window. */
static int get_window(const struct args *a, int i, struct rp_xla_window *w, struct rp_err *err)
{
	int r = 0;
	if (a->decode) {
		r = read_file(a->decode, w);
		return r ? rp_err_set(err, r, "cannot read %s: %s", a->decode, strerror(-r)) : 0;
	}
	if (!a->continuous)
		return rp_xla_profile(a->addr, &a->opts, a->timeout_ms, a->max_bytes, w, err);
	if (i == 0)
		r = rp_xla_start_continuous(a->addr, &a->opts, a->timeout_ms, err);
	if (!r)
		sleep_ms(a->opts.duration_ms);
	if (!r)
		r = rp_xla_get_snapshot(a->addr, a->timeout_ms, a->max_bytes, w, err);
	if (!r && i == a->windows - 1)
		r = rp_xla_stop_continuous(a->addr, a->timeout_ms, err);
	return r;
}

static uint64_t cpu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Pull and decode window i into the summary; its own figures go to
 * `windows`.  The last window is decoded `repeat` times over, counting
 * only, to measure the decoder's speed (CPU time, robust to a busy host). */
static int take_window(const struct args *a, int i, struct summary *s, json_t *windows,
		       double *events_per_cpu_s, struct rp_err *err)
{
	struct rp_xla_window w = {0};
	uint64_t call_start = rp_clock_now_ns();
	int r = get_window(a, i, &w, err);
	uint64_t call_end = rp_clock_now_ns();
	if (!r && a->save && (r = write_file(a->save, &w)))
		rp_err_set(err, r, "cannot write %s: %s", a->save, strerror(-r));
	struct rp_xspace_counts counts = {0};
	s->win_min = s->win_max = 0;
	uint64_t events_before = s->events, cpu_ns = 0;
	int repeat = i == a->windows - 1 ? a->repeat : 1;
	int64_t n = 0;
	for (int k = 0; !r && k < repeat; k++) {
		s->count_only = k > 0;
		uint64_t t0 = cpu_now_ns();
		n = rp_xspace_decode(w.xspace, w.len, w.wall_offset_ns, on_event, s, &counts, err);
		cpu_ns += k ? cpu_now_ns() - t0 : 0;
		r = n < 0 ? (int)n : 0;
	}
	s->count_only = false;
	if (!r && cpu_ns)
		*events_per_cpu_s = (double)n * (repeat - 1) * 1e9 / (double)cpu_ns;
	if (!r)
		(void)json_array_append_new(windows, json_pack(
			"{s:I, s:I, s:b, s:I, s:s, s:I, s:I, s:I, s:I, s:I}",
			"bytes", (json_int_t)w.len, "events", (json_int_t)(s->events - events_before),
			"empty_trace", w.empty_trace, "server_errors", (json_int_t)counts.errors,
			"first_error", counts.first_error, "skipped", (json_int_t)counts.skipped,
			"call_start_ns", (json_int_t)call_start, "call_end_ns", (json_int_t)call_end,
			"min_start_ns", (json_int_t)s->win_min, "max_end_ns", (json_int_t)s->win_max));
	rp_xla_window_free(&w);
	return r;
}

/* The largest hole between one window's last event and the next's first. */
static json_int_t max_gap(json_t *windows)
{
	json_int_t gap = 0;
	for (size_t i = 1; i < json_array_size(windows); i++) {
		json_int_t g = json_integer_value(json_object_get(json_array_get(windows, i),
								  "min_start_ns")) -
			json_integer_value(json_object_get(json_array_get(windows, i - 1),
							   "max_end_ns"));
		gap = g > gap ? g : gap;
	}
	return gap;
}

int main(int argc, char **argv)
{
	struct args a;
	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	struct rp_err err = {0};
	struct summary s = {.planes = json_object(), .stats = json_object(),
			    .step_names = json_object(),
			    .step_events = a.steps ? json_array() : NULL};
	json_t *windows = json_array();
	double events_per_cpu_s = 0;
	int r = 0;
	for (int i = 0; !r && i < a.windows; i++)
		r = take_window(&a, i, &s, windows, &events_per_cpu_s, &err);
	if (r) {
		fprintf(stderr, "ringprof-xla-probe: %s\n", err.msg);
		json_decref(windows);
		summary_free(&s);
		return 1;
	}
	json_t *j = summary_json(&s, a.top);
	json_t *first = json_array_get(windows, 0);
	(void)json_object_update_new(j, json_pack("{s:O, s:O, s:O, s:O, s:o, s:I, s:f}",
		"bytes", json_object_get(first, "bytes"),
		"empty_trace", json_object_get(first, "empty_trace"),
		"call_start_ns", json_object_get(first, "call_start_ns"),
		"call_end_ns", json_object_get(json_array_get(windows, (size_t)a.windows - 1),
					       "call_end_ns"),
		"windows", windows, "max_gap_ns", max_gap(windows),
		"decode_events_per_cpu_s", events_per_cpu_s));
	if (s.step_events)
		(void)json_object_set(j, "step_events", s.step_events);
	if (a.json)
		(void)json_dumpf(j, stdout, JSON_INDENT(1));
	else
		print_text(j, &a);
	json_decref(j);
	summary_free(&s);
	return 0;
}
