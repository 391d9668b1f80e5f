/* XSpace decoding: protobuf-c unpacks under a memory budget, then each
 * plane's metadata tables are indexed once and every event is resolved
 * against them (see xspace.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pballoc.h"
#include "xplane.pb-c.h"
#include "xspace.h"

/* The plane and stat where TSL keeps the session start that event times
 * are relative to. */
#define TASK_ENV_PLANE "Task Environment"
#define START_TIME_STAT "profile_start_time"

static const char *const known_names[RP_XLA_KNOWN_COUNT] = {
	[RP_XLA_HLO_OP] = "hlo_op",
	[RP_XLA_HLO_MODULE] = "hlo_module",
	[RP_XLA_PROGRAM_ID] = "program_id",
	[RP_XLA_FLOPS] = "flops",
	[RP_XLA_BYTES_ACCESSED] = "bytes_accessed",
	[RP_XLA_STEP_NUM] = "step_num",
	[RP_XLA_GROUP_ID] = "group_id",
};

const char *rp_xla_known_name(enum rp_xla_known k)
{
	return k < RP_XLA_KNOWN_COUNT ? known_names[k] : "";
}

/* id -> entry for one plane's metadata map: a direct table when the ids
 * are dense (the usual case: 1..N), else a sorted array searched. */
struct id_entry {
	int64_t id;
	const void *value;
	int known; /* stat metadata: enum rp_xla_known, or -1 */
};

