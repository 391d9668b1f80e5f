#include "symbolize.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "table.h"

/* libstdc++'s demangler (<cxxabi.h>, abi::__cxa_demangle), callable from
 * C: a malloc'd name, or NULL with *status set. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define BUCKETS 1024
/* A perf map may list a range again when JIT code is replaced; the entry
 * written last wins.  Looking this many entries back finds it. */
#define JIT_LOOKBACK 16

enum file_state { F_UNOPENED, F_OK, F_PSEUDO, F_MISMATCH, F_UNREADABLE };

struct segment {
	uint64_t offset, filesz, vaddr;
};

/* A function symbol; the file's are sorted by address. */
struct fsym {
	uint64_t addr, size;
	const char *name; /* libdwfl's: valid while the file is open */
	bool global;
};

struct cached {
	uint64_t vaddr; /* key + 1: 0 marks an empty slot */
	const char *function, *mangled, *src;
	uint64_t offset;
	unsigned line;
};

/* One file on disk (by path and recorded build-id), opened on first use. */
struct file {
	struct file *next; /* hash chain */
	char *path;
	const char *base;
	uint8_t build_id[RP_BUILD_ID_MAX];
	uint8_t build_id_len;
	enum file_state state;
	Dwfl *dwfl;
	Dwfl_Module *mod;
	struct segment *segs;
	size_t nsegs;
	struct fsym *syms;
	size_t nsyms;
	struct cached *cache;
	size_t cache_mask, ncache;
};

struct mapping {
	uint64_t start, end, offset;
	struct file *file;
};

struct jit_sym {
	uint64_t start, size;
	uint32_t name;  /* offset in the proc's jit_names */
	uint32_t order; /* line in the file: later lines win */
};

struct proc {
	struct proc *next; /* hash chain */
	uint32_t pid;
	struct mapping *maps; /* by start, never overlapping */
	size_t nmaps, maps_cap;
	bool jit_loaded;
	struct jit_sym *jit;
	size_t njit;
	char *jit_names;
};

/* A mangled name and what it demangles to (NULL: it does not). */
struct demangled {
	char *mangled, *name;
};

struct ksym {
	uint64_t addr;
	uint32_t name, module; /* offsets in karena; module 0: the kernel itself */
};

/* A Python code location of a process, from RP_EV_PY_CODE. */
struct py_code {
	uint32_t pid, lasti; /* pid 0: empty slot */
	uint64_t code;
	uint32_t line;
	char *function;      /* "qualname (file:line)" */
	char *file;
};

struct rp_symbolizer {
	char kallsyms[PATH_MAX];
	char perf_map_dir[PATH_MAX - 32]; /* room for "/perf-PID.map" */
	struct file *files[BUCKETS];
	struct proc *procs[BUCKETS];
	bool kloaded;
	struct ksym *ksyms;
	size_t nksyms;
	char *karena;
	struct demangled *names; /* open addressing by mangled name */
	size_t names_mask, nnames;
	struct py_code *py;      /* open addressing by (pid, code, lasti) */
	size_t py_mask, npy;
	struct rp_symbolizer_stats st;
};

static const Dwfl_Callbacks dwfl_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.section_address = dwfl_offline_section_address,
};

int rp_symbolizer_new(const struct rp_symbolizer_opts *opts, struct rp_symbolizer **out,
		      struct rp_err *err)
{
	struct rp_symbolizer *s = calloc(1, sizeof(*s));
	if (!s)
		return rp_err_set(err, -ENOMEM, "out of memory for a symbolizer");
	const char *k = opts && opts->kallsyms ? opts->kallsyms : "/proc/kallsyms";
	const char *d = opts && opts->perf_map_dir ? opts->perf_map_dir : "/tmp";
	if ((size_t)snprintf(s->kallsyms, sizeof(s->kallsyms), "%s", k) >= sizeof(s->kallsyms) ||
	    (size_t)snprintf(s->perf_map_dir, sizeof(s->perf_map_dir), "%s", d) >=
		    sizeof(s->perf_map_dir)) {
		free(s);
		return rp_err_set(err, -ENAMETOOLONG, "symbolizer: path too long: %s or %s", k, d);
	}
	*out = s;
	return 0;
}

