/* pprof CPU profile (<host>.cpu.pb.gz): the window's CPU samples,
 * aggregated by (stack, pid, tid), as `go tool pprof` reads them.
 *
 * Each sample has two values, samples/count and cpu/nanoseconds; a
 * sample stands for 1e9 / rate ns of CPU, the sampling rate in force
 * when it was taken.  A session without a recorded rate has no CPU time:
 * its samples count 0 ns, the profile says so in a comment and shows the
 * sample count by default.  Labels pid and tid (numbers) and comm (the
 * thread's name, else the process's) tell threads apart (-tagfocus).
 *
 * Every distinct (pid, address) is symbolized once, into one Location
 * with one Line; functions are interned by (name, file) and mappings by
 * module.  Memory grows with the number of distinct stacks, not samples.
 * The profile is packed by protobuf-c straight into a gzip stream. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb-c.h"
#include "table.h"
#include "writers.h"

#define FRAME_BLOCK 65536 /* frames per arena block */
#define SYM_NAME_MAX 512

/* An open-addressing index of ids (1-based, 0: empty) into an array the
 * caller keeps; each slot remembers its entry's hash to grow without
 * looking at the entries. */
struct slot {
	uint32_t id;
	uint32_t hash;
};

struct index {
	struct slot *slots;
	size_t mask, n;
};

/* Whether entry id (1-based) of ctx has key. */
typedef bool (*index_eq)(const void *ctx, uint32_t id, const void *key);

static bool slot_used(const void *s) { return ((const struct slot *)s)->id != 0; }
static uint64_t slot_hash(const void *s) { return ((const struct slot *)s)->hash; }

/* The slot holding the entry for key, or the empty slot it would take
 * (the index grown first so that it stays at most half full): NULL
 * without memory. */
static struct slot *index_find(struct index *ix, uint32_t hash, index_eq eq, const void *ctx,
			       const void *key)
{
	/* 1024 slots first: a profile has many frames. */
	if (rp_table_reserve(&ix->slots, &ix->mask, ix->n, sizeof(*ix->slots), slot_used, slot_hash,
			     1024) < 0)
		return NULL;
	size_t i = hash & ix->mask;
	while (ix->slots[i].id && (ix->slots[i].hash != hash || !eq(ctx, ix->slots[i].id, key)))
		i = (i + 1) & ix->mask;
	return &ix->slots[i];
}

/* Takes s (empty) for a new entry, whose id the caller has made. */
static void index_take(struct index *ix, struct slot *s, uint32_t id, uint32_t hash)
{
	s->id = id;
	s->hash = hash;
	ix->n++;
}

/* A slot's hash from rp_hash_u64's or rp_hash_str's. */
static uint32_t fold(uint64_t h)
{
	return (uint32_t)(h ^ h >> 32);
}

/* A distinct (pid, tid, stack): frames (leaf first, as sampled) become
 * location ids once the samples are counted. */
struct stack {
	uint32_t pid, tid;
	uint16_t nframes, nkernel;
	uint64_t *frames;
	uint64_t count;
	int64_t cpu_ns;
};

/* A distinct frame: pid 0 for the kernel's. */
struct location {
	uint32_t pid;
	bool kernel;
	uint64_t addr;
	uint64_t mapping_id, function_id;
	int64_t line;
};

struct function {
	int64_t name, system_name, file; /* string indices */
};

struct agg {
	struct rp_reader *r;
	char **strings;
	size_t nstrings, strings_cap;
	struct index string_ix;
	struct stack *stacks;
	size_t nstacks, stacks_cap;
	struct index stack_ix;
	struct location *locs;
	size_t nlocs, locs_cap;
	struct index loc_ix;
	struct function *funcs;
	size_t nfuncs, funcs_cap;
	struct index func_ix;
	int64_t *mappings; /* filename string index of each */
	size_t nmappings, mappings_cap;
	struct index mapping_ix;
	/* Frames of the stacks, in blocks of FRAME_BLOCK (a deeper stack
	 * than that cannot be: RP_STACK_MAX). */
	uint64_t **blocks;
	size_t nblocks, blocks_cap, block_used;
	uint64_t samples, unknown_rate;
};