struct id_index {
	struct id_entry *sorted;
	size_t n;
	const struct id_entry **direct;
	int64_t direct_len;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct id_entry *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

static int index_build(struct id_index *ix, size_t n)
{
	memset(ix, 0, sizeof(*ix));
	ix->sorted = calloc(n ? n : 1, sizeof(*ix->sorted));
	return ix->sorted ? 0 : -ENOMEM;
}

static int index_finish(struct id_index *ix)
{
	qsort(ix->sorted, ix->n, sizeof(*ix->sorted), cmp_entry);
	if (!ix->n || ix->sorted[0].id < 0 || ix->sorted[ix->n - 1].id > (int64_t)(4 * ix->n + 64))
		return 0;
	ix->direct_len = ix->sorted[ix->n - 1].id + 1;
	ix->direct = calloc((size_t)ix->direct_len, sizeof(*ix->direct));
	if (!ix->direct)
		return -ENOMEM;
	/* Backwards, so that of duplicated ids the first sorted one wins, as
	 * in the binary search. */
	for (size_t i = ix->n; i-- > 0;)
		ix->direct[ix->sorted[i].id] = &ix->sorted[i];
	return 0;
}

static const struct id_entry *index_find(const struct id_index *ix, int64_t id)
{
	if (ix->direct)
		return id >= 0 && id < ix->direct_len ? ix->direct[id] : NULL;
	struct id_entry key = {.id = id};
	const struct id_entry *e = bsearch(&key, ix->sorted, ix->n, sizeof(key), cmp_entry);
	/* bsearch may land on any of equal ids: step back to the first. */
	while (e && e > ix->sorted && e[-1].id == id)
		e--;
	return e;
}

static void index_free(struct id_index *ix)
{
	free(ix->sorted);
	free(ix->direct);
}

static const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

struct plane_ctx {
	const Tensorflow__Profiler__XPlane *plane;
	struct id_index events, stats;
	struct rp_xla_stat *scratch;
	size_t scratch_cap;
};

static int plane_index(struct plane_ctx *pc, const Tensorflow__Profiler__XPlane *plane)
{
	pc->plane = plane;
	int r = index_build(&pc->events, plane->n_event_metadata);
	if (!r)
		r = index_build(&pc->stats, plane->n_stat_metadata);
	if (r)
		return r;
	for (size_t i = 0; i < plane->n_event_metadata; i++) {
		const Tensorflow__Profiler__XPlane__EventMetadataEntry *e = plane->event_metadata[i];
		if (e->value)
			pc->events.sorted[pc->events.n++] =
				(struct id_entry){.id = e->key, .value = e->value, .known = -1};
	}
	for (size_t i = 0; i < plane->n_stat_metadata; i++) {
		const Tensorflow__Profiler__XPlane__StatMetadataEntry *e = plane->stat_metadata[i];
		if (!e->value)
			continue;
		int known = -1;
		for (int k = 0; k < RP_XLA_KNOWN_COUNT; k++)
			if (e->value->name && !strcmp(e->value->name, known_names[k]))
				known = k;
		pc->stats.sorted[pc->stats.n++] =
			(struct id_entry){.id = e->key, .value = e->value, .known = known};
	}
	r = index_finish(&pc->events);
	return r ? r : index_finish(&pc->stats);
}

static const char *stat_name(const struct plane_ctx *pc, int64_t id, int *known)
{
	const struct id_entry *e = index_find(&pc->stats, id);
	*known = e ? e->known : -1;
	return e ? str_or_empty(((const Tensorflow__Profiler__XStatMetadata *)e->value)->name) : "";
}

static void set_str(struct rp_xla_stat *out, const char *s, size_t len)
{
	out->type = RP_XLA_STAT_STR;
	out->value.str.ptr = s;
	out->value.str.len = len;
}

/* Fill *out from one XStat; false for a stat without a value. */
static bool stat_resolve(const struct plane_ctx *pc, const Tensorflow__Profiler__XStat *st,
			 struct rp_xla_stat *out, int *known)
{
	out->name = stat_name(pc, st->metadata_id, known);
	switch (st->value_case) {
	case TENSORFLOW__PROFILER__XSTAT__VALUE_DOUBLE_VALUE:
		out->type = RP_XLA_STAT_DOUBLE;
		out->value.d = st->double_value;
		return true;
	case TENSORFLOW__PROFILER__XSTAT__VALUE_UINT64_VALUE:
		out->type = RP_XLA_STAT_UINT;
		out->value.u = st->uint64_value;
		return true;
	case TENSORFLOW__PROFILER__XSTAT__VALUE_INT64_VALUE:
		out->type = RP_XLA_STAT_INT;
		out->value.i = st->int64_value;
		return true;
	case TENSORFLOW__PROFILER__XSTAT__VALUE_STR_VALUE: {
		const char *s = str_or_empty(st->str_value);
		set_str(out, s, strlen(s));
		return true;
	}
	case TENSORFLOW__PROFILER__XSTAT__VALUE_BYTES_VALUE:
		set_str(out, (const char *)st->bytes_value.data, st->bytes_value.len);
		return true;
	case TENSORFLOW__PROFILER__XSTAT__VALUE_REF_VALUE: {
		/* The value is the name of another stat metadata entry. */
		int unused;
		const char *s = st->ref_value <= INT64_MAX ?
			stat_name(pc, (int64_t)st->ref_value, &unused) : "";
		set_str(out, s, strlen(s));
		return true;
	}
	default:
		return false;
	}
}

static double stat_number(const struct rp_xla_stat *s)
{
	switch (s->type) {
	case RP_XLA_STAT_INT:
		return (double)s->value.i;
	case RP_XLA_STAT_UINT:
		return (double)s->value.u;
	case RP_XLA_STAT_DOUBLE:
		return s->value.d;
	default:
		return 0;
	}
}

/* Record a known stat on the event, unless an earlier (the event's own)
 * stat of the same name was already taken or the type does not fit. */
static void set_known(struct rp_xla_event *ev, int known, const struct rp_xla_stat *s)
{
	if (known < 0 || (ev->has & (1u << known)))
		return;
	bool is_str = s->type == RP_XLA_STAT_STR;
	switch (known) {
	case RP_XLA_HLO_OP:
	case RP_XLA_HLO_MODULE:
		if (!is_str)
			return;
		*(known == RP_XLA_HLO_OP ? &ev->hlo_op : &ev->hlo_module) = s->value.str.ptr;
		*(known == RP_XLA_HLO_OP ? &ev->hlo_op_len : &ev->hlo_module_len) = s->value.str.len;
		break;
	case RP_XLA_FLOPS:
	case RP_XLA_BYTES_ACCESSED:
		if (is_str)
			return;
		*(known == RP_XLA_FLOPS ? &ev->flops : &ev->bytes_accessed) = stat_number(s);
		break;
	default: {
		if (is_str || s->type == RP_XLA_STAT_DOUBLE)
			return;
		int64_t v = s->type == RP_XLA_STAT_INT ? s->value.i : (int64_t)s->value.u;
		*(known == RP_XLA_PROGRAM_ID ? &ev->program_id :
		  known == RP_XLA_STEP_NUM ? &ev->step_num : &ev->group_id) = v;
	}
	}
	ev->has |= 1u << known;
}

static void add_stats(struct plane_ctx *pc, struct rp_xla_event *ev,
		     Tensorflow__Profiler__XStat *const *stats, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int known;
		struct rp_xla_stat *out = &pc->scratch[ev->nstats];
		if (!stats[i] || !stat_resolve(pc, stats[i], out, &known))
			continue;
		set_known(ev, known, out);
		ev->nstats++;
	}
}