static void free_file(struct file *f)
{
	if (f->dwfl)
		dwfl_end(f->dwfl);
	free(f->path);
	free(f->segs);
	free(f->syms);
	free(f->cache);
	free(f);
}

void rp_symbolizer_free(struct rp_symbolizer *s)
{
	if (!s)
		return;
	for (size_t b = 0; b < BUCKETS; b++) {
		for (struct file *f = s->files[b], *next; f; f = next) {
			next = f->next;
			free_file(f);
		}
		for (struct proc *p = s->procs[b], *next; p; p = next) {
			next = p->next;
			free(p->maps);
			free(p->jit);
			free(p->jit_names);
			free(p);
		}
	}
	for (size_t i = 0; s->names && i <= s->names_mask; i++) {
		free(s->names[i].mangled);
		free(s->names[i].name);
	}
	free(s->names);
	for (size_t i = 0; s->py && i <= s->py_mask; i++) {
		free(s->py[i].function);
		free(s->py[i].file);
	}
	free(s->py);
	free(s->ksyms);
	free(s->karena);
	free(s);
}

void rp_symbolizer_stats(const struct rp_symbolizer *s, struct rp_symbolizer_stats *st)
{
	*st = s->st;
}

/* ---- files and mappings ------------------------------------------------- */

static size_t hash_bytes(const void *p, size_t n, uint64_t h)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ull;
	return (size_t)(h ^ h >> 29);
}

static struct file *intern_file(struct rp_symbolizer *s, const char *path, const uint8_t *bid,
				size_t bid_len)
{
	size_t b = hash_bytes(bid, bid_len, hash_bytes(path, strlen(path), 0xcbf29ce484222325ull)) %
		   BUCKETS;
	for (struct file *f = s->files[b]; f; f = f->next)
		if (f->build_id_len == bid_len && (!bid_len || !memcmp(f->build_id, bid, bid_len)) &&
		    !strcmp(f->path, path))
			return f;
	struct file *f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path))) {
		free(f);
		return NULL;
	}
	const char *slash = strrchr(f->path, '/');
	f->base = slash ? slash + 1 : f->path;
	if (bid_len) /* bid may be NULL when there is none */
		memcpy(f->build_id, bid, bid_len);
	f->build_id_len = (uint8_t)bid_len;
	f->next = s->files[b];
	s->files[b] = f;
	return f;
}

/* The process, added when new; NULL when out of memory. */
static struct proc *find_proc(struct rp_symbolizer *s, uint32_t pid)
{
	size_t b = (pid * 2654435761u) % BUCKETS;
	for (struct proc *p = s->procs[b]; p; p = p->next)
		if (p->pid == pid)
			return p;
	struct proc *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->next = s->procs[b];
	s->procs[b] = p;
	return p;
}

/* Records sorted by a leading uint64_t key (addresses): how many of the n
 * have a key at or below v, so record [result - 1] is the last one
 * starting there. */