static bool string_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct agg *a = ctx;
	return strcmp(a->strings[id - 1], key) == 0;
}

/* The string table index of s: -1 without memory. */
static int64_t intern(struct agg *a, const char *s)
{
	uint32_t hash = fold(rp_hash_str(s));
	struct slot *sl = index_find(&a->string_ix, hash, string_eq, a, s);
	if (!sl)
		return -1;
	if (sl->id)
		return sl->id - 1;
	char *copy = strdup(s);
	if (!copy || rp_array_reserve(&a->strings, &a->strings_cap, a->nstrings + 1, sizeof(char *)) < 0) {
		free(copy);
		return -1;
	}
	a->strings[a->nstrings++] = copy;
	index_take(&a->string_ix, sl, (uint32_t)a->nstrings, hash);
	return (int64_t)a->nstrings - 1;
}

static bool stack_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct stack *s = &((const struct agg *)ctx)->stacks[id - 1];
	const struct rp_event *ev = key;
	return s->pid == ev->pid && s->tid == ev->tid && s->nframes == ev->u.sample.nframes &&
	       s->nkernel == ev->u.sample.nkernel &&
	       memcmp(s->frames, ev->u.sample.frames, s->nframes * sizeof(uint64_t)) == 0;
}

/* Room for n frames in the arena: NULL without memory. */
static uint64_t *frames_alloc(struct agg *a, size_t n)
{
	if (!a->nblocks || a->block_used + n > FRAME_BLOCK) {
		uint64_t *block = malloc(FRAME_BLOCK * sizeof(*block));
		if (!block || rp_array_reserve(&a->blocks, &a->blocks_cap, a->nblocks + 1,
					       sizeof(*a->blocks)) < 0) {
			free(block);
			return NULL;
		}
		a->blocks[a->nblocks++] = block;
		a->block_used = 0;
	}
	uint64_t *f = a->blocks[a->nblocks - 1] + a->block_used;
	a->block_used += n;
	return f;
}

static int count_sample(void *ctx, const struct rp_reader_event *e)
{
	struct agg *a = ctx;
	const struct rp_event *ev = e->ev;
	if (ev->kind != RP_EV_CPU_SAMPLE)
		return 0;
	uint64_t h = rp_hash_u64(((uint64_t)ev->pid << 32 | ev->tid) ^
				 ((uint64_t)ev->u.sample.nkernel << 16 | ev->u.sample.nframes));
	for (unsigned i = 0; i < ev->u.sample.nframes; i++)
		h = rp_hash_u64(h ^ ev->u.sample.frames[i]);
	uint32_t hash = fold(h);
	struct slot *sl = index_find(&a->stack_ix, hash, stack_eq, a, ev);
	if (!sl)
		return -ENOMEM;
	if (!sl->id) {
		uint64_t *frames = frames_alloc(a, ev->u.sample.nframes);
		if (!frames || rp_array_reserve(&a->stacks, &a->stacks_cap, a->nstacks + 1,
						sizeof(*a->stacks)) < 0)
			return -ENOMEM;
		memcpy(frames, ev->u.sample.frames, ev->u.sample.nframes * sizeof(uint64_t));
		a->stacks[a->nstacks++] = (struct stack){
			.pid = ev->pid, .tid = ev->tid, .nframes = ev->u.sample.nframes,
			.nkernel = ev->u.sample.nkernel, .frames = frames,
		};
		index_take(&a->stack_ix, sl, (uint32_t)a->nstacks, hash);
	}
	struct stack *s = &a->stacks[sl->id - 1];
	double hz = rp_reader_sample_hz_at(a->r, ev->ts);
	s->count++;
	if (hz > 0)
		s->cpu_ns += llround(1e9 / hz);
	else
		a->unknown_rate++;
	a->samples++;
	return 0;
}

