#include "rules.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

/* Histograms for the first MAX_NAMES range names (rule ranges first);
 * later names share the "_other_" one, so /metrics stays bounded. */
#define MAX_NAMES 64
#define OTHER MAX_NAMES
#define NAME_SLOTS 128          /* hash table over names[], at most half full */
#define NO_NAME 0xffff
/* Ranges open per thread that are matched; deeper ones are counted, so
 * their ends pop correctly, but not timed. */
#define MAX_DEPTH 64
/* Threads with open-range stacks.  When half the table is taken it starts
 * over: stacks of exited threads never pile up, at the price of not
 * timing the ranges open at that moment. */
#define THREAD_SLOTS 4096
/* Processes tracked per counter_above rule; the least recently seen
 * makes room. */
#define MAX_PIDS 64

static const double bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
				 0.5,   1,      2.5,   5,    10,    30,   60 };
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

struct hist {
	uint64_t buckets[NBOUNDS]; /* per bucket, summed up when printed */
	uint64_t count;
	double sum;
};

struct name {
	char text[RP_NAME_MAX + 1];
	uint32_t rules;            /* bit i: slow_range rule i times this name */
};

struct frame {
	uint64_t begin_ns;
	uint16_t name;             /* index in names[], or OTHER */
};

struct thread {
	bool used;
	uint32_t pid, tid;
	unsigned depth;            /* open ranges, also those past MAX_DEPTH */
	unsigned cap;
	struct frame *frames;
};

struct above {
	bool used, fired;          /* fired: once per excursion above the threshold */
	uint32_t pid;
	uint64_t since_ns;         /* 0: not above */
	uint64_t seen_ns;
};

struct rule {
	struct rp_rule_config cfg;
	struct rp_gate *gate;      /* ingest thread only */
	/* slow_range: the last cfg.window durations, oldest at head once full */
	uint64_t *recent, *scratch;
	unsigned nrecent, head;
	/* counter_above */
	struct above above[MAX_PIDS];
};

struct fire_node {
	struct fire_node *next;
	struct rp_rule_fire fire;
};

struct rp_rules {
	struct rule *rules;
	unsigned nrules;
	bool has_counter_rules;

	/* ingest thread only */
	uint16_t name_slots[NAME_SLOTS];
	struct thread *threads;
	unsigned nthreads;

	pthread_mutex_t lock;      /* guards everything below */
	struct name names[MAX_NAMES];
	unsigned nnames;
	struct hist hists[MAX_NAMES + 1];
	struct fire_node *queue;
	uint64_t skipped[RP_GATE_NVERDICTS];
};

static uint64_t hash_name(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The histogram index of a range name, adding it while there is room. */
static uint16_t name_index(struct rp_rules *r, const char *text)
{
	if (!text)
		return OTHER;
	for (uint64_t i = hash_name(text) % NAME_SLOTS;; i = (i + 1) % NAME_SLOTS) {
		uint16_t n = r->name_slots[i];
		if (n == NO_NAME) {
			if (r->nnames == MAX_NAMES)
				return OTHER;
			pthread_mutex_lock(&r->lock);
			n = (uint16_t)r->nnames;
			snprintf(r->names[n].text, sizeof(r->names[n].text), "%s", text);
			r->nnames++;
			pthread_mutex_unlock(&r->lock);
			r->name_slots[i] = n;
			return n;
		}
		if (!strcmp(r->names[n].text, text))
			return n;
	}
}

void rp_rules_free(struct rp_rules *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < r->nrules; i++) {
		rp_gate_free(r->rules[i].gate);
		free(r->rules[i].recent);
		free(r->rules[i].scratch);
	}
	free(r->rules);
	if (r->threads)
		for (unsigned i = 0; i < THREAD_SLOTS; i++)
			free(r->threads[i].frames);
	free(r->threads);
	for (struct fire_node *f = r->queue, *next; f; f = next) {
		next = f->next;
		json_decref(f->fire.extra);
		free(f);
	}
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int rp_rules_new(const struct rp_rule_config *rules, unsigned n, struct rp_rules **out,
		 struct rp_err *err)
{
	struct rp_rules *r = calloc(1, sizeof(*r));
	if (!r)
		return rp_err_set(err, -ENOMEM, "out of memory creating the trigger rules");
	pthread_mutex_init(&r->lock, NULL);
	memset(r->name_slots, 0xff, sizeof(r->name_slots));
	r->threads = calloc(THREAD_SLOTS, sizeof(*r->threads));
	r->rules = calloc(n ? n : 1, sizeof(*r->rules));
	int rc = r->threads && r->rules ? 0 : -ENOMEM;
	for (unsigned i = 0; rc == 0 && i < n; i++, r->nrules++) {
		struct rule *u = &r->rules[i];
		u->cfg = rules[i];
		rc = rp_gate_new(u->cfg.trigger.cooldown_ns, u->cfg.trigger.max_per_hour, &u->gate, err);
		if (rc == 0 && u->cfg.type == RP_RULE_SLOW_RANGE) {
			u->recent = calloc(u->cfg.window, sizeof(*u->recent));
			u->scratch = calloc(u->cfg.window, sizeof(*u->scratch));
			if (!u->recent || !u->scratch)
				rc = -ENOMEM;
			else /* rule ranges get a histogram of their own whatever comes first */
				r->names[name_index(r, u->cfg.range)].rules |= 1u << i;
		}
		r->has_counter_rules |= u->cfg.type == RP_RULE_COUNTER_ABOVE;
	}
	if (rc < 0) {
		rp_rules_free(r);
		return rc == -ENOMEM ? rp_err_set(err, rc, "out of memory creating the trigger rules") : rc;
	}
	*out = r;
	return 0;
}

static struct thread *find_thread(struct rp_rules *r, uint32_t pid, uint32_t tid, bool create)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	for (uint64_t i = key * 0x9e3779b97f4a7c15ull >> 52;; i = (i + 1) % THREAD_SLOTS) {
		struct thread *t = &r->threads[i];
		if (t->used && t->pid == pid && t->tid == tid)
			return t;
		if (t->used)
			continue;
		if (!create)
			return NULL;
		if (r->nthreads >= THREAD_SLOTS / 2) {
			for (unsigned j = 0; j < THREAD_SLOTS; j++) {
				free(r->threads[j].frames);
				r->threads[j] = (struct thread){ 0 };
			}
			r->nthreads = 0;
			return find_thread(r, pid, tid, true);
		}
		*t = (struct thread){ .used = true, .pid = pid, .tid = tid };
		r->nthreads++;
		return t;
	}
}