static size_t count_at_or_below(const void *base, size_t n, size_t stride, uint64_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t key;
		memcpy(&key, (const char *)base + mid * stride, sizeof(key));
		if (key <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Index of the first mapping starting at or after addr. */
static size_t first_from(const struct proc *p, uint64_t addr)
{
	return addr ? count_at_or_below(p->maps, p->nmaps, sizeof(*p->maps), addr - 1) : 0;
}

int rp_symbolizer_add_mapping(struct rp_symbolizer *s, uint32_t pid, uint64_t start,
			      uint64_t end, uint64_t offset, const char *path,
			      const uint8_t *build_id, size_t build_id_len)
{
	if (end <= start || build_id_len > RP_BUILD_ID_MAX)
		return -EINVAL;
	struct proc *p = find_proc(s, pid);
	struct file *f = p ? intern_file(s, path, build_id, build_id_len) : NULL;
	if (!f)
		return -ENOMEM;
	size_t lo = first_from(p, start);
	if (lo < p->nmaps && p->maps[lo].start == start && p->maps[lo].end == end &&
	    p->maps[lo].offset == offset && p->maps[lo].file == f)
		return 0; /* the usual case: repeated in every chunk */
	/* The overlapped mappings [a, z) give way to the new one. */
	size_t a = lo > 0 && p->maps[lo - 1].end > start ? lo - 1 : lo, z = lo;
	while (z < p->nmaps && p->maps[z].start < end)
		z++;
	if (a == z && p->nmaps == p->maps_cap) {
		size_t cap = p->maps_cap ? 2 * p->maps_cap : 16;
		struct mapping *grown = realloc(p->maps, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		p->maps = grown;
		p->maps_cap = cap;
	}
	size_t removed = z - a;
	memmove(p->maps + a + 1, p->maps + z, (p->nmaps - z) * sizeof(*p->maps));
	p->nmaps = p->nmaps - removed + 1;
	p->maps[a] = (struct mapping){ start, end, offset, f };
	return 0;
}

static const struct mapping *find_mapping(const struct proc *p, uint64_t ip)
{
	size_t i = first_from(p, ip + 1); /* first starting after ip */
	if (i == 0 || ip >= p->maps[i - 1].end)
		return NULL;
	return &p->maps[i - 1];
}

static int by_sym_addr(const void *a, const void *b)
{
	const struct fsym *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->global != y->global) /* aliases: the global name first */
		return x->global ? -1 : 1;
	return x->size > y->size ? -1 : x->size < y->size;
}

/* The file's function symbols (of the ELF file or its debug file), sorted:
 * libdwfl's own address lookup scans every symbol on every call. */
static void load_symbols(struct file *f)
{
	int n = dwfl_module_getsymtab(f->mod);
	if (n <= 0 || !(f->syms = malloc((size_t)n * sizeof(*f->syms))))
		return;
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name = dwfl_module_getsym_info(f->mod, i, &sym, &addr, &shndx, NULL, NULL);
		int type = GELF_ST_TYPE(sym.st_info);
		/* Sizeless ones (_init, _fini) would claim the PLT after them. */
		if (name && *name && sym.st_shndx != SHN_UNDEF && sym.st_size &&
		    (type == STT_FUNC || type == STT_GNU_IFUNC))
			f->syms[f->nsyms++] = (struct fsym){ addr, sym.st_size, name,
							     GELF_ST_BIND(sym.st_info) != STB_LOCAL };
	}
	if (f->nsyms)
		qsort(f->syms, f->nsyms, sizeof(*f->syms), by_sym_addr);
}

/* The function holding vaddr: the last one starting at or before it, if
 * vaddr lies within its size. */
static const struct fsym *find_symbol(const struct file *f, uint64_t vaddr)
{
	size_t lo = count_at_or_below(f->syms, f->nsyms, sizeof(*f->syms), vaddr);
	if (lo == 0)
		return NULL;
	const struct fsym *s = &f->syms[lo - 1];
	while (s > f->syms && s[-1].addr == s->addr) /* the first of its aliases */
		s--;
	return vaddr - s->addr < s->size ? s : NULL;
}

/* Open f with libdwfl and check that it is the file the process mapped. */
static void open_file(struct file *f)
{
	f->state = F_UNREADABLE;
	if (f->path[0] != '/') {
		f->state = F_PSEUDO; /* [vdso]: no file to read */
		return;
	}
	if (!(f->dwfl = dwfl_begin(&dwfl_callbacks)))
		return;
	dwfl_report_begin(f->dwfl);
	/* At base 0 relative to p_vaddr, module addresses are the ELF's own
	 * virtual addresses, for executables and shared objects alike. */
	f->mod = dwfl_report_elf(f->dwfl, f->base, f->path, -1, 0, true);
	dwfl_report_end(f->dwfl, NULL, NULL);
	GElf_Addr bias;
	Elf *e = f->mod ? dwfl_module_getelf(f->mod, &bias) : NULL;
	size_t nph;
	if (!e || elf_getphdrnum(e, &nph) < 0)
		return;
	if (f->build_id_len) {
		const unsigned char *bits;
		GElf_Addr at;
		int n = dwfl_module_build_id(f->mod, &bits, &at);
		if (n < f->build_id_len || memcmp(bits, f->build_id, f->build_id_len)) {
			f->state = F_MISMATCH;
			return;
		}
	}
	if (!(f->segs = calloc(nph ? nph : 1, sizeof(*f->segs))))
		return;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD)
			f->segs[f->nsegs++] = (struct segment){ ph.p_offset, ph.p_filesz, ph.p_vaddr };
	}
	load_symbols(f);
	f->state = F_OK;
}

