/* Chunk builder and reader.  The payload encoding is specified in
 * docs/ring-format.md, "Chunk payload"; keep the two in step. */
#include "chunk.h"

#include <endian.h>
#include <errno.h>
#include <lz4.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	TAG_DEF_STRING = 0x40,
	TAG_DEF_STACK = 0x41,
	TAG_DEF_THREAD = 0x42,
	/* kind | TAG_EXT: the kind's record, then its extension fields
	 * (fields added later, written only when set, so that chunks without
	 * them read as before). */
	TAG_EXT = 0x80,
};

/* Kinds that carry a name id. */
#define NAMED_KINDS                                                              \
	((1u << RP_EV_RANGE_BEGIN) | (1u << RP_EV_INSTANT) | (1u << RP_EV_COUNTER) | \
	 (1u << RP_EV_GPU_ACTIVITY) | (1u << RP_EV_API_CALL) |                     \
	 (1u << RP_EV_PROCESS_NAME) | (1u << RP_EV_THREAD_NAME) |                   \
	 (1u << RP_EV_MAPPING) | (1u << RP_EV_PROCESS_CMDLINE) | (1u << RP_EV_DEVICE_INFO) | \
	 (1u << RP_EV_PY_CODE) | (1u << RP_EV_DEVICE_OP))
/* Kinds with extension fields (TAG_EXT). */
#define EXT_KINDS ((1u << RP_EV_API_CALL) | (1u << RP_EV_GPU_ACTIVITY))
/* Kinds this build knows. */
#define KNOWN_KINDS ((1u << (RP_EV_KIND_MAX + 1)) - 2)

/* Most bytes one add can write: a thread definition (11) plus either a
 * string definition (258) and a mapping record (72), three string
 * definitions and a device op record (774 + 81), or a 127-frame stack
 * definition (1273) and a sample record (26).  Checking the target before
 * an add therefore bounds the raw size by target + ENC_MAX. */
#define ENC_MAX 1536
/* Smallest chunk accepted: one worst-case event must always fit. */
#define MIN_CHUNK_BYTES 4096
/* Counters that are integers of at most this magnitude are stored as
 * varints; every such integer is exact in a double. */
#define COUNTER_INT_MAX 9007199254740992.0 /* 2^53 */

/* ---- varints ------------------------------------------------------------ */