static bool loc_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct location *l = &((const struct agg *)ctx)->locs[id - 1], *k = key;
	return l->addr == k->addr && l->pid == k->pid && l->kernel == k->kernel;
}

static bool func_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct function *f = &((const struct agg *)ctx)->funcs[id - 1], *k = key;
	return f->name == k->name && f->system_name == k->system_name && f->file == k->file;
}

static bool mapping_eq(const void *ctx, uint32_t id, const void *key)
{
	return ((const struct agg *)ctx)->mappings[id - 1] == *(const int64_t *)key;
}

/* The id of the mapping of module (a string index): 0 without memory. */
static uint64_t mapping_id(struct agg *a, int64_t module)
{
	uint32_t hash = fold(rp_hash_u64((uint64_t)module));
	struct slot *sl = index_find(&a->mapping_ix, hash, mapping_eq, a, &module);
	if (!sl)
		return 0;
	if (!sl->id) {
		if (rp_array_reserve(&a->mappings, &a->mappings_cap, a->nmappings + 1, sizeof(*a->mappings)) < 0)
			return 0;
		a->mappings[a->nmappings++] = module;
		index_take(&a->mapping_ix, sl, (uint32_t)a->nmappings, hash);
	}
	return sl->id;
}

static uint64_t function_id(struct agg *a, const struct function *key)
{
	uint32_t hash = fold(rp_hash_u64(rp_hash_u64((uint64_t)key->name) ^ (uint64_t)key->file));
	struct slot *sl = index_find(&a->func_ix, hash, func_eq, a, key);
	if (!sl)
		return 0;
	if (!sl->id) {
		if (rp_array_reserve(&a->funcs, &a->funcs_cap, a->nfuncs + 1, sizeof(*a->funcs)) < 0)
			return 0;
		a->funcs[a->nfuncs++] = *key;
		index_take(&a->func_ix, sl, (uint32_t)a->nfuncs, hash);
	}
	return sl->id;
}

/* The location id of a frame, symbolized the first time it is seen:
 * 0 without memory.  addr is the address to look up (a return address
 * less one). */
static uint64_t location_id(struct agg *a, uint32_t pid, uint64_t addr, bool kernel)
{
	struct location key = { .pid = kernel ? 0 : pid, .kernel = kernel, .addr = addr };
	uint32_t hash = fold(rp_hash_u64(addr * 31 + ((uint64_t)key.pid << 1 | kernel)));
	struct slot *sl = index_find(&a->loc_ix, hash, loc_eq, a, &key);
	if (!sl)
		return 0;
	if (sl->id)
		return sl->id;
	struct rp_symbol sym;
	char buf[SYM_NAME_MAX];
	rp_symbolize(rp_reader_symbolizer(a->r), pid, addr, kernel, &sym);
	const char *module = sym.module ? sym.module : kernel ? "[kernel]" : "[unknown]";
	/* The name people read, and the symbol as the binary has it (the
	 * mangled C++ name) in system_name. */
	struct function fn = { .name = intern(a, rp_symbol_name(&sym, buf, sizeof(buf))),
			       .file = intern(a, sym.file ? sym.file : "") };
	fn.system_name = sym.mangled ? intern(a, sym.mangled) : fn.name;
	int64_t mod = intern(a, module);
	if (fn.name < 0 || fn.system_name < 0 || fn.file < 0 || mod < 0 ||
	    !(key.mapping_id = mapping_id(a, mod)) || !(key.function_id = function_id(a, &fn)) ||
	    rp_array_reserve(&a->locs, &a->locs_cap, a->nlocs + 1, sizeof(*a->locs)) < 0)
		return 0;
	key.line = sym.line;
	a->locs[a->nlocs++] = key;
	index_take(&a->loc_ix, sl, (uint32_t)a->nlocs, hash);
	return a->nlocs;
}