/* The ELF virtual address of a file offset: through its load segment. */
static bool offset_to_vaddr(const struct file *f, uint64_t off, uint64_t *vaddr)
{
	for (size_t i = 0; i < f->nsegs; i++)
		if (off >= f->segs[i].offset && off - f->segs[i].offset < f->segs[i].filesz) {
			*vaddr = off - f->segs[i].offset + f->segs[i].vaddr;
			return true;
		}
	return false;
}

static struct cached *cache_slot(struct file *f, uint64_t vaddr)
{
	if (f->ncache + 1 > (f->cache_mask + 1) / 2) {
		size_t size = f->cache ? 2 * (f->cache_mask + 1) : 256;
		struct cached *c = calloc(size, sizeof(*c));
		if (!c)
			return NULL;
		for (size_t i = 0; f->cache && i <= f->cache_mask; i++) {
			if (!f->cache[i].vaddr)
				continue;
			size_t j = (size_t)((f->cache[i].vaddr * 0x9e3779b97f4a7c15ull) >> 20) & (size - 1);
			while (c[j].vaddr)
				j = (j + 1) & (size - 1);
			c[j] = f->cache[i];
		}
		free(f->cache);
		f->cache = c;
		f->cache_mask = size - 1;
	}
	size_t j = (size_t)(((vaddr + 1) * 0x9e3779b97f4a7c15ull) >> 20) & f->cache_mask;
	while (f->cache[j].vaddr && f->cache[j].vaddr != vaddr + 1)
		j = (j + 1) & f->cache_mask;
	return &f->cache[j];
}

/* ---- C++ names ---------------------------------------------------------- */

static bool demangled_used(const void *e) { return ((const struct demangled *)e)->mangled; }
static uint64_t demangled_hash(const void *e)
{
	return rp_hash_str(((const struct demangled *)e)->mangled);
}

/* out->function demangled in place, the mangled name into out->mangled;
 * each name is demangled once (the table keeps both).  Names that are not
 * Itanium C++ ABI ones, or do not demangle, or without memory, stay. */
static void demangle(struct rp_symbolizer *s, struct rp_symbol *out)
{
	const char *fn = out->function;
	if (!fn || strncmp(fn, "_Z", 2) != 0 ||
	    rp_table_reserve(&s->names, &s->names_mask, s->nnames, sizeof(*s->names),
			     demangled_used, demangled_hash, RP_TABLE_FIRST) < 0)
		return;
	size_t i = rp_hash_str(fn) & s->names_mask;
	while (s->names[i].mangled && strcmp(s->names[i].mangled, fn) != 0)
		i = (i + 1) & s->names_mask;
	struct demangled *d = &s->names[i];
	if (!d->mangled) {
		int status;
		if (!(d->mangled = strdup(fn)))
			return;
		d->name = __cxa_demangle(fn, NULL, NULL, &status);
		s->nnames++;
	}
	if (d->name) {
		out->function = d->name;
		out->mangled = d->mangled;
	}
}

const char *rp_symbolizer_demangle(struct rp_symbolizer *s, const char *name)
{
	struct rp_symbol sym = { .function = name };
	demangle(s, &sym);
	return sym.function;
}