static inline uint8_t *put_u(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* Zigzag over the two's-complement difference: small negative and
 * positive deltas both encode short, and every uint64 pair round-trips. */
static inline uint64_t zz(uint64_t d) { return (d << 1) ^ (0 - (d >> 63)); }
static inline uint64_t unzz(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

/* ---- hashing ------------------------------------------------------------ */

static inline uint64_t ld8(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint64_t ld4(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* 64x64->128 multiply folded to 64 bits: one strong mixing step. */
static inline uint64_t mum(uint64_t a, uint64_t b)
{
	unsigned __int128 r = (unsigned __int128)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

#define K0 0xa0761d6478bd642full
#define K1 0xe7037ed1a0b428dbull

/* In-memory hash for the intern tables (wyhash-like).  The last 16 bytes
 * (or all of a shorter key) are kept in a and b: keys of up to 16 bytes
 * are equal exactly when their lengths, a and b are, so looking up a
 * short name needs no memcmp. */
struct fingerprint {
	uint64_t a, b;
	uint32_t hash;
};

static inline struct fingerprint fingerprint(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *s = p;
	uint64_t a = 0, b = 0, h = seed ^ K0 ^ n;
	if (n > 16) {
		size_t i = n;
		for (; i > 16; i -= 16, s += 16)
			h = mum(ld8(s) ^ K1, ld8(s + 8) ^ h);
		a = ld8(s + i - 16);
		b = ld8(s + i - 8);
	} else if (n >= 8) {
		a = ld8(s);
		b = ld8(s + n - 8);
	} else if (n >= 4) {
		a = ld4(s);
		b = ld4(s + n - 4);
	} else if (n) {
		a = (uint64_t)s[0] << 16 | (uint64_t)s[n >> 1] << 8 | s[n - 1];
	}
	h = mum(a ^ K1, b ^ h);
	return (struct fingerprint){a, b, (uint32_t)(h ^ h >> 32)};
}

static inline uint32_t hash_key(uint64_t key)
{
	uint64_t h = mum(key ^ K0, K1);
	return (uint32_t)(h ^ h >> 32);
}

/* ---- builder ------------------------------------------------------------ */

/* Open-addressing intern table.  A slot is live only when its gen equals
 * the builder's, so resetting every table per chunk is one increment. */
struct slot {
	uint32_t gen, hash, id;
};
struct table {
	struct slot *slots;
	uint32_t mask; /* slots - 1; 0 before the first allocation */
	uint32_t n;    /* ids handed out this chunk (ids run 1..n) */
};

struct str_ent {
	uint64_t a, b; /* from the fingerprint */
	uint32_t off;  /* in str_arena */
	uint32_t len;
};
struct stk_ent {
	uint32_t off; /* in frame_arena */
	uint16_t nframes, nkernel;
};

struct rp_chunk_builder {
	uint32_t device_id;
	size_t max_chunk;            /* effective limit, header included */
	size_t target;               /* -ENOSPC once the raw size reaches it */
	size_t target_min, target_max;

	uint8_t *raw;
	size_t len, cap;
	uint32_t *ev_end; /* raw offset after each event: prefix boundaries */
	uint32_t count, ev_cap;

	uint64_t prev_ts, min_ts, max_ts, opened_ts, dropped;

	uint32_t gen;
	struct table strs, stks, thrs;
	struct str_ent *str_ent;     /* by id - 1, capacity (mask+1)/2 */
	char *str_arena;
	size_t str_len, str_cap;
	struct stk_ent *stk_ent;
	uint64_t *frame_arena;
	size_t frame_len, frame_cap;
	uint64_t *thr_key;           /* pid << 32 | tid, by id - 1 */
	struct {
		uint64_t key;
		uint32_t id;         /* 0: empty */
	} thr_cache[8];              /* direct-mapped, in front of thrs */
	bool defined;                /* a definition was added: see reserve */

	struct rp_chunk_reader *split; /* decodes a remainder after a split */
};

/* Largest raw size whose worst-case LZ4 output still fits max bytes. */
static size_t raw_fitting(size_t max)
{
	size_t room = max - RP_CHUNK_HEADER_SIZE;
	size_t raw = (room - 16) * 255 / 256;
	while ((size_t)LZ4_compressBound((int)(raw + 1)) <= room)
		raw++;
	while ((size_t)LZ4_compressBound((int)raw) > room)
		raw--;
	return raw;
}

static void reset_chunk(struct rp_chunk_builder *b)
{
	b->len = 0;
	b->count = 0;
	b->prev_ts = 0;
	b->min_ts = UINT64_MAX;
	b->max_ts = 0;
	b->opened_ts = 0;
	b->dropped = 0;
	b->strs.n = b->stks.n = b->thrs.n = 0;
	b->str_len = b->frame_len = 0;
	memset(b->thr_cache, 0, sizeof(b->thr_cache));
	b->defined = true;
	if (++b->gen == 0) {
		/* After 2^32 chunks the generation wraps: clear for real once. */
		struct table *t[] = {&b->strs, &b->stks, &b->thrs};
		for (size_t i = 0; i < 3; i++)
			if (t[i]->slots)
				memset(t[i]->slots, 0, (t[i]->mask + 1) * sizeof(struct slot));
		b->gen = 1;
	}
}

int rp_chunk_builder_new(uint32_t device_id, size_t max_chunk_bytes,
			 struct rp_chunk_builder **out)
{
	if (max_chunk_bytes < MIN_CHUNK_BYTES)
		return -EINVAL;
	struct rp_chunk_builder *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	size_t largest = RP_CHUNK_MAX;
	b->device_id = device_id;
	b->max_chunk = max_chunk_bytes < largest ? max_chunk_bytes : largest;
	b->target_max = RP_CHUNK_RAW_MAX - ENC_MAX;
	if (b->target_max / 8 > b->max_chunk)
		b->target_max = 8 * b->max_chunk;
	b->target_min = raw_fitting(b->max_chunk) - ENC_MAX;
	if (b->target_min > b->target_max)
		b->target_min = b->target_max;
	b->target = b->target_min;
	reset_chunk(b);
	*out = b;
	return 0;
}

void rp_chunk_builder_free(struct rp_chunk_builder *b)
{
	if (!b)
		return;
	rp_chunk_reader_free(b->split);
	free(b->raw);
	free(b->ev_end);
	free(b->strs.slots);
	free(b->stks.slots);
	free(b->thrs.slots);
	free(b->str_ent);
	free(b->str_arena);
	free(b->stk_ent);
	free(b->frame_arena);
	free(b->thr_key);
	free(b);
}

uint32_t rp_chunk_builder_count(const struct rp_chunk_builder *b) { return b->count; }
uint64_t rp_chunk_builder_opened_ts(const struct rp_chunk_builder *b) { return b->opened_ts; }
size_t rp_chunk_builder_room(const struct rp_chunk_builder *b)
{
	return b->len < b->target ? b->target - b->len : 0;
}

/* Make the array *pp (any object pointer, capacity *cap elements of elem
 * bytes) hold need elements, doubling.  memcpy moves the pointer so one
 * function serves every element type without type punning. */
static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	void *p;
	memcpy(&p, pp, sizeof(p));
	p = realloc(p, n * elem);
	if (!p)
		return -ENOMEM;
	memcpy(pp, &p, sizeof(p));
	*cap = n;
	return 0;
}

/* Double t (rehashing live slots) and its per-id array *ent. */
static int table_grow(struct table *t, uint32_t gen, void *ent, size_t elem)
{
	uint32_t size = t->slots ? (t->mask + 1) * 2 : 256;
	struct slot *s = calloc(size, sizeof(*s));
	if (!s)
		return -ENOMEM;
	size_t ids = t->slots ? (t->mask + 1) / 2 : 0;
	if (grow(ent, &ids, size / 2, elem) < 0) {
		free(s);
		return -ENOMEM;
	}
	for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
		if (t->slots[i].gen != gen)
			continue;
		uint32_t j = t->slots[i].hash & (size - 1);
		while (s[j].gen == gen)
			j = (j + 1) & (size - 1);
		s[j] = t->slots[i];
	}
	free(t->slots);
	t->slots = s;
	t->mask = size - 1;
	return 0;
}

static inline bool table_full(const struct table *t)
{
	return t->n >= (t->mask + 1) / 2;
}

/* Make room for one more event of any shape, so that encoding it cannot
 * fail half-way and leave a definition the raw buffer does not hold.
 * Tables and arenas only fill up when a definition is added, so they are
 * checked only after one was. */
static int reserve(struct rp_chunk_builder *b)
{
	size_t ev_cap = b->ev_cap;
	int rc = grow(&b->raw, &b->cap, b->len + ENC_MAX, 1);
	if (!rc)
		rc = grow(&b->ev_end, &ev_cap, (size_t)b->count + 1, sizeof(uint32_t));
	b->ev_cap = (uint32_t)ev_cap;
	if (!rc && table_full(&b->strs))
		rc = table_grow(&b->strs, b->gen, &b->str_ent, sizeof(struct str_ent));
	if (!rc && table_full(&b->stks))
		rc = table_grow(&b->stks, b->gen, &b->stk_ent, sizeof(struct stk_ent));
	if (!rc && table_full(&b->thrs))
		rc = table_grow(&b->thrs, b->gen, &b->thr_key, sizeof(uint64_t));
	if (!rc)
		rc = grow(&b->str_arena, &b->str_cap, b->str_len + RP_NAME_MAX, 1);
	if (!rc)
		rc = grow(&b->frame_arena, &b->frame_cap, b->frame_len + RP_STACK_MAX,
			  sizeof(uint64_t));
	b->defined = rc < 0;
	return rc;
}

static inline bool need_reserve(const struct rp_chunk_builder *b)
{
	return b->len + ENC_MAX > b->cap || b->count >= b->ev_cap || b->defined;
}

static inline uint32_t intern_thread(struct rp_chunk_builder *b, uint32_t pid, uint32_t tid,
				     uint8_t **pp)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	unsigned c = (pid ^ tid) & 7;
	if (b->thr_cache[c].id && b->thr_cache[c].key == key)
		return b->thr_cache[c].id;
	uint32_t h = hash_key(key);
	struct table *t = &b->thrs;
	uint32_t i = h & t->mask;
	for (; t->slots[i].gen == b->gen; i = (i + 1) & t->mask)
		if (t->slots[i].hash == h && b->thr_key[t->slots[i].id - 1] == key)
			goto found;
	t->slots[i] = (struct slot){b->gen, h, ++t->n};
	b->thr_key[t->n - 1] = key;
	b->defined = true;
	uint8_t *p = *pp;
	*p++ = TAG_DEF_THREAD;
	p = put_u(p, pid);
	*pp = put_u(p, tid);
found:
	b->thr_cache[c].key = key;
	b->thr_cache[c].id = t->slots[i].id;
	return t->slots[i].id;
}

static inline uint32_t intern_string(struct rp_chunk_builder *b, const char *s, uint8_t **pp)
{
	size_t n = strnlen(s, RP_NAME_MAX); /* longer names are truncated */
	struct fingerprint f = fingerprint(s, n, 0);
	struct table *t = &b->strs;
	uint32_t i = f.hash & t->mask;
	for (; t->slots[i].gen == b->gen; i = (i + 1) & t->mask) {
		if (t->slots[i].hash != f.hash)
			continue;
		const struct str_ent *e = &b->str_ent[t->slots[i].id - 1];
		if (e->len == n && e->a == f.a && e->b == f.b &&
		    (n <= 16 || memcmp(b->str_arena + e->off, s, n) == 0))
			return t->slots[i].id;
	}
	t->slots[i] = (struct slot){b->gen, f.hash, ++t->n};
	b->str_ent[t->n - 1] = (struct str_ent){f.a, f.b, (uint32_t)b->str_len, (uint32_t)n};
	memcpy(b->str_arena + b->str_len, s, n);
	b->str_len += n;
	b->defined = true;
	uint8_t *p = *pp;
	*p++ = TAG_DEF_STRING;
	p = put_u(p, n);
	memcpy(p, s, n);
	*pp = p + n;
	return t->n;
}

static uint32_t intern_stack(struct rp_chunk_builder *b, const uint64_t *frames,
			     uint16_t nframes, uint16_t nkernel, uint8_t **pp)
{
	uint32_t h = fingerprint(frames, nframes * sizeof(uint64_t), nkernel).hash;
	struct table *t = &b->stks;
	uint32_t i = h & t->mask;
	for (; t->slots[i].gen == b->gen; i = (i + 1) & t->mask) {
		if (t->slots[i].hash != h)
			continue;
		const struct stk_ent *e = &b->stk_ent[t->slots[i].id - 1];
		if (e->nframes == nframes && e->nkernel == nkernel &&
		    memcmp(b->frame_arena + e->off, frames, nframes * sizeof(uint64_t)) == 0)
			return t->slots[i].id;
	}
	t->slots[i] = (struct slot){b->gen, h, ++t->n};
	b->stk_ent[t->n - 1] = (struct stk_ent){(uint32_t)b->frame_len, nframes, nkernel};
	memcpy(b->frame_arena + b->frame_len, frames, nframes * sizeof(uint64_t));
	b->frame_len += nframes;
	b->defined = true;
	uint8_t *p = *pp;
	*p++ = TAG_DEF_STACK;
	p = put_u(p, nframes);
	p = put_u(p, nkernel);
	uint64_t prev = 0;
	for (uint16_t k = 0; k < nframes; k++) {
		p = put_u(p, zz(frames[k] - prev));
		prev = frames[k];
	}
	*pp = p;
	return t->n;
}

static inline uint8_t *put_counter(uint8_t *p, double v)
{
	/* Integral values (the common case: bytes, counts) as zigzag + 1;
	 * everything else, -0.0, NaN and inf included, bit-exact after a 0. */
	if (v >= -COUNTER_INT_MAX && v <= COUNTER_INT_MAX) {
		int64_t i = (int64_t)v;
		if ((double)i == v && (i != 0 || !__builtin_signbit(v)))
			return put_u(p, zz((uint64_t)i) + 1);
	}
	uint64_t bits;
	memcpy(&bits, &v, 8);
	bits = htole64(bits);
	*p++ = 0;
	memcpy(p, &bits, 8);
	return p + 8;
}

static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* Whether ev needs its kind's extension fields. */
static bool has_ext(const struct rp_event *ev)
{
	return (ev->kind == RP_EV_API_CALL && ev->u.api.correlation) ||
	       (ev->kind == RP_EV_GPU_ACTIVITY && ev->u.gpu.launch.block[0]);
}

/* A kernel's launch configuration, in the order the chunk holds it. */
static const size_t launch_fields[] = {
	offsetof(struct rp_gpu_launch, grid[0]),  offsetof(struct rp_gpu_launch, grid[1]),
	offsetof(struct rp_gpu_launch, grid[2]),  offsetof(struct rp_gpu_launch, block[0]),
	offsetof(struct rp_gpu_launch, block[1]), offsetof(struct rp_gpu_launch, block[2]),
	offsetof(struct rp_gpu_launch, registers), offsetof(struct rp_gpu_launch, static_shared),
	offsetof(struct rp_gpu_launch, dynamic_shared),
};
#define LAUNCH_FIELDS (sizeof(launch_fields) / sizeof(launch_fields[0]))

static int add_event(struct rp_chunk_builder *b, const struct rp_event *ev, bool force)
{
	unsigned kind = ev->kind;
	if (kind < 1 || kind > RP_EV_KIND_MAX || !(KNOWN_KINDS >> kind & 1))
		return -EINVAL;
	if (kind == RP_EV_DEVICE_OP && ev->u.op.end < ev->ts)
		return -EINVAL;
	if (kind == RP_EV_CPU_SAMPLE &&
	    (ev->u.sample.nframes > RP_STACK_MAX || ev->u.sample.nkernel > ev->u.sample.nframes ||
	     (ev->u.sample.nframes && !ev->u.sample.frames)))
		return -EINVAL;
	if (kind == RP_EV_MAPPING && (ev->u.mapping.end < ev->u.mapping.start ||
				      ev->u.mapping.build_id_len > RP_BUILD_ID_MAX))
		return -EINVAL;
	if (kind == RP_EV_PY_CODE && (ev->u.py_code.code > RP_PY_CODE_MASK ||
				      ev->u.py_code.lasti > RP_PY_LASTI_MAX))
		return -EINVAL;
	if (!force && b->len >= b->target)
		return -ENOSPC;
	if (need_reserve(b)) {
		int rc = reserve(b);
		if (rc < 0)
			return rc;
	}

	/* Definitions first, then the event that uses them. */
	uint8_t *p = b->raw + b->len;
	uint32_t thr = intern_thread(b, ev->pid, ev->tid, &p);
	uint32_t name = 0, stack = 0;
	if ((NAMED_KINDS >> kind & 1) && ev->name)
		name = intern_string(b, ev->name, &p);
	uint32_t op = 0, module = 0;
	if (kind == RP_EV_DEVICE_OP) {
		if (ev->u.op.hlo_op)
			op = intern_string(b, ev->u.op.hlo_op, &p);
		if (ev->u.op.hlo_module)
			module = intern_string(b, ev->u.op.hlo_module, &p);
	}
	if (kind == RP_EV_CPU_SAMPLE && ev->u.sample.nframes)
		stack = intern_stack(b, ev->u.sample.frames, ev->u.sample.nframes,
				     ev->u.sample.nkernel, &p);

	bool ext = has_ext(ev);
	*p++ = (uint8_t)(kind | (ext ? TAG_EXT : 0));
	p = put_u(p, zz(ev->ts - b->prev_ts));
	p = put_u(p, thr);
	if (NAMED_KINDS >> kind & 1)
		p = put_u(p, name);
	switch (kind) {
	case RP_EV_CPU_SAMPLE:
		p = put_u(p, ev->u.sample.cpu);
		p = put_u(p, stack);
		break;
	case RP_EV_COUNTER:
		p = put_counter(p, ev->u.counter.value);
		break;
	case RP_EV_GPU_ACTIVITY:
		*p++ = ev->u.gpu.kind;
		p = put_u(p, ev->u.gpu.device);
		p = put_u(p, ev->u.gpu.stream);
		p = put_u(p, ev->u.gpu.correlation);
		p = put_u(p, ev->u.gpu.bytes);
		p = put_u(p, zz(ev->u.gpu.end - ev->ts));
		for (size_t i = 0; ext && i < LAUNCH_FIELDS; i++) {
			uint32_t f;
			memcpy(&f, (const char *)&ev->u.gpu.launch + launch_fields[i], sizeof(f));
			p = put_u(p, f);
		}
		break;
	case RP_EV_API_CALL:
		p = put_u(p, ev->u.api.duration);
		p = put_u(p, ev->u.api.device);
		if (ext)
			p = put_u(p, ev->u.api.correlation);
		break;
	case RP_EV_DROPS:
		p = put_u(p, ev->u.drops.count);
		b->dropped = sat_add(b->dropped, ev->u.drops.count);
		break;
	case RP_EV_DEVICE_OP:
		p = put_u(p, op);
		p = put_u(p, module);
		p = put_u(p, ev->u.op.device);
		p = put_u(p, ev->u.op.line);
		p = put_u(p, ev->u.op.program_id);
		p = put_u(p, ev->u.op.flops);
		p = put_u(p, ev->u.op.bytes_accessed);
		p = put_u(p, ev->u.op.end - ev->ts);
		break;
	case RP_EV_MAPPING:
		p = put_u(p, ev->u.mapping.start);
		p = put_u(p, ev->u.mapping.end - ev->u.mapping.start);
		p = put_u(p, ev->u.mapping.offset);
		*p++ = ev->u.mapping.build_id_len;
		memcpy(p, ev->u.mapping.build_id, ev->u.mapping.build_id_len);
		p += ev->u.mapping.build_id_len;
		break;
	case RP_EV_PY_CODE:
		p = put_u(p, ev->u.py_code.code);
		p = put_u(p, ev->u.py_code.lasti);
		p = put_u(p, ev->u.py_code.line);
		break;
	case RP_EV_DEVICE_INFO:
		*p++ = ev->u.device.kind;
		p = put_u(p, ev->u.device.index);
		break;
	default: /* range begin/end, instant, process/thread name, cmdline: no more */
		break;
	}

	if (b->count == 0)
		b->opened_ts = ev->ts;
	b->prev_ts = ev->ts;
	if (ev->ts < b->min_ts)
		b->min_ts = ev->ts;
	if (ev->ts > b->max_ts)
		b->max_ts = ev->ts;
	b->len = (size_t)(p - b->raw);
	b->ev_end[b->count++] = (uint32_t)b->len;
	return 0;
}

int rp_chunk_builder_add(struct rp_chunk_builder *b, const struct rp_event *ev)
{
	return add_event(b, ev, false);
}

/* ---- reader ------------------------------------------------------------- */

struct stack_ref {
	uint32_t off; /* in frames */
	uint16_t nframes, nkernel;
};

struct rp_chunk_reader {
	struct rp_chunk_header hdr;
	bool loaded, failed;
	uint8_t *raw;
	size_t raw_cap, len, pos;
	uint32_t nread;
	uint64_t prev_ts;

	uint32_t *str_off; /* by id - 1, into names (NUL-terminated) */
	size_t nstr, str_cap;
	char *names;
	size_t names_len, names_cap;
	struct stack_ref *stk;
	size_t nstk, stk_cap;
	uint64_t *frames;
	size_t frames_len, frames_cap;
	uint32_t (*thr)[2]; /* pid, tid by id - 1 */
	size_t nthr, thr_cap;
};

int rp_chunk_reader_new(struct rp_chunk_reader **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void rp_chunk_reader_free(struct rp_chunk_reader *r)
{
	if (!r)
		return;
	free(r->raw);
	free(r->str_off);
	free(r->names);
	free(r->stk);
	free(r->frames);
	free(r->thr);
	free(r);
}

const struct rp_chunk_header *rp_chunk_reader_header(const struct rp_chunk_reader *r)
{
	return r->loaded ? &r->hdr : NULL;
}

/* Start walking r->raw[0..len) as the payload described by hdr. */
static void reader_start(struct rp_chunk_reader *r, const struct rp_chunk_header *hdr,
			 size_t len)
{
	r->hdr = *hdr;
	r->len = len;
	r->pos = 0;
	r->nread = 0;
	r->prev_ts = 0;
	r->nstr = r->nstk = r->nthr = 0;
	r->names_len = r->frames_len = 0;
	r->failed = false;
	r->loaded = true;
}

int rp_chunk_reader_load(struct rp_chunk_reader *r, const void *buf, size_t len,
			 struct rp_err *err)
{
	struct rp_chunk_header h;
	r->loaded = false;
	int rc = rp_chunk_header_check(buf, len, &h, err);
	if (rc < 0)
		return rc;
	if (h.comp_size > (uint32_t)LZ4_compressBound((int)h.raw_size))
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk seq %llu: %u compressed bytes cannot come from %u raw bytes",
				  (unsigned long long)h.seq, h.comp_size, h.raw_size);
	if (grow(&r->raw, &r->raw_cap, h.raw_size, 1) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory for a %u-byte chunk", h.raw_size);
	if (h.raw_size) {
		int n = LZ4_decompress_safe((const char *)buf + RP_CHUNK_HEADER_SIZE,
					    (char *)r->raw, (int)h.comp_size, (int)h.raw_size);
		if (n != (int)h.raw_size)
			return rp_err_set(err, -EBADMSG,
					  "corrupt chunk seq %llu: LZ4 payload does not decompress to "
					  "the header's %u bytes",
					  (unsigned long long)h.seq, h.raw_size);
	}
	reader_start(r, &h, h.raw_size);
	return 0;
}

int rp_chunk_reader_device_info(struct rp_chunk_reader *r, const void *buf, size_t len,
				struct rp_device_identity *id, struct rp_err *err)
{
	struct rp_chunk_header h;
	r->loaded = false;
	int rc = rp_chunk_header_check(buf, len, &h, err);
	if (rc < 0)
		return rc;
	int head = h.raw_size < RP_CHUNK_HEAD_BYTES ? (int)h.raw_size : RP_CHUNK_HEAD_BYTES;
	if (grow(&r->raw, &r->raw_cap, (size_t)head, 1) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory for a %d-byte chunk head", head);
	int n = head ? LZ4_decompress_safe_partial((const char *)buf + RP_CHUNK_HEADER_SIZE,
						   (char *)r->raw, (int)h.comp_size, head, head)
		     : 0;
	if (n < 0)
		return rp_err_set(err, -EBADMSG, "corrupt chunk seq %llu: LZ4 payload does not "
				  "decompress", (unsigned long long)h.seq);
	reader_start(r, &h, (size_t)n);
	bool changed = false;
	struct rp_event ev;
	/* The head ends inside a record or short of the header's event
	 * count: what it holds up to there is what there is to see. */
	while (rp_chunk_reader_next(r, &ev, NULL) == 1)
		changed |= rp_device_identity_note(id, &ev);
	r->loaded = false;
	return changed;
}

/* Mark the chunk unreadable from here on and say why, with the offset. */
__attribute__((format(printf, 3, 4)))
static int corrupt(struct rp_chunk_reader *r, struct rp_err *err, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	r->failed = true;
	return rp_err_set(err, -EBADMSG, "corrupt chunk seq %llu: %s at byte %zu",
			  (unsigned long long)r->hdr.seq, what, r->pos);
}

static inline bool get_u(struct rp_chunk_reader *r, uint64_t *v)
{
	size_t p = r->pos;
	if (p < r->len && r->raw[p] < 0x80) {
		*v = r->raw[p];
		r->pos = p + 1;
		return true;
	}
	uint64_t x = 0;
	for (unsigned shift = 0; p < r->len && shift < 64; shift += 7) {
		uint8_t c = r->raw[p++];
		if (shift == 63 && c > 1)
			return false; /* more than 64 bits */
		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			r->pos = p;
			*v = x;
			return true;
		}
	}
	return false;
}

/* A varint that must fit max; the error names the field. */
static int get_field(struct rp_chunk_reader *r, struct rp_err *err, const char *field,
		     uint64_t max, uint64_t *v)
{
	size_t at = r->pos;
	if (!get_u(r, v))
		return corrupt(r, err, "truncated or overlong varint for %s", field);
	if (*v > max) {
		r->pos = at;
		return corrupt(r, err, "%s %llu exceeds %llu", field, (unsigned long long)*v,
			       (unsigned long long)max);
	}
	return 0;
}

static int get_id(struct rp_chunk_reader *r, struct rp_err *err, const char *what,
		  size_t defined, bool zero_ok, uint32_t *id)
{
	size_t at = r->pos;
	uint64_t v;
	if (!get_u(r, &v))
		return corrupt(r, err, "truncated or overlong varint for a %s id", what);
	if (v > defined || (v == 0 && !zero_ok)) {
		r->pos = at;
		return corrupt(r, err, "%s id %llu used before definition", what,
			       (unsigned long long)v);
	}
	*id = (uint32_t)v;
	return 0;
}

static int def_string(struct rp_chunk_reader *r, struct rp_err *err)
{
	uint64_t n;
	int rc = get_field(r, err, "string length", RP_NAME_MAX, &n);
	if (rc < 0)
		return rc;
	if (n > r->len - r->pos)
		return corrupt(r, err, "string of %llu bytes runs past the end",
			       (unsigned long long)n);
	const uint8_t *s = r->raw + r->pos;
	if (memchr(s, 0, n))
		return corrupt(r, err, "string holds a NUL byte");
	if (grow(&r->str_off, &r->str_cap, r->nstr + 1, sizeof(uint32_t)) < 0 ||
	    grow(&r->names, &r->names_cap, r->names_len + n + 1, 1) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory for the string table");
	r->str_off[r->nstr++] = (uint32_t)r->names_len;
	memcpy(r->names + r->names_len, s, n);
	r->names[r->names_len + n] = '\0';
	r->names_len += n + 1;
	r->pos += n;
	return 0;
}

static int def_stack(struct rp_chunk_reader *r, struct rp_err *err)
{
	uint64_t nframes, nkernel, d;
	int rc = get_field(r, err, "stack depth", RP_STACK_MAX, &nframes);
	if (rc < 0)
		return rc;
	if (nframes == 0)
		return corrupt(r, err, "empty stack definition");
	if ((rc = get_field(r, err, "kernel frame count", nframes, &nkernel)) < 0)
		return rc;
	if (grow(&r->stk, &r->stk_cap, r->nstk + 1, sizeof(*r->stk)) < 0 ||
	    grow(&r->frames, &r->frames_cap, r->frames_len + nframes, sizeof(uint64_t)) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory for the stack table");
	uint64_t *f = r->frames + r->frames_len, prev = 0;
	for (uint64_t k = 0; k < nframes; k++) {
		if ((rc = get_field(r, err, "frame delta", UINT64_MAX, &d)) < 0)
			return rc;
		f[k] = prev += unzz(d);
	}
	r->stk[r->nstk++] = (struct stack_ref){(uint32_t)r->frames_len, (uint16_t)nframes,
					       (uint16_t)nkernel};
	r->frames_len += nframes;
	return 0;
}

static int def_thread(struct rp_chunk_reader *r, struct rp_err *err)
{
	uint64_t pid, tid;
	int rc = get_field(r, err, "pid", UINT32_MAX, &pid);
	if (rc == 0)
		rc = get_field(r, err, "tid", UINT32_MAX, &tid);
	if (rc < 0)
		return rc;
	if (grow(&r->thr, &r->thr_cap, r->nthr + 1, sizeof(*r->thr)) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory for the thread table");
	r->thr[r->nthr][0] = (uint32_t)pid;
	r->thr[r->nthr++][1] = (uint32_t)tid;
	return 0;
}

static int get_counter(struct rp_chunk_reader *r, struct rp_err *err, double *value)
{
	uint64_t v;
	int rc = get_field(r, err, "counter value", UINT64_MAX, &v);
	if (rc < 0)
		return rc;
	if (v) {
		*value = (double)(int64_t)unzz(v - 1);
		return 0;
	}
	if (r->len - r->pos < 8)
		return corrupt(r, err, "counter value runs past the end");
	uint64_t bits;
	memcpy(&bits, r->raw + r->pos, 8);
	bits = le64toh(bits);
	memcpy(value, &bits, 8);
	r->pos += 8;
	return 0;
}

static int get_mapping(struct rp_chunk_reader *r, struct rp_err *err, struct rp_event *ev)
{
	uint64_t start, size;
	int rc;
	if ((rc = get_field(r, err, "mapping start", UINT64_MAX, &start)) < 0 ||
	    (rc = get_field(r, err, "mapping size", UINT64_MAX - start, &size)) < 0 ||
	    (rc = get_field(r, err, "mapping offset", UINT64_MAX, &ev->u.mapping.offset)) < 0)
		return rc;
	ev->u.mapping.start = start;
	ev->u.mapping.end = start + size;
	if (r->pos >= r->len)
		return corrupt(r, err, "build-id length runs past the end");
	uint8_t n = r->raw[r->pos];
	if (n > RP_BUILD_ID_MAX)
		return corrupt(r, err, "build-id of %u bytes exceeds %d", n, RP_BUILD_ID_MAX);
	if (n > r->len - r->pos - 1)
		return corrupt(r, err, "build-id of %u bytes runs past the end", n);
	memcpy(ev->u.mapping.build_id, r->raw + r->pos + 1, n);
	ev->u.mapping.build_id_len = n;
	r->pos += 1 + (size_t)n;
	return 0;
}

/* The fields after the tag of an event record. */
static int get_event(struct rp_chunk_reader *r, unsigned kind, bool ext, struct rp_event *ev,
		     struct rp_err *err)
{
	uint64_t d, v;
	uint32_t thr, id;
	int rc;
	*ev = (struct rp_event){.kind = (uint8_t)kind};
	if ((rc = get_field(r, err, "timestamp delta", UINT64_MAX, &d)) < 0 ||
	    (rc = get_id(r, err, "thread", r->nthr, false, &thr)) < 0)
		return rc;
	ev->ts = r->prev_ts + unzz(d);
	ev->pid = r->thr[thr - 1][0];
	ev->tid = r->thr[thr - 1][1];
	if (NAMED_KINDS >> kind & 1) {
		if ((rc = get_id(r, err, "string", r->nstr, true, &id)) < 0)
			return rc;
		ev->name = id ? r->names + r->str_off[id - 1] : NULL;
	}
	switch (kind) {
	case RP_EV_CPU_SAMPLE:
		if ((rc = get_field(r, err, "cpu", UINT32_MAX, &v)) < 0 ||
		    (rc = get_id(r, err, "stack", r->nstk, true, &id)) < 0)
			return rc;
		ev->u.sample.cpu = (uint32_t)v;
		if (id) {
			const struct stack_ref *s = &r->stk[id - 1];
			ev->u.sample.nframes = s->nframes;
			ev->u.sample.nkernel = s->nkernel;
			ev->u.sample.frames = r->frames + s->off;
		}
		break;
	case RP_EV_COUNTER:
		if ((rc = get_counter(r, err, &ev->u.counter.value)) < 0)
			return rc;
		break;
	case RP_EV_GPU_ACTIVITY:
		if (r->pos >= r->len)
			return corrupt(r, err, "GPU activity kind runs past the end");
		ev->u.gpu.kind = r->raw[r->pos++];
		if ((rc = get_field(r, err, "device", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.gpu.device = (uint32_t)v;
		if ((rc = get_field(r, err, "stream", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.gpu.stream = (uint32_t)v;
		if ((rc = get_field(r, err, "correlation", UINT64_MAX, &ev->u.gpu.correlation)) < 0 ||
		    (rc = get_field(r, err, "byte count", UINT64_MAX, &ev->u.gpu.bytes)) < 0 ||
		    (rc = get_field(r, err, "end delta", UINT64_MAX, &d)) < 0)
			return rc;
		ev->u.gpu.end = ev->ts + unzz(d);
		for (size_t i = 0; ext && i < LAUNCH_FIELDS; i++) {
			if ((rc = get_field(r, err, "launch configuration", UINT32_MAX, &v)) < 0)
				return rc;
			uint32_t f = (uint32_t)v;
			memcpy((char *)&ev->u.gpu.launch + launch_fields[i], &f, sizeof(f));
		}
		break;
	case RP_EV_API_CALL:
		if ((rc = get_field(r, err, "duration", UINT64_MAX, &ev->u.api.duration)) < 0 ||
		    (rc = get_field(r, err, "device", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.api.device = (uint32_t)v;
		if (ext && (rc = get_field(r, err, "correlation", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.api.correlation = ext ? (uint32_t)v : 0;
		break;
	case RP_EV_DROPS:
		if ((rc = get_field(r, err, "drop count", UINT64_MAX, &ev->u.drops.count)) < 0)
			return rc;
		break;
	case RP_EV_MAPPING:
		if ((rc = get_mapping(r, err, ev)) < 0)
			return rc;
		break;
	case RP_EV_PY_CODE:
		if ((rc = get_field(r, err, "code address", RP_PY_CODE_MASK, &ev->u.py_code.code)) < 0 ||
		    (rc = get_field(r, err, "instruction offset", RP_PY_LASTI_MAX, &v)) < 0)
			return rc;
		ev->u.py_code.lasti = (uint32_t)v;
		if ((rc = get_field(r, err, "line", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.py_code.line = (uint32_t)v;
		break;
	case RP_EV_DEVICE_INFO:
		if (r->pos >= r->len)
			return corrupt(r, err, "device kind runs past the end");
		ev->u.device.kind = r->raw[r->pos++];
		if ((rc = get_field(r, err, "device index", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.device.index = (uint32_t)v;
		break;
	case RP_EV_DEVICE_OP:
		if ((rc = get_id(r, err, "string", r->nstr, true, &id)) < 0)
			return rc;
		ev->u.op.hlo_op = id ? r->names + r->str_off[id - 1] : NULL;
		if ((rc = get_id(r, err, "string", r->nstr, true, &id)) < 0)
			return rc;
		ev->u.op.hlo_module = id ? r->names + r->str_off[id - 1] : NULL;
		if ((rc = get_field(r, err, "device", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.op.device = (uint32_t)v;
		if ((rc = get_field(r, err, "line", UINT32_MAX, &v)) < 0)
			return rc;
		ev->u.op.line = (uint32_t)v;
		if ((rc = get_field(r, err, "program id", UINT64_MAX, &ev->u.op.program_id)) < 0 ||
		    (rc = get_field(r, err, "flops", UINT64_MAX, &ev->u.op.flops)) < 0 ||
		    (rc = get_field(r, err, "bytes accessed", UINT64_MAX, &ev->u.op.bytes_accessed)) < 0 ||
		    (rc = get_field(r, err, "duration", UINT64_MAX - ev->ts, &d)) < 0)
			return rc;
		ev->u.op.end = ev->ts + d;
		break;
	default:
		break;
	}
	return 0;
}

int rp_chunk_reader_next(struct rp_chunk_reader *r, struct rp_event *ev, struct rp_err *err)
{
	if (!r->loaded)
		return 0;
	if (r->failed)
		return rp_err_set(err, -EBADMSG,
				  "corrupt chunk seq %llu: nothing readable past byte %zu",
				  (unsigned long long)r->hdr.seq, r->pos);
	for (;;) {
		if (r->pos >= r->len) {
			if (r->nread != r->hdr.event_count)
				return corrupt(r, err, "payload ends after %u events, header says %u",
					       r->nread, r->hdr.event_count);
			return 0;
		}
		size_t at = r->pos;
		unsigned tag = r->raw[r->pos++];
		int rc;
		switch (tag) {
		case TAG_DEF_STRING:
			rc = def_string(r, err);
			break;
		case TAG_DEF_STACK:
			rc = def_stack(r, err);
			break;
		case TAG_DEF_THREAD:
			rc = def_thread(r, err);
			break;
		default: {
			unsigned base = tag & ~(unsigned)TAG_EXT;
			bool ext = tag & TAG_EXT && base < 32 && EXT_KINDS >> base & 1;
			unsigned kind = ext ? base : tag;
			if (kind < 1 || kind > RP_EV_KIND_MAX || !(KNOWN_KINDS >> kind & 1)) {
				r->pos = at;
				return corrupt(r, err, "unknown record tag 0x%02x", tag);
			}
			if (r->nread == r->hdr.event_count) {
				r->pos = at;
				return corrupt(r, err, "more events than the header's %u",
					       r->hdr.event_count);
			}
			if ((rc = get_event(r, kind, ext, ev, err)) < 0)
				return rc;
			if (ev->ts < r->hdr.first_ts || ev->ts > r->hdr.last_ts) {
				r->pos = at;
				return corrupt(r, err, "event time %llu outside the header's %llu..%llu",
					       (unsigned long long)ev->ts,
					       (unsigned long long)r->hdr.first_ts,
					       (unsigned long long)r->hdr.last_ts);
			}
			r->prev_ts = ev->ts;
			r->nread++;
			return 1;
		}
		}
		if (rc < 0)
			return rc;
	}
}

/* ---- sealing ------------------------------------------------------------ */

/* Number of events whose encoding ends at or before byte limit. */
static uint32_t events_within(const struct rp_chunk_builder *b, size_t limit)
{
	uint32_t lo = 0, hi = b->count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (b->ev_end[mid] <= limit)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct seal_stats {
	uint32_t events;
	size_t raw;
	uint64_t min_ts, max_ts, dropped;
};

/* The events do not compress into dst: compress the longest prefix that
 * fits (found with LZ4_compress_destSize, then backing off should the
 * prefix compress differently), and move the rest into a fresh chunk.
 * The rest is re-encoded by decoding the whole buffer with the tables
 * of the full chunk and adding the tail events again. */
static int seal_prefix(struct rp_chunk_builder *b, uint64_t seq, char *dst, int dcap,
		       int *comp, struct seal_stats *st)
{
	int src = (int)b->ev_end[events_within(b, RP_CHUNK_RAW_MAX) - 1];
	LZ4_compress_destSize((const char *)b->raw, dst, &src, dcap);
	uint32_t k = events_within(b, (size_t)src);
	if (k == 0)
		k = 1;
	int c;
	while ((c = LZ4_compress_default((const char *)b->raw, dst, (int)b->ev_end[k - 1],
					 dcap)) <= 0) {
		if (k == 1)
			return -EOVERFLOW; /* MIN_CHUNK_BYTES rules this out */
		k -= k > 16 ? k / 16 : 1;
	}
	*comp = c;
	*st = (struct seal_stats){.events = k, .raw = b->ev_end[k - 1], .min_ts = UINT64_MAX};

	if (!b->split) {
		int rc = rp_chunk_reader_new(&b->split);
		if (rc < 0)
			return rc;
	}
	struct rp_chunk_reader *r = b->split;
	if (grow(&r->raw, &r->raw_cap, b->len, 1) < 0)
		return -ENOMEM;
	memcpy(r->raw, b->raw, b->len);
	struct rp_chunk_header h = {
		.seq = seq, .first_ts = b->min_ts, .last_ts = b->max_ts,
		.event_count = b->count, .raw_size = (uint32_t)b->len,
	};
	reader_start(r, &h, b->len);
	reset_chunk(b);

	struct rp_event ev;
	int rc;
	for (uint32_t i = 0; (rc = rp_chunk_reader_next(r, &ev, NULL)) > 0; i++) {
		if (i >= k) {
			if ((rc = add_event(b, &ev, true)) < 0)
				return rc;
			continue;
		}
		if (ev.ts < st->min_ts)
			st->min_ts = ev.ts;
		if (ev.ts > st->max_ts)
			st->max_ts = ev.ts;
		if (ev.kind == RP_EV_DROPS)
			st->dropped = sat_add(st->dropped, ev.u.drops.count);
	}
	return rc;
}

int rp_chunk_builder_seal(struct rp_chunk_builder *b, uint64_t seq, int64_t wall_offset_ns,
			  void *out, size_t out_cap, size_t *out_len)
{
	if (b->count == 0)
		return -ENODATA;
	if (out_cap < b->max_chunk)
		return -EINVAL;
	char *dst = (char *)out + RP_CHUNK_HEADER_SIZE;
	int dcap = (int)(b->max_chunk - RP_CHUNK_HEADER_SIZE);
	struct seal_stats st = {b->count, b->len, b->min_ts, b->max_ts, b->dropped};
	int comp = 0;
	if (b->len <= RP_CHUNK_RAW_MAX)
		comp = LZ4_compress_default((const char *)b->raw, dst, (int)b->len, dcap);
	if (comp > 0) {
		reset_chunk(b);
	} else {
		int rc = seal_prefix(b, seq, dst, dcap, &comp, &st);
		if (rc < 0)
			return rc;
	}

	struct rp_chunk_header h = {
		.magic = RP_CHUNK_MAGIC,
		.version = RP_FORMAT_VERSION,
		.header_size = RP_CHUNK_HEADER_SIZE,
		.codec = RP_CODEC_LZ4,
		.device_id = b->device_id,
		.dropped = st.dropped > UINT32_MAX ? UINT32_MAX : (uint32_t)st.dropped,
		.seq = seq,
		.first_ts = st.min_ts,
		.last_ts = st.max_ts,
		.event_count = st.events,
		.raw_size = (uint32_t)st.raw,
		.comp_size = (uint32_t)comp,
		.wall_offset_ns = wall_offset_ns,
	};
	rp_chunk_header_write(&h, out, dst);
	*out_len = RP_CHUNK_HEADER_SIZE + (size_t)comp;

	/* Aim the next chunk at what this one's ratio says will fill the
	 * room, less 1/16 so that splitting stays the exception. */
	uint64_t t = (uint64_t)dcap * st.raw / (uint64_t)comp;
	t -= t / 16;
	b->target = t < b->target_min ? b->target_min : t > b->target_max ? b->target_max : t;
	return 0;
}