static int reserve_scratch(struct plane_ctx *pc, size_t n)
{
	if (n <= pc->scratch_cap)
		return 0;
	struct rp_xla_stat *s = realloc(pc->scratch, n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	pc->scratch = s;
	pc->scratch_cap = n;
	return 0;
}

/* Host-clock ns of an event, false when it is outside the int64 range. */
static bool event_time(int64_t base_ns, int64_t line_ns, int64_t offset_ps, int64_t wall_offset_ns,
		       uint64_t *out)
{
	__int128 t = (__int128)base_ns + line_ns + offset_ps / 1000 - wall_offset_ns;
	if (t < 0 || t > INT64_MAX)
		return false;
	*out = (uint64_t)t;
	return true;
}

struct decode {
	int64_t base_ns, wall_offset_ns;
	rp_xla_event_fn fn;
	void *arg;
	struct rp_xspace_counts *counts;
};

static int64_t decode_line(struct decode *d, struct plane_ctx *pc, const Tensorflow__Profiler__XLine *line)
{
	const char *line_name = line->display_name && *line->display_name ?
		line->display_name : str_or_empty(line->name);
	for (size_t i = 0; i < line->n_events; i++) {
		const Tensorflow__Profiler__XEvent *e = line->events[i];
		struct rp_xla_event ev = {
			.plane = str_or_empty(pc->plane->name), .line_id = line->id,
			.line_name = line_name,
		};
		if (!e || e->data_case != TENSORFLOW__PROFILER__XEVENT__DATA_OFFSET_PS ||
		    e->duration_ps < 0 ||
		    !event_time(d->base_ns, line->timestamp_ns, e->offset_ps, d->wall_offset_ns,
				&ev.start_ns)) {
			d->counts->skipped++;
			continue;
		}
		ev.duration_ns = (uint64_t)e->duration_ps / 1000;
		const struct id_entry *me = index_find(&pc->events, e->metadata_id);
		const Tensorflow__Profiler__XEventMetadata *md = me ? me->value : NULL;
		ev.name = md ? str_or_empty(md->name) : "";
		size_t n = e->n_stats + (md ? md->n_stats : 0);
		if (reserve_scratch(pc, n))
			return -ENOMEM;
		ev.stats = pc->scratch;
		add_stats(pc, &ev, e->stats, e->n_stats);
		if (md)
			add_stats(pc, &ev, md->stats, md->n_stats);
		int r = d->fn(&ev, d->arg);
		if (r)
			return r;
		d->counts->events++;
	}
	return 0;
}

static int64_t decode_plane(struct decode *d, const Tensorflow__Profiler__XPlane *plane,
			    struct rp_err *err)
{
	struct plane_ctx pc = {0};
	int64_t r = plane_index(&pc, plane);
	if (r)
		rp_err_set(err, -ENOMEM, "out of memory indexing XSpace plane %s",
			   str_or_empty(plane->name));
	for (size_t i = 0; !r && i < plane->n_lines; i++)
		if (plane->lines[i])
			r = decode_line(d, &pc, plane->lines[i]);
	if (r == -ENOMEM)
		rp_err_set(err, -ENOMEM, "out of memory decoding XSpace plane %s",
			   str_or_empty(plane->name));
	index_free(&pc.events);
	index_free(&pc.stats);
	free(pc.scratch);
	d->counts->planes++;
	return r;
}

/* The session start that line times are relative to: the Task Environment
 * plane's profile_start_time, or 0 (times are absolute) without one. */
static int64_t session_start_ns(const Tensorflow__Profiler__XSpace *xs)
{
	for (size_t p = 0; p < xs->n_planes; p++) {
		const Tensorflow__Profiler__XPlane *plane = xs->planes[p];
		if (!plane || !plane->name || strcmp(plane->name, TASK_ENV_PLANE))
			continue;
		for (size_t i = 0; i < plane->n_stats; i++) {
			const Tensorflow__Profiler__XStat *st = plane->stats[i];
			const char *name = NULL;
			for (size_t m = 0; st && m < plane->n_stat_metadata; m++)
				if (plane->stat_metadata[m]->key == st->metadata_id &&
				    plane->stat_metadata[m]->value)
					name = plane->stat_metadata[m]->value->name;
			if (!name || strcmp(name, START_TIME_STAT))
				continue;
			if (st->value_case == TENSORFLOW__PROFILER__XSTAT__VALUE_UINT64_VALUE &&
			    st->uint64_value <= INT64_MAX)
				return (int64_t)st->uint64_value;
			if (st->value_case == TENSORFLOW__PROFILER__XSTAT__VALUE_INT64_VALUE)
				return st->int64_value;
		}
	}
	return 0;
}

int64_t rp_xspace_decode(const uint8_t *buf, size_t len, int64_t wall_offset_ns,
			 rp_xla_event_fn fn, void *arg, struct rp_xspace_counts *counts,
			 struct rp_err *err)
{
	struct rp_xspace_counts scratch_counts;
	if (!counts)
		counts = &scratch_counts;
	memset(counts, 0, sizeof(*counts));
	if (len > RP_XSPACE_MAX_BYTES)
		return rp_err_set(err, -E2BIG, "XSpace of %zu bytes is larger than the %zu MiB "
				  "the decoder accepts: profile a shorter window", len,
				  RP_XSPACE_MAX_BYTES >> 20);
	struct rp_pb_arena arena;
	rp_pb_arena_init(&arena, len * RP_XSPACE_MEMORY_FACTOR + (4u << 20));
	Tensorflow__Profiler__XSpace *xs = tensorflow__profiler__xspace__unpack(&arena.alloc, len, buf);
	if (!xs) {
		rp_pb_arena_free(&arena);
		return arena.refused ?
			rp_err_set(err, -ENOMEM, "XSpace of %zu bytes needs more than %d times "
				   "its size in memory to decode: refused as hostile", len,
				   RP_XSPACE_MEMORY_FACTOR) :
			rp_err_set(err, -EBADMSG, "%zu bytes are not a serialized XSpace "
				   "(protobuf decoding failed)", len);
	}
	counts->errors = xs->n_errors;
	if (xs->n_errors && xs->errors[0])
		snprintf(counts->first_error, sizeof(counts->first_error), "%s", xs->errors[0]);
	struct decode d = {
		.base_ns = session_start_ns(xs), .wall_offset_ns = wall_offset_ns,
		.fn = fn, .arg = arg, .counts = counts,
	};
	int64_t r = 0;
	for (size_t p = 0; !r && p < xs->n_planes; p++)
		if (xs->planes[p])
			r = decode_plane(&d, xs->planes[p], err);
	rp_pb_arena_free(&arena);
	return r ? r : (int64_t)counts->events;
}