/* Every frame of every stack into its location id. */
static int locate_frames(struct agg *a)
{
	for (size_t k = 0; k < a->nstacks; k++) {
		struct stack *s = &a->stacks[k];
		for (unsigned i = 0; i < s->nframes; i++) {
			uint64_t ip = rp_frame_address(s->frames, s->nkernel, i);
			if (!(s->frames[i] = location_id(a, s->pid, ip, i < s->nkernel)))
				return -ENOMEM;
		}
	}
	return 0;
}

/* Appends to a gzip stream on out, through a staging buffer (protobuf-c
 * appends field by field). */
struct gz_out {
	ProtobufCBuffer base;
	FILE *out;
	z_stream z;
	int error; /* errno of the first failure */
	size_t staged;
	uint8_t stage[1 << 16], deflated[1 << 16];
};

static void gz_deflate(struct gz_out *g, const uint8_t *data, size_t len, int flush)
{
	g->z.next_in = (Bytef *)data;
	g->z.avail_in = (uInt)len;
	int zr;
	do {
		g->z.next_out = g->deflated;
		g->z.avail_out = sizeof(g->deflated);
		zr = deflate(&g->z, flush);
		size_t n = sizeof(g->deflated) - g->z.avail_out;
		if (n && !g->error && fwrite(g->deflated, 1, n, g->out) != n)
			g->error = errno ? errno : EIO;
	} while (g->z.avail_out == 0 || (flush == Z_FINISH && zr == Z_OK));
	if (zr == Z_STREAM_ERROR && !g->error)
		g->error = EINVAL;
}

static void gz_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	struct gz_out *g = (struct gz_out *)b;
	if (g->staged + len > sizeof(g->stage)) {
		gz_deflate(g, g->stage, g->staged, Z_NO_FLUSH);
		g->staged = 0;
	}
	if (len > sizeof(g->stage)) {
		gz_deflate(g, data, len, Z_NO_FLUSH);
		return;
	}
	memcpy(g->stage + g->staged, data, len);
	g->staged += len;
}