static void range_begin(struct rp_rules *r, const struct rp_event *ev)
{
	struct thread *t = find_thread(r, ev->pid, ev->tid, true);
	if (t->depth < MAX_DEPTH && t->depth == t->cap) {
		unsigned cap = t->cap ? 2 * t->cap : 4;
		struct frame *f = realloc(t->frames, cap * sizeof(*f));
		if (!f)
			return; /* this range goes untimed; its end is then unmatched */
		t->frames = f;
		t->cap = cap;
	}
	if (t->depth < MAX_DEPTH)
		t->frames[t->depth] = (struct frame){ .begin_ns = ev->ts, .name = name_index(r, ev->name) };
	t->depth++;
}

/* Median of the rule's window (the mean of the middle two when even). */
static uint64_t median(struct rule *u)
{
	unsigned n = u->nrecent, k = n / 2;
	uint64_t *a = u->scratch;
	memcpy(a, u->recent, n * sizeof(*a));
	/* Quickselect: a[k] ends up in its sorted place, smaller ones before. */
	for (unsigned lo = 0, hi = n - 1; lo < hi;) {
		uint64_t pivot = a[(lo + hi) / 2];
		unsigned i = lo, j = hi;
		while (i <= j) {
			while (a[i] < pivot)
				i++;
			while (a[j] > pivot)
				j--;
			if (i <= j) {
				uint64_t x = a[i];
				a[i++] = a[j];
				a[j] = x;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			break;
	}
	if (n % 2)
		return a[k];
	uint64_t below = a[0];
	for (unsigned i = 1; i < k; i++)
		if (a[i] > below)
			below = a[i];
	return below / 2 + a[k] / 2 + (below % 2 + a[k] % 2) / 2;
}

/* "412 ms", "1.25 ms", "85 us", "12.3 s": readable in a reason. */
static void human(uint64_t ns, char *out, size_t len)
{
	if (ns < 1000000)
		snprintf(out, len, "%.0f us", (double)ns / 1e3);
	else if (ns < 10000000)
		snprintf(out, len, "%.2f ms", (double)ns / 1e6);
	else if (ns < 10000000000ull)
		snprintf(out, len, "%.0f ms", (double)ns / 1e6);
	else
		snprintf(out, len, "%.1f s", (double)ns / 1e9);
}

static void enqueue(struct rp_rules *r, struct rule *u, uint64_t ts, const char *reason,
		    json_t *extra)
{
	struct fire_node *node = calloc(1, sizeof(*node));
	if (!node) {
		json_decref(extra);
		return;
	}
	struct rp_rule_fire *f = &node->fire;
	const struct rp_trigger_config *t = &u->cfg.trigger;
	snprintf(f->rule, sizeof(f->rule), "%s", u->cfg.name);
	snprintf(f->reason, sizeof(f->reason), "%s", reason);
	f->fired_ns = ts;
	f->start_ns = ts > t->before_ns ? ts - t->before_ns : 0;
	f->end_ns = ts + t->after_ns;
	f->extra = extra;
	if (extra)
		json_object_set_new(extra, "window",
				    json_pack("{s:I, s:I, s:I}", "anchor_ns", (json_int_t)ts,
					      "before_ns", (json_int_t)t->before_ns,
					      "after_ns", (json_int_t)t->after_ns));
	pthread_mutex_lock(&r->lock);
	struct fire_node **p = &r->queue;
	while (*p)
		p = &(*p)->next;
	*p = node;
	pthread_mutex_unlock(&r->lock);
}

/* Whether the rule may take a snapshot now; refusals are counted. */
static bool admitted(struct rp_rules *r, struct rule *u, uint64_t ts)
{
	enum rp_gate_verdict v = rp_gate_check(u->gate, 0, ts);
	if (v == RP_GATE_PASS)
		return true;
	pthread_mutex_lock(&r->lock);
	r->skipped[v]++;
	pthread_mutex_unlock(&r->lock);
	return false;
}

static void check_slow(struct rp_rules *r, struct rule *u, uint64_t dur, const struct rp_event *ev)
{
	if (u->nrecent == u->cfg.window) {
		uint64_t med = median(u);
		if (med > 0 && (double)dur > u->cfg.factor * (double)med && admitted(r, u, ev->ts)) {
			char took[32], typical[32], reason[512];
			human(dur, took, sizeof(took));
			human(med, typical, sizeof(typical));
			snprintf(reason, sizeof(reason), "%s took %s, %.1fx its rolling median of %s",
				 u->cfg.range, took, (double)dur / (double)med, typical);
			enqueue(r, u, ev->ts, reason,
				json_pack("{s:s, s:s, s:s, s:I, s:I, s:f, s:i, s:i, s:i}",
					  "rule", u->cfg.name, "type", "slow_range", "range", u->cfg.range,
					  "duration_ns", (json_int_t)dur, "median_ns", (json_int_t)med,
					  "factor", u->cfg.factor, "samples", (int)u->cfg.window,
					  "pid", (int)ev->pid, "tid", (int)ev->tid));
		}
	}
	u->recent[u->head] = dur;
	u->head = (u->head + 1) % u->cfg.window;
	if (u->nrecent < u->cfg.window)
		u->nrecent++;
}

static void range_end(struct rp_rules *r, const struct rp_event *ev)
{
	struct thread *t = find_thread(r, ev->pid, ev->tid, false);
	if (!t || t->depth == 0)
		return; /* its begin came before the daemon saw this thread */
	if (--t->depth >= MAX_DEPTH)
		return;
	const struct frame *f = &t->frames[t->depth];
	uint64_t dur = ev->ts > f->begin_ns ? ev->ts - f->begin_ns : 0;
	double s = (double)dur / 1e9;
	struct hist *h = &r->hists[f->name];
	uint32_t rules = f->name == OTHER ? 0 : r->names[f->name].rules;
	pthread_mutex_lock(&r->lock);
	size_t b = 0;
	while (b < NBOUNDS && s > bounds[b])
		b++;
	if (b < NBOUNDS)
		h->buckets[b]++;
	h->count++;
	h->sum += s;
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; rules; i++, rules >>= 1)
		if (rules & 1)
			check_slow(r, &r->rules[i], dur, ev);
}

static struct above *above_of(struct rule *u, uint32_t pid)
{
	struct above *free_one = NULL, *oldest = &u->above[0];
	for (unsigned i = 0; i < MAX_PIDS; i++) {
		struct above *a = &u->above[i];
		if (a->used && a->pid == pid)
			return a;
		if (!a->used && !free_one)
			free_one = a;
		if (a->seen_ns < oldest->seen_ns)
			oldest = a;
	}
	struct above *a = free_one ? free_one : oldest;
	*a = (struct above){ .used = true, .pid = pid };
	return a;
}

static void counter(struct rp_rules *r, const struct rp_event *ev)
{
	for (unsigned i = 0; i < r->nrules; i++) {
		struct rule *u = &r->rules[i];
		if (u->cfg.type != RP_RULE_COUNTER_ABOVE || !ev->name || strcmp(ev->name, u->cfg.counter))
			continue;
		struct above *a = above_of(u, ev->pid);
		a->seen_ns = ev->ts;
		double v = ev->u.counter.value;
		if (!(v > u->cfg.threshold)) {
			a->since_ns = 0;
			a->fired = false;
			continue;
		}
		if (!a->since_ns)
			a->since_ns = ev->ts ? ev->ts : 1;
		if (a->fired || ev->ts - a->since_ns < u->cfg.for_ns)
			continue;
		a->fired = true;
		if (!admitted(r, u, ev->ts))
			continue;
		char for_s[32], reason[512];
		rp_format_duration(ev->ts - a->since_ns, for_s, sizeof(for_s));
		snprintf(reason, sizeof(reason), "%s has been above %g for %s (now %g)", u->cfg.counter,
			 u->cfg.threshold, for_s, v);
		enqueue(r, u, ev->ts, reason,
			json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:i}", "rule", u->cfg.name,
				  "type", "counter_above", "counter", u->cfg.counter, "value", v,
				  "threshold", u->cfg.threshold, "above_since_ns", (json_int_t)a->since_ns,
				  "pid", (int)ev->pid));
	}
}