static bool lookup_file(struct rp_symbolizer *s, struct file *f, uint64_t vaddr,
			struct rp_symbol *out)
{
	struct cached *c = cache_slot(f, vaddr);
	if (c && c->vaddr) {
		out->function = c->function;
		out->mangled = c->mangled;
		out->offset = c->offset;
		out->file = c->src;
		out->line = c->line;
		return c->function != NULL;
	}
	const struct fsym *sym = find_symbol(f, vaddr);
	const char *fn = sym ? sym->name : NULL;
	uint64_t off = sym ? vaddr - sym->addr : 0;
	Dwfl_Line *l = dwfl_module_getsrc(f->mod, vaddr);
	int line = 0;
	const char *src = l ? dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL) : NULL;
	out->function = fn;
	out->offset = off;
	out->file = src;
	out->line = line > 0 ? (unsigned)line : 0;
	demangle(s, out);
	if (c) {
		*c = (struct cached){ vaddr + 1, out->function, out->mangled, src, off, out->line };
		f->ncache++;
	}
	return fn != NULL;
}

/* ---- perf maps ---------------------------------------------------------- */

static int by_start(const void *a, const void *b)
{
	const struct jit_sym *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Lines "START SIZE name", START and SIZE in hex (with or without 0x). */
static void load_perf_map(struct rp_symbolizer *s, struct proc *p)
{
	p->jit_loaded = true;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/perf-%u.map", s->perf_map_dir, p->pid);
	FILE *fp = fopen(path, "re");
	if (!fp)
		return;
	char *line = NULL;
	size_t cap = 0, ncap = 0, names_len = 0, names_cap = 0;
	while (getline(&line, &cap, fp) > 0) {
		char *end;
		uint64_t start = strtoull(line, &end, 16);
		if (end == line || *end != ' ')
			continue;
		char *size_at = end + 1;
		uint64_t size = strtoull(size_at, &end, 16);
		if (end == size_at || *end != ' ' || !size)
			continue;
		char *name = end + 1;
		size_t n = strcspn(name, "\n");
		if (!n)
			continue;
		if (p->njit == ncap || names_len + n + 1 > names_cap) {
			size_t nc = p->njit == ncap ? (ncap ? 2 * ncap : 64) : ncap;
			size_t sc = names_len + n + 1 > names_cap ? 2 * (names_len + n + 1) : names_cap;
			struct jit_sym *js = realloc(p->jit, nc * sizeof(*js));
			if (js)
				p->jit = js;
			char *ns = js ? realloc(p->jit_names, sc) : NULL;
			if (!ns)
				break; /* out of memory: keep what was read */
			p->jit_names = ns;
			ncap = nc;
			names_cap = sc;
		}
		memcpy(p->jit_names + names_len, name, n);
		p->jit_names[names_len + n] = 0;
		p->jit[p->njit] = (struct jit_sym){ start, size, (uint32_t)names_len, (uint32_t)p->njit };
		p->njit++;
		names_len += n + 1;
	}
	free(line);
	fclose(fp);
	if (p->njit)
		qsort(p->jit, p->njit, sizeof(*p->jit), by_start);
}

static const struct jit_sym *find_jit(const struct proc *p, uint64_t ip)
{
	size_t lo = count_at_or_below(p->jit, p->njit, sizeof(*p->jit), ip);
	const struct jit_sym *best = NULL;
	for (size_t i = lo, k = 0; i > 0 && k < JIT_LOOKBACK; i--, k++) {
		const struct jit_sym *j = &p->jit[i - 1];
		if (ip - j->start < j->size && (!best || j->order > best->order))
			best = j;
	}
	return best;
}

/* ---- kallsyms ----------------------------------------------------------- */

static int by_addr(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static uint32_t arena_add(char **arena, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 1 << 16;
		while (c < *len + n + 1)
			c *= 2;
		char *grown = realloc(*arena, c);
		if (!grown)
			return UINT32_MAX;
		*arena = grown;
		*cap = c;
	}
	uint32_t at = (uint32_t)*len;
	memcpy(*arena + at, s, n);
	(*arena)[at + n] = 0;
	*len += n + 1;
	return at;
}

/* Text symbols of "ADDRESS TYPE NAME [MODULE]" lines. */
static void load_kallsyms(struct rp_symbolizer *s)
{
	s->kloaded = true;
	FILE *fp = fopen(s->kallsyms, "re");
	if (!fp) {
		s->st.kallsyms_missing = true;
		return;
	}
	char *line = NULL, *arena = NULL;
	size_t cap = 0, alen = 0, acap = 0, ncap = 0;
	bool nonzero = false;
	arena_add(&arena, &alen, &acap, "", 0); /* offset 0: no module */
	while (arena && getline(&line, &cap, fp) > 0) {
		char *end;
		uint64_t addr = strtoull(line, &end, 16);
		if (end == line || end[0] != ' ' || !end[1] || !strchr("tTwW", end[1]) ||
		    end[2] != ' ')
			continue;
		char *name = end + 3;
		size_t n = strcspn(name, " \t\n");
		char *mod = name + n + strspn(name + n, " \t");
		size_t m = *mod == '[' ? strcspn(mod, "\n") : 0;
		if (s->nksyms == ncap) {
			size_t c = ncap ? 2 * ncap : 4096;
			struct ksym *k = realloc(s->ksyms, c * sizeof(*k));
			if (!k)
				break;
			s->ksyms = k;
			ncap = c;
		}
		uint32_t at = arena_add(&arena, &alen, &acap, name, n);
		uint32_t mat = m ? arena_add(&arena, &alen, &acap, mod, m) : 0;
		if (at == UINT32_MAX || mat == UINT32_MAX)
			break;
		s->ksyms[s->nksyms++] = (struct ksym){ addr, at, mat };
		nonzero |= addr != 0;
	}
	free(line);
	fclose(fp);
	s->karena = arena;
	if (!nonzero) {
		s->st.kallsyms_zeroed = s->nksyms > 0;
		s->nksyms = 0; /* every address 0: no use naming anything */
	}
	if (s->nksyms)
		qsort(s->ksyms, s->nksyms, sizeof(*s->ksyms), by_addr);
}

static void symbolize_kernel(struct rp_symbolizer *s, uint64_t ip, struct rp_symbol *out)
{
	if (!s->kloaded)
		load_kallsyms(s);
	out->module = "[kernel]";
	out->offset = ip;
	size_t lo = count_at_or_below(s->ksyms, s->nksyms, sizeof(*s->ksyms), ip);
	if (lo == 0)
		return;
	const struct ksym *k = &s->ksyms[lo - 1];
	out->function = s->karena + k->name;
	out->offset = ip - k->addr;
	if (k->module)
		out->module = s->karena + k->module;
}

/* ---- frames ------------------------------------------------------------- */

static void symbolize_user(struct rp_symbolizer *s, uint32_t pid, uint64_t ip,
			   struct rp_symbol *out)
{
	/* Known even without mappings: its perf map may name its frames. */
	struct proc *p = find_proc(s, pid);
	const struct mapping *m = p ? find_mapping(p, ip) : NULL;
	if (!m) {
		if (p && !p->jit_loaded)
			load_perf_map(s, p);
		const struct jit_sym *j = p ? find_jit(p, ip) : NULL;
		if (j) {
			out->function = p->jit_names + j->name;
			out->module = "[jit]";
			out->offset = ip - j->start;
			demangle(s, out);
		}
		return;
	}
	struct file *f = m->file;
	if (!strncmp(f->path, RP_JIT_MAPPING_PREFIX, strlen(RP_JIT_MAPPING_PREFIX))) {
		/* a function a JIT compiler registered (collectors/cpu/jitreg.h) */
		out->function = f->path + strlen(RP_JIT_MAPPING_PREFIX);
		out->module = "[jit]";
		out->offset = ip - m->start;
		demangle(s, out);
		return;
	}
	uint64_t off = ip - m->start + m->offset, vaddr;
	out->module = f->base;
	out->offset = off;
	if (f->state == F_UNOPENED)
		open_file(f);
	s->st.mismatched += f->state == F_MISMATCH;
	s->st.unreadable += f->state == F_UNREADABLE;
	if (f->state != F_OK || !offset_to_vaddr(f, off, &vaddr))
		return;
	if (!lookup_file(s, f, vaddr, out)) {
		out->offset = off; /* no symbol: stay with the file offset */
		out->function = NULL;
	}
}

/* ---- Python frames ------------------------------------------------------ */

#define PYTHON_MODULE "[python]"

static struct py_code *py_slot(struct py_code *t, size_t mask, uint32_t pid, uint64_t code,
			       uint32_t lasti)
{
	uint64_t h = rp_hash_u64(code ^ (uint64_t)pid << 47 ^ (uint64_t)lasti << 20);
	for (size_t i = h & mask;; i = (i + 1) & mask)
		if (!t[i].pid || (t[i].pid == pid && t[i].code == code && t[i].lasti == lasti))
			return &t[i];
}

int rp_symbolizer_add_py_code(struct rp_symbolizer *s, uint32_t pid, uint64_t code,
			      uint32_t lasti, uint32_t line, const char *name)
{
	if (!pid)
		return -EINVAL;
	if (!s->py || s->npy + 1 > (s->py_mask + 1) / 2) {
		size_t mask = s->py ? 2 * s->py_mask + 1 : 255;
		struct py_code *t = calloc(mask + 1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (size_t i = 0; s->py && i <= s->py_mask; i++)
			if (s->py[i].pid)
				*py_slot(t, mask, s->py[i].pid, s->py[i].code, s->py[i].lasti) = s->py[i];
		free(s->py);
		s->py = t;
		s->py_mask = mask;
	}
	struct py_code *e = py_slot(s->py, s->py_mask, pid, code, lasti);
	if (e->pid)
		return 0; /* repeated in every chunk: the first one stays */
	/* "qualname\tfile"; without a tab, all of it is the qualname. */
	size_t qlen = strcspn(name, "\t");
	const char *file = name[qlen] ? name + qlen + 1 : "";
	char *function = NULL;
	if (asprintf(&function, "%.*s (%s:%" PRIu32 ")", (int)qlen, name, file, line) < 0)
		return -ENOMEM;
	char *f = strdup(file);
	if (!f) {
		free(function);
		return -ENOMEM;
	}
	*e = (struct py_code){pid, lasti, code, line, function, f};
	s->npy++;
	return 0;
}

static void symbolize_python(struct rp_symbolizer *s, uint32_t pid, uint64_t frame,
			     struct rp_symbol *out)
{
	uint64_t code = frame & RP_PY_CODE_MASK;
	uint32_t lasti = (uint32_t)(frame >> RP_PY_LASTI_SHIFT & RP_PY_LASTI_MAX);
	const struct py_code *e = s->py ? py_slot(s->py, s->py_mask, pid, code, lasti) : NULL;
	out->module = PYTHON_MODULE;
	out->offset = lasti;
	if (e && e->pid) {
		out->function = e->function;
		out->file = e->file;
		out->line = e->line;
	}
}

uint64_t rp_frame_address(const uint64_t *frames, unsigned nkernel, unsigned i)
{
	bool leaf = i == 0 || i == nkernel;
	bool python = i >= nkernel && frames[i] & RP_PY_FRAME_TAG;
	return leaf || python || !frames[i] ? frames[i] : frames[i] - 1;
}

void rp_symbolize(struct rp_symbolizer *s, uint32_t pid, uint64_t ip, bool kernel,
		  struct rp_symbol *out)
{
	*out = (struct rp_symbol){ .offset = ip };
	if (kernel)
		symbolize_kernel(s, ip, out);
	else if (ip & RP_PY_FRAME_TAG)
		symbolize_python(s, pid, ip, out);
	else
		symbolize_user(s, pid, ip, out);
	s->st.frames++;
	s->st.named += out->function != NULL;
}

const char *rp_symbol_name(const struct rp_symbol *sym, char *buf, size_t len)
{
	if (sym->function)
		return sym->function; /* whole: demangled C++ names run long */
	if (sym->module && strcmp(sym->module, PYTHON_MODULE) == 0)
		return "[unknown python frame]";
	snprintf(buf, len, "%s+0x%" PRIx64, sym->module ? sym->module : "[unknown]", sym->offset);
	return buf;
}