/* The profile, packed and gzipped into out. */
static int write_gz(const Perftools__Profiles__Profile *p, FILE *out, struct rp_err *err)
{
	struct gz_out *g = calloc(1, sizeof(*g));
	if (!g)
		return rp_err_set(err, -ENOMEM, "out of memory for the pprof profile's gzip stream");
	g->base.append = gz_append;
	g->out = out;
	/* 15 + 16: a gzip header and trailer around the deflate stream. */
	if (deflateInit2(&g->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		free(g);
		return rp_err_set(err, -ENOMEM, "out of memory for the pprof profile's gzip stream");
	}
	protobuf_c_message_pack_to_buffer(&p->base, &g->base);
	gz_deflate(g, g->stage, g->staged, Z_FINISH);
	deflateEnd(&g->z);
	int e = g->error;
	free(g);
	if (e)
		return rp_err_set(err, -e, "cannot write the pprof profile: %s%s", strerror(e),
				  e == ENOSPC ? " (free space on its file system)" : "");
	return 0;
}

/* Builds the Profile message over the aggregated tables (pointers into
 * them, so nothing is copied) and writes it. */
static int emit(struct agg *a, FILE *out, struct rp_err *err)
{
	struct rp_reader *r = a->r;
	uint64_t t0 = rp_reader_start_ns(r), t1 = rp_reader_end_ns(r);
	double hz = rp_reader_sample_hz_at(r, t0);
	int64_t s_samples = intern(a, "samples"), s_count = intern(a, "count");
	int64_t s_cpu = intern(a, "cpu"), s_ns = intern(a, "nanoseconds");
	int64_t s_pid = intern(a, "pid"), s_tid = intern(a, "tid"), s_comm = intern(a, "comm");
	int64_t comment = 0;
	if (a->unknown_rate) {
		char note[160];
		snprintf(note, sizeof(note), "%llu of %llu samples have no recorded sampling rate: "
			 "their cpu time is 0; see the samples count",
			 (unsigned long long)a->unknown_rate, (unsigned long long)a->samples);
		comment = intern(a, note);
	}
	if (s_samples < 0 || s_count < 0 || s_cpu < 0 || s_ns < 0 || s_pid < 0 || s_tid < 0 ||
	    s_comm < 0 || comment < 0)
		return -ENOMEM;

	Perftools__Profiles__ValueType types[2], period_type;
	Perftools__Profiles__ValueType *type_ptrs[2] = { &types[0], &types[1] };
	perftools__profiles__value_type__init(&types[0]);
	types[0].type = s_samples;
	types[0].unit = s_count;
	perftools__profiles__value_type__init(&types[1]);
	types[1].type = s_cpu;
	types[1].unit = s_ns;
	perftools__profiles__value_type__init(&period_type);
	period_type.type = s_cpu;
	period_type.unit = s_ns;

	size_t ns = a->nstacks, nl = a->nlocs, nf = a->nfuncs, nm = a->nmappings;
	int rc = -ENOMEM;
	Perftools__Profiles__Sample *samples = calloc(ns + 1, sizeof(*samples));
	Perftools__Profiles__Sample **sample_ptrs = calloc(ns + 1, sizeof(*sample_ptrs));
	Perftools__Profiles__Label *labels = calloc(3 * ns + 1, sizeof(*labels));
	Perftools__Profiles__Label **label_ptrs = calloc(3 * ns + 1, sizeof(*label_ptrs));
	int64_t *values = calloc(2 * ns + 1, sizeof(*values));
	Perftools__Profiles__Location *locs = calloc(nl + 1, sizeof(*locs));
	Perftools__Profiles__Location **loc_ptrs = calloc(nl + 1, sizeof(*loc_ptrs));
	Perftools__Profiles__Line *lines = calloc(nl + 1, sizeof(*lines));
	Perftools__Profiles__Line **line_ptrs = calloc(nl + 1, sizeof(*line_ptrs));
	Perftools__Profiles__Function *funcs = calloc(nf + 1, sizeof(*funcs));
	Perftools__Profiles__Function **func_ptrs = calloc(nf + 1, sizeof(*func_ptrs));
	Perftools__Profiles__Mapping *maps = calloc(nm + 1, sizeof(*maps));
	Perftools__Profiles__Mapping **map_ptrs = calloc(nm + 1, sizeof(*map_ptrs));
	if (!samples || !sample_ptrs || !labels || !label_ptrs || !values || !locs || !loc_ptrs ||
	    !lines || !line_ptrs || !funcs || !func_ptrs || !maps || !map_ptrs)
		goto out;

	for (size_t k = 0; k < ns; k++) {
		const struct stack *s = &a->stacks[k];
		Perftools__Profiles__Sample *smp = &samples[k];
		Perftools__Profiles__Label *l = &labels[3 * k];
		const char *comm = rp_reader_thread_name(r, s->pid, s->tid);
		if (!comm)
			comm = rp_reader_process_name(r, s->pid);
		int64_t comm_ix = comm ? intern(a, comm) : 0;
		if (comm_ix < 0)
			goto out;
		perftools__profiles__sample__init(smp);
		sample_ptrs[k] = smp;
		smp->n_location_id = s->nframes;
		smp->location_id = s->frames;
		smp->n_value = 2;
		smp->value = &values[2 * k];
		smp->value[0] = (int64_t)s->count;
		smp->value[1] = s->cpu_ns;
		for (int i = 0; i < 3; i++) {
			perftools__profiles__label__init(&l[i]);
			label_ptrs[3 * k + (size_t)i] = &l[i];
		}
		l[0].key = s_pid;
		l[0].num = s->pid;
		l[1].key = s_tid;
		l[1].num = s->tid;
		l[2].key = s_comm;
		l[2].str = comm_ix;
		smp->n_label = comm ? 3 : 2; /* no comm label without a name */
		smp->label = &label_ptrs[3 * k];
	}
	for (size_t i = 0; i < nl; i++) {
		perftools__profiles__location__init(&locs[i]);
		perftools__profiles__line__init(&lines[i]);
		loc_ptrs[i] = &locs[i];
		line_ptrs[i] = &lines[i];
		locs[i].id = i + 1;
		locs[i].mapping_id = a->locs[i].mapping_id;
		locs[i].address = a->locs[i].addr;
		locs[i].n_line = 1;
		locs[i].line = &line_ptrs[i];
		lines[i].function_id = a->locs[i].function_id;
		lines[i].line = a->locs[i].line;
	}
	for (size_t i = 0; i < nf; i++) {
		perftools__profiles__function__init(&funcs[i]);
		func_ptrs[i] = &funcs[i];
		funcs[i].id = i + 1;
		funcs[i].name = a->funcs[i].name;
		funcs[i].system_name = a->funcs[i].system_name;
		funcs[i].filename = a->funcs[i].file;
	}
	for (size_t i = 0; i < nm; i++) {
		perftools__profiles__mapping__init(&maps[i]);
		map_ptrs[i] = &maps[i];
		maps[i].id = i + 1;
		maps[i].filename = a->mappings[i];
		maps[i].has_functions = true;
	}

	Perftools__Profiles__Profile p;
	perftools__profiles__profile__init(&p);
	p.n_sample_type = 2;
	p.sample_type = type_ptrs;
	p.n_sample = ns;
	p.sample = sample_ptrs;
	p.n_mapping = nm;
	p.mapping = map_ptrs;
	p.n_location = nl;
	p.location = loc_ptrs;
	p.n_function = nf;
	p.function = func_ptrs;
	p.n_string_table = a->nstrings;
	p.string_table = a->strings;
	p.time_nanos = (int64_t)t0 + rp_reader_wall_offset_ns(r);
	p.duration_nanos = (int64_t)(t1 - t0);
	p.period_type = &period_type;
	p.period = hz > 0 ? llround(1e9 / hz) : 0;
	if (comment) {
		p.n_comment = 1;
		p.comment = &comment;
	}
	if (a->unknown_rate == a->samples && a->samples)
		p.default_sample_type = s_samples; /* no CPU time at all */
	rc = write_gz(&p, out, err);
out:
	free(samples);
	free(sample_ptrs);
	free(labels);
	free(label_ptrs);
	free(values);
	free(locs);
	free(loc_ptrs);
	free(lines);
	free(line_ptrs);
	free(funcs);
	free(func_ptrs);
	free(maps);
	free(map_ptrs);
	return rc;
}

static void free_agg(struct agg *a)
{
	for (size_t i = 0; i < a->nstrings; i++)
		free(a->strings[i]);
	free(a->strings);
	free(a->string_ix.slots);
	free(a->stacks);
	free(a->stack_ix.slots);
	free(a->locs);
	free(a->loc_ix.slots);
	free(a->funcs);
	free(a->func_ix.slots);
	free(a->mappings);
	free(a->mapping_ix.slots);
	for (size_t i = 0; i < a->nblocks; i++)
		free(a->blocks[i]);
	free(a->blocks);
}

int rp_write_pprof(struct rp_reader *r, FILE *out, struct rp_err *err)
{
	struct agg a = { .r = r };
	int rc = intern(&a, "") < 0 ? -ENOMEM : 0; /* string_table[0] */
	if (rc == 0)
		rc = rp_reader_each(r, count_sample, &a, err);
	if (rc == 0)
		rc = locate_frames(&a);
	if (rc == 0)
		rc = emit(&a, out, err);
	free_agg(&a);
	if (rc == -ENOMEM)
		return rp_err_set(err, rc, "out of memory aggregating %llu CPU samples for pprof",
				  (unsigned long long)a.samples);
	return rc;
}