void rp_rules_observe(void *ctx, const struct rp_event *ev)
{
	struct rp_rules *r = ctx;
	switch (ev->kind) {
	case RP_EV_RANGE_BEGIN:
		range_begin(r, ev);
		break;
	case RP_EV_RANGE_END:
		range_end(r, ev);
		break;
	case RP_EV_COUNTER:
		if (r->has_counter_rules)
			counter(r, ev);
		break;
	default:
		break;
	}
}

int rp_rules_take(struct rp_rules *r, uint64_t now_ns, struct rp_rule_fire *out)
{
	pthread_mutex_lock(&r->lock);
	struct fire_node **p = &r->queue;
	while (*p && (*p)->fire.end_ns > now_ns)
		p = &(*p)->next;
	struct fire_node *node = *p;
	if (node)
		*p = node->next;
	pthread_mutex_unlock(&r->lock);
	if (!node)
		return 0;
	*out = node->fire;
	free(node);
	return 1;
}

uint64_t rp_rules_skipped(struct rp_rules *r, enum rp_gate_verdict v)
{
	pthread_mutex_lock(&r->lock);
	uint64_t n = v < RP_GATE_NVERDICTS ? r->skipped[v] : 0;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* A label value: escaped, and valid UTF-8 (other bytes become '?'),
 * as Prometheus requires. */
static void put_label(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3
			     : (*p & 0xf8) == 0xf0 ? 4 : 0;
		bool ok = len > 0 && !(len == 2 && *p < 0xc2);
		for (unsigned i = 1; ok && i < len; i++)
			ok = (p[i] & 0xc0) == 0x80;
		if (!ok) {
			fputc('?', f);
			p++;
		} else if (*p == '\\' || *p == '"') {
			fprintf(f, "\\%c", *p++);
		} else if (*p == '\n') {
			fputs("\\n", f);
			p++;
		} else {
			fwrite(p, 1, len, f);
			p += len;
		}
	}
}

/* The start of one line of the histogram, up to its value. */
static void put_series(FILE *f, const char *suffix, const char *name, const char *le)
{
	fprintf(f, "ringprof_range_duration_seconds%s{name=\"", suffix);
	put_label(f, name);
	if (le)
		fprintf(f, "\",le=\"%s\"} ", le);
	else
		fputs("\"} ", f);
}

static void put_hist(FILE *f, const char *name, const struct hist *h)
{
	uint64_t cumulative = 0;
	for (size_t b = 0; b < NBOUNDS; b++) {
		char le[32];
		snprintf(le, sizeof(le), "%g", bounds[b]);
		cumulative += h->buckets[b];
		put_series(f, "_bucket", name, le);
		fprintf(f, "%llu\n", (unsigned long long)cumulative);
	}
	put_series(f, "_bucket", name, "+Inf");
	fprintf(f, "%llu\n", (unsigned long long)h->count);
	put_series(f, "_sum", name, NULL);
	fprintf(f, "%.9g\n", h->sum);
	put_series(f, "_count", name, NULL);
	fprintf(f, "%llu\n", (unsigned long long)h->count);
}

void rp_rules_write_metrics(struct rp_rules *r, FILE *f)
{
	fprintf(f, "# HELP ringprof_range_duration_seconds Annotation ranges completed, by name "
		   "(the first %d names; later ones under name=\"_other_\").\n"
		   "# TYPE ringprof_range_duration_seconds histogram\n", MAX_NAMES);
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nnames; i++)
		if (r->hists[i].count || r->names[i].rules)
			put_hist(f, r->names[i].text, &r->hists[i]);
	if (r->hists[OTHER].count)
		put_hist(f, "_other_", &r->hists[OTHER]);
	pthread_mutex_unlock(&r->lock);
}
