#include "pyframes.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <linux/types.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmem.h"
#include "sampler_record.h"

#define NS 1000000000ull
#define PROBE_MIN_NS (1 * NS)
#define PROBE_MAX_NS (64 * NS)
/* (pid, code, lasti) already described; cleared when half full (that
 * only describes them again). */
#define CODE_SLOTS 16384
/* Bounds on what a code object may claim. */
#define QUALNAME_MAX 120  /* bytes kept */
#define FILE_READ_MAX 1024 /* characters read; the end of a long path is kept */
#define LINETABLE_MAX (64 * 1024)
#define CODE_READ 256

/* What differs between CPython versions: the BPF walk's offsets, and
 * those of the code objects and strings the daemon reads.  From the
 * versions' own headers (offsetof with Py_BUILD_CORE, x86-64 and
 * aarch64 alike); docs/python-frames.md says how to add one. */
struct layout {
	unsigned minor;
	struct rp_py_proc walk; /* runtime filled per process */
	uint16_t co_qualname;   /* co_name on 3.10, which has no qualname */
	uint16_t co_filename, co_firstlineno, co_linetable;
	uint16_t ascii_size;    /* sizeof(PyASCIIObject) */
	uint16_t compact_size;  /* sizeof(PyCompactUnicodeObject) */
};

static const struct layout layouts[] = {
	{10, {.interp_head = 32, .threads_head = 8, .ts_next = 8, .ts_thread_id = 176,
	      .ts_frame = 24, .cframe_frame = 0xffff, .fr_previous = 24, .fr_code = 32,
	      .fr_instr = 96, .ts_read = 184, .lasti_is_index = 1,
	      .entry_kind = RP_PY_ENTRY_EVERY},
	 112, 104, 40, 120, 48, 72},
	{11, {.interp_head = 40, .threads_head = 16, .ts_next = 8, .ts_thread_id = 152,
	      .ts_frame = 56, .cframe_frame = 8, .fr_previous = 48, .fr_code = 32, .fr_instr = 56,
	      .fr_entry = 68, .code_start = 184, .ts_datastack = 296, .ts_read = 320,
	      .entry_kind = RP_PY_ENTRY_FLAG},
	 128, 112, 72, 136, 48, 72},
	{12, {.interp_head = 40, .threads_head = 72, .ts_next = 8, .ts_thread_id = 136,
	      .ts_frame = 56, .cframe_frame = 0, .fr_previous = 8, .fr_code = 0, .fr_instr = 56,
	      .fr_entry = 70, .code_start = 192, .ts_datastack = 232, .ts_read = 256,
	      .entry_kind = RP_PY_ENTRY_SHIM},
	 128, 112, 68, 136, 40, 56},
	{13, {.interp_head = 632, .threads_head = 7344, .ts_next = 8, .ts_thread_id = 152,
	      .ts_frame = 72, .cframe_frame = 0xffff, .fr_previous = 8, .fr_code = 0,
	      .fr_instr = 56, .fr_entry = 70, .code_start = 200, .ts_datastack = 232,
	      .ts_read = 256, .entry_kind = RP_PY_ENTRY_SHIM},
	 128, 112, 68, 136, 40, 56},
};

static const struct layout *layout_of(unsigned minor)
{
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
		if (layouts[i].minor == minor)
			return &layouts[i];
	return NULL;
}

/* ---- line tables ---- */

/* 3.11+: 6-bit groups, bit 6 says another follows. */
static bool varint(const uint8_t *t, size_t len, size_t *i, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0; *i < len && shift < 64; shift += 6) {
		uint8_t b = t[(*i)++];
		v |= (uint64_t)(b & 63) << shift;
		if (!(b & 64)) {
			*out = v;
			return true;
		}
	}
	return false;
}

static bool svarint(const uint8_t *t, size_t len, size_t *i, int64_t *out)
{
	uint64_t v;
	if (!varint(t, len, i, &v))
		return false;
	*out = v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
	return true;
}

/* Objects/locations.md of 3.11: entries of a first byte 1CCCCLLL (code,
 * length - 1 in code units) and the code's fields. */
static uint32_t line_311(const uint8_t *t, size_t len, uint32_t first, uint32_t lasti)
{
	int64_t line = first;
	uint64_t addr = 0, skip;
	for (size_t i = 0; i < len;) {
		uint8_t b = t[i++];
		if (!(b & 0x80))
			return 0; /* not an entry's first byte: corrupt */
		unsigned code = b >> 3 & 15, n = (b & 7) + 1;
		int64_t delta = 0;
		bool known = code != 15;
		if (code == 14) {
			if (!svarint(t, len, &i, &delta) || !varint(t, len, &i, &skip) ||
			    !varint(t, len, &i, &skip) || !varint(t, len, &i, &skip))
				return 0;
		} else if (code == 13) {
			if (!svarint(t, len, &i, &delta))
				return 0;
		} else if (code >= 10 && code <= 12) {
			delta = code - 10;
			i += 2;
		} else if (code < 10) {
			i += 1;
		}
		line += delta;
		if (lasti < addr + n)
			return known && line > 0 && line <= UINT32_MAX ? (uint32_t)line : 0;
		addr += n;
	}
	return 0;
}

/* 3.10 (PEP 626): pairs of (bytes, signed line delta; -128: no line). */
static uint32_t line_310(const uint8_t *t, size_t len, uint32_t first, uint32_t lasti)
{
	int64_t line = first;
	uint64_t addr = 0, byte = (uint64_t)lasti * 2;
	for (size_t i = 0; i + 1 < len; i += 2) {
		int8_t delta = (int8_t)t[i + 1];
		if (delta != -128)
			line += delta;
		addr += t[i];
		if (byte < addr)
			return delta != -128 && line > 0 && line <= UINT32_MAX ? (uint32_t)line : 0;
	}
	return 0;
}

uint32_t rp_py_line(unsigned minor, const uint8_t *table, size_t len, uint32_t first_line,
		    uint32_t lasti)
{
	return minor == 10 ? line_310(table, len, first_line, lasti)
			   : line_311(table, len, first_line, lasti);
}

/* ---- code objects ---- */

static uint64_t ld(const uint8_t *p, size_t size)
{
	uint64_t v = 0;
	memcpy(&v, p, size); /* little-endian hosts: x86-64, aarch64 */
	return v;
}

static void put_utf8(char **o, char *end, uint32_t c)
{
	char b[4];
	size_t n;
	if (c < 0x80) {
		b[0] = (char)c, n = 1;
	} else if (c < 0x800) {
		b[0] = (char)(0xc0 | c >> 6), b[1] = (char)(0x80 | (c & 63)), n = 2;
	} else if (c < 0x10000) {
		b[0] = (char)(0xe0 | c >> 12), b[1] = (char)(0x80 | (c >> 6 & 63));
		b[2] = (char)(0x80 | (c & 63)), n = 3;
	} else if (c < 0x110000) {
		b[0] = (char)(0xf0 | c >> 18), b[1] = (char)(0x80 | (c >> 12 & 63));
		b[2] = (char)(0x80 | (c >> 6 & 63)), b[3] = (char)(0x80 | (c & 63)), n = 4;
	} else {
		b[0] = '?', n = 1;
	}
	if (c == '\t' || c == '\n' || c == 0)
		b[0] = ' ', n = 1; /* the separator and the string's end stay ours */
	if ((size_t)(end - *o) <= n)
		return;
	memcpy(*o, b, n);
	*o += n;
}

/* A str object (compact, as every str of a code object is) as UTF-8 into
 * out[0..cap), its first max characters. */
static int read_str(const struct layout *l, rp_py_read_fn rd, void *ctx, uint32_t pid,
		    uint64_t addr, char *out, size_t cap, size_t max)
{
	uint8_t head[80];
	if (!addr || rd(ctx, pid, addr, head, l->ascii_size) < 0)
		return -EINVAL;
	int64_t length = (int64_t)ld(head + 16, 8);
	uint32_t state = (uint32_t)ld(head + 32, 4);
	unsigned kind = state >> 2 & 7, compact = state >> 5 & 1, ascii = state >> 6 & 1;
	if (length < 0 || !compact || (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1))
		return -EINVAL;
	size_t n = (size_t)length < max ? (size_t)length : max;
	uint8_t data[4 * FILE_READ_MAX];
	if (n * kind > sizeof(data))
		n = sizeof(data) / kind;
	if (n && rd(ctx, pid, addr + (ascii ? l->ascii_size : l->compact_size), data, n * kind) < 0)
		return -EINVAL;
	char *o = out, *end = out + cap;
	for (size_t i = 0; i < n; i++)
		put_utf8(&o, end, (uint32_t)ld(data + i * kind, kind));
	*o = 0;
	return 0;
}

int rp_py_describe(unsigned minor, rp_py_read_fn rd, void *ctx, uint32_t pid, uint64_t code,
		   uint64_t code_type, uint32_t lasti, struct rp_py_code *out)
{
	const struct layout *l = layout_of(minor);
	if (!l)
		return -ENOTSUP;
	uint8_t co[CODE_READ];
	if (!code || rd(ctx, pid, code, co, sizeof(co)) < 0)
		return -EINVAL;
	if (code_type && ld(co + 8, 8) != code_type)
		return -EINVAL; /* ob_type: no code object (any more) */
	char qualname[QUALNAME_MAX + 1], file[4 * FILE_READ_MAX + 1];
	if (read_str(l, rd, ctx, pid, ld(co + l->co_qualname, 8), qualname, sizeof(qualname),
		     QUALNAME_MAX) < 0 ||
	    read_str(l, rd, ctx, pid, ld(co + l->co_filename, 8), file, sizeof(file), FILE_READ_MAX) < 0)
		return -EINVAL;
	int32_t first = (int32_t)ld(co + l->co_firstlineno, 4);
	uint32_t first_line = first > 0 ? (uint32_t)first : 0;
	out->line = 0;
	/* The line table: a bytes object (ob_size at 16, data at 32). */
	uint64_t table = ld(co + l->co_linetable, 8);
	uint8_t head[32];
	if (table && rd(ctx, pid, table, head, sizeof(head)) == 0) {
		int64_t len = (int64_t)ld(head + 16, 8);
		uint8_t *t = len > 0 && len <= LINETABLE_MAX ? malloc((size_t)len) : NULL;
		if (t && rd(ctx, pid, table + 32, t, (size_t)len) == 0)
			out->line = rp_py_line(minor, t, (size_t)len, first_line, lasti);
		free(t);
	}
	if (!out->line)
		out->line = first_line;
	/* Long paths keep their end, which names the file. */
	size_t qlen = strlen(qualname), flen = strlen(file), room = sizeof(out->name) - qlen - 2;
	const char *f = flen > room ? file + flen - room : file;
	while ((*f & 0xc0) == 0x80) /* not inside a character */
		f++;
	memcpy(out->name, qualname, qlen);
	out->name[qlen] = '\t';
	memcpy(out->name + qlen + 1, f, strlen(f) + 1);
	return 0;
}

/* ---- merging ---- */

static bool within(uint64_t ip, uint64_t start, uint64_t end)
{
	return ip >= start && ip < end;
}

unsigned rp_py_merge(const uint64_t *user, unsigned nuser, const uint64_t *py, unsigned npy,
		     const struct rp_py_native *at, uint64_t *out, unsigned max)
{
	unsigned n = 0, k = 0, i = 0;
	bool reached = false;
	for (unsigned j = 0; j < nuser && !reached; j++)
		reached = within(user[j], at->eval_start, at->eval_end);
	if (!reached) {
		/* Native frames up to the interpreter's first, then the Python
		 * ones.  Past that frame the walk went on through code without
		 * frame pointers: guesswork, left out. */
		while (i < nuser && n < max && !within(user[i], at->text_start, at->text_end))
			out[n++] = user[i++];
		if (i < nuser && n < max)
			out[n++] = user[i++];
		while (k < npy && n < max)
			out[n++] = py[k++] & ~1ull;
		return n;
	}
	for (; i < nuser && n < max; i++) {
		if (!within(user[i], at->eval_start, at->eval_end) || k == npy) {
			out[n++] = user[i];
			continue;
		}
		/* This run of the loop: Python frames up to its outermost. */
		while (k < npy && n < max) {
			bool outermost = py[k] & 1;
			out[n++] = py[k++] & ~1ull;
			if (outermost)
				break;
		}
	}
	while (k < npy && n < max)
		out[n++] = py[k++] & ~1ull;
	return n;
}

/* ---- processes ---- */

struct proc {
	uint32_t pid;         /* 0: empty slot */
	bool python;
	unsigned minor;
	struct rp_py_native native;
	uint64_t code_type;
	uint64_t next_probe_ns, backoff_ns;
};

struct code_key {
	uint32_t pid, lasti;
	uint64_t code;
};

struct rp_pyframes {
	struct rp_pyframes_opts o;
	char root[PATH_MAX - 64];
	struct proc *procs; /* open addressing by pid */
	size_t mask, nprocs;
	struct code_key *codes;
	size_t ncodes;
	struct rp_pyframes_stats st;
};

int rp_pyframes_new(const struct rp_pyframes_opts *opts, struct rp_pyframes **out,
		    struct rp_err *err)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return rp_err_set(err, -ENOTSUP, "libelf is too old for this ringprofd: %s",
				  elf_errmsg(-1));
	struct rp_pyframes *p = calloc(1, sizeof(*p));
	if (!p)
		return rp_err_set(err, -ENOMEM, "out of memory for Python frames");
	p->o = *opts;
	if (!p->o.read)
		p->o.read = rp_procmem_read;
	if ((size_t)snprintf(p->root, sizeof(p->root), "%s", opts->proc_root) >= sizeof(p->root)) {
		free(p);
		return rp_err_set(err, -ENAMETOOLONG, "proc path too long: %s", opts->proc_root);
	}
	p->mask = 255;
	p->procs = calloc(p->mask + 1, sizeof(*p->procs));
	p->codes = calloc(CODE_SLOTS, sizeof(*p->codes));
	if (!p->procs || !p->codes) {
		rp_pyframes_free(p);
		return rp_err_set(err, -ENOMEM, "out of memory for Python frames");
	}
	*out = p;
	return 0;
}

void rp_pyframes_free(struct rp_pyframes *p)
{
	if (!p)
		return;
	free(p->procs);
	free(p->codes);
	free(p);
}

static struct proc *slot_of(struct proc *procs, size_t mask, uint32_t pid)
{
	for (size_t i = pid * 2654435761u & mask;; i = (i + 1) & mask)
		if (procs[i].pid == pid || procs[i].pid == 0)
			return &procs[i];
}

static struct proc *find_proc(struct rp_pyframes *p, uint32_t pid)
{
	if (p->nprocs + 1 > (p->mask + 1) / 2) {
		size_t mask = 2 * p->mask + 1;
		struct proc *grown = calloc(mask + 1, sizeof(*grown));
		if (!grown)
			return NULL;
		for (size_t i = 0; i <= p->mask; i++)
			if (p->procs[i].pid)
				*slot_of(grown, mask, p->procs[i].pid) = p->procs[i];
		free(p->procs);
		p->procs = grown;
		p->mask = mask;
	}
	struct proc *s = slot_of(p->procs, p->mask, pid);
	if (!s->pid) {
		*s = (struct proc){.pid = pid, .backoff_ns = PROBE_MIN_NS};
		p->nprocs++;
	}
	return s;
}

/* 3.minor from a file name "python3.11", "libpython3.12.so.1.0",
 * "python3.13d": 0 when it names none. */
static unsigned minor_of_name(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strncmp(base, "lib", 3) == 0)
		base += 3;
	unsigned minor;
	if (sscanf(base, "python3.%u", &minor) != 1)
		return 0;
	return minor;
}

struct elf_syms {
	uint64_t runtime, eval, eval_size, code_type, version_addr;
	uint32_t version; /* Py_Version (3.11+), read from the file */
};

/* The symbols of the interpreter in the ELF file at path, their
 * addresses as linked, and the bias of a mapping [start, ..) of the file
 * at offset off.  -ENOENT when it has no _PyRuntime. */
static int read_elf(const char *path, uint64_t start, uint64_t off, struct elf_syms *s,
		    uint64_t *bias)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	int rc = -ENOENT;
	size_t nphdr;
	*s = (struct elf_syms){0};
	*bias = 0;
	if (!e || elf_kind(e) != ELF_K_ELF || elf_getphdrnum(e, &nphdr) != 0)
		goto out;
	bool found_bias = false;
	for (size_t i = 0; i < nphdr && !found_bias; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD &&
		    (ph.p_offset & ~4095ull) == off) {
			*bias = start - (ph.p_vaddr & ~4095ull);
			found_bias = true;
		}
	}
	for (Elf_Scn *scn = NULL; found_bias && (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) ||
		    !sh.sh_entsize)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;
			if (!gelf_getsym(d, (int)i, &sym) || !sym.st_value ||
			    !(name = elf_strptr(e, sh.sh_link, sym.st_name)))
				continue;
			if (strcmp(name, "_PyRuntime") == 0) {
				s->runtime = sym.st_value;
			} else if (strcmp(name, "_PyEval_EvalFrameDefault") == 0) {
				s->eval = sym.st_value;
				s->eval_size = sym.st_size;
			} else if (strcmp(name, "PyCode_Type") == 0) {
				s->code_type = sym.st_value;
			} else if (strcmp(name, "Py_Version") == 0) {
				s->version_addr = sym.st_value;
			}
		}
	}
	/* Py_Version's value, from the section holding it. */
	for (Elf_Scn *scn = NULL; s->version_addr && (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS ||
		    s->version_addr < sh.sh_addr || s->version_addr + 4 > sh.sh_addr + sh.sh_size)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		uint64_t at = s->version_addr - sh.sh_addr;
		if (d && d->d_buf && at + 4 <= d->d_size)
			s->version = (uint32_t)ld((const uint8_t *)d->d_buf + at, 4);
		break;
	}
	rc = s->runtime && s->eval ? 0 : -ENOENT;
out:
	if (e)
		elf_end(e);
	close(fd);
	return rc;
}

/* Whether process pid maps a CPython this knows; fills pr and py. */
static bool probe(struct rp_pyframes *p, struct proc *pr, struct rp_py_proc *py)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%" PRIu32 "/maps", p->root, pr->pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[PATH_MAX + 128], interp[PATH_MAX];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		int pathat = 0;
		char perms[5];
		if (sscanf(line, "%llx-%llx %4s %llx %*s %*s %n", &start, &end, perms, &off,
			   &pathat) < 4 || !pathat || line[pathat] != '/')
			continue;
		char *file = line + pathat;
		file[strcspn(file, "\n")] = 0;
		const char *base = strrchr(file, '/') + 1;
		if (strncmp(base, "python3", 7) != 0 && strncmp(base, "libpython3", 10) != 0)
			continue;
		/* Through the process's root: a container's file. */
		char in_root[PATH_MAX];
		if ((size_t)snprintf(in_root, sizeof(in_root), "%s/%" PRIu32 "/root%s", p->root,
				     pr->pid, file) >= sizeof(in_root))
			continue;
		struct elf_syms s = {0};
		uint64_t bias = 0;
		if (read_elf(in_root, start, off, &s, &bias) < 0)
			continue;
		unsigned minor = s.version >> 24 == 3 ? (s.version >> 16 & 0xff) : minor_of_name(file);
		const struct layout *l = layout_of(minor);
		if (!l)
			continue;
		*py = l->walk;
		py->runtime = s.runtime + bias;
		pr->minor = minor;
		pr->native.eval_start = s.eval + bias;
		pr->native.eval_end = pr->native.eval_start + (s.eval_size ? s.eval_size : 1);
		pr->code_type = s.code_type ? s.code_type + bias : 0;
		snprintf(interp, sizeof(interp), "%s", file);
		found = true;
	}
	/* The interpreter's code: its file's executable mappings, which
	 * follow the first. */
	pr->native.text_start = pr->native.text_end = 0;
	while (found && fgets(line, sizeof(line), f)) {
		unsigned long long start, end;
		int pathat = 0;
		char perms[5];
		if (sscanf(line, "%llx-%llx %4s %*s %*s %*s %n", &start, &end, perms, &pathat) < 3 ||
		    !pathat || perms[2] != 'x')
			continue;
		line[pathat + strcspn(line + pathat, "\n")] = 0;
		if (strcmp(line + pathat, interp) != 0)
			continue;
		if (!pr->native.text_start || start < pr->native.text_start)
			pr->native.text_start = start;
		if (end > pr->native.text_end)
			pr->native.text_end = end;
	}
	fclose(f);
	return found;
}

static void see_process(struct rp_pyframes *p, struct proc *pr, uint64_t now)
{
	if (pr->python || now < pr->next_probe_ns)
		return;
	struct rp_py_proc py;
	if (probe(p, pr, &py) && p->o.install(p->o.install_ctx, pr->pid, &py) == 0) {
		pr->python = true;
		p->st.processes++;
		return;
	}
	/* Not (yet) Python: it may exec or load libpython later. */
	pr->next_probe_ns = now + pr->backoff_ns;
	if (pr->backoff_ns < PROBE_MAX_NS)
		pr->backoff_ns *= 2;
}

/* Whether (pid, code, lasti) is new; it is then remembered. */
static bool first_code(struct rp_pyframes *p, uint32_t pid, uint64_t code, uint32_t lasti)
{
	if (p->ncodes >= CODE_SLOTS / 2) {
		memset(p->codes, 0, CODE_SLOTS * sizeof(*p->codes));
		p->ncodes = 0;
	}
	uint64_t h = (code ^ (uint64_t)pid << 32 ^ lasti) * 0x9e3779b97f4a7c15ull;
	for (size_t i = h >> 50;; i = (i + 1) % CODE_SLOTS) {
		struct code_key *k = &p->codes[i];
		if (k->pid == pid && k->code == code && k->lasti == lasti)
			return false;
		if (!k->pid) {
			*k = (struct code_key){pid, lasti, code};
			p->ncodes++;
			return true;
		}
	}
}

int rp_pyframes_sample(struct rp_pyframes *p, const struct rp_event *sample, const uint64_t *py,
		       unsigned npy, rp_event_fn fn, void *ctx, struct rp_event *out,
		       uint64_t *frames)
{
	*out = *sample;
	struct proc *pr = sample->pid ? find_proc(p, sample->pid) : NULL;
	if (!pr)
		return 0;
	see_process(p, pr, sample->ts);
	if (!pr->python || !npy)
		return 0;
	unsigned nk = sample->u.sample.nkernel;
	memcpy(frames, sample->u.sample.frames, nk * sizeof(*frames));
	unsigned n = nk + rp_py_merge(sample->u.sample.frames + nk, sample->u.sample.nframes - nk, py,
				      npy, &pr->native, frames + nk,
				      RP_STACK_MAX - nk);
	out->u.sample.frames = frames;
	out->u.sample.nframes = (uint16_t)n;
	for (unsigned i = nk; i < n; i++) {
		if (!(frames[i] & RP_PY_FRAME_TAG))
			continue;
		uint64_t code = frames[i] & RP_PY_CODE_MASK;
		uint32_t lasti = (uint32_t)(frames[i] >> RP_PY_LASTI_SHIFT & RP_PY_LASTI_MAX);
		if (!first_code(p, sample->pid, code, lasti))
			continue;
		struct rp_py_code c;
		if (rp_py_describe(pr->minor, p->o.read, p->o.read_ctx, sample->pid, code,
				   pr->code_type, lasti, &c) < 0) {
			p->st.unreadable++;
			continue;
		}
		struct rp_event ev = {.kind = RP_EV_PY_CODE, .ts = sample->ts, .pid = sample->pid,
				      .tid = sample->pid, .name = c.name,
				      .u.py_code = {.code = code, .lasti = lasti, .line = c.line}};
		p->st.codes++;
		int rc = fn(ctx, &ev);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void rp_pyframes_reap(struct rp_pyframes *p)
{
	/* Open addressing without tombstones: the live ones move to a new
	 * table. */
	struct proc *fresh = calloc(p->mask + 1, sizeof(*fresh));
	if (!fresh)
		return;
	bool python_gone = false;
	for (size_t i = 0; i <= p->mask; i++) {
		struct proc *pr = &p->procs[i];
		char path[PATH_MAX];
		if (!pr->pid)
			continue;
		snprintf(path, sizeof(path), "%s/%" PRIu32, p->root, pr->pid);
		if (access(path, F_OK) == 0) {
			*slot_of(fresh, p->mask, pr->pid) = *pr;
			continue;
		}
		if (pr->python)
			(void)p->o.install(p->o.install_ctx, pr->pid, NULL);
		python_gone |= pr->python;
		p->nprocs--;
	}
	free(p->procs);
	p->procs = fresh;
	/* A reused pid must have its code described afresh. */
	if (python_gone) {
		memset(p->codes, 0, CODE_SLOTS * sizeof(*p->codes));
		p->ncodes = 0;
	}
}

void rp_pyframes_stats(const struct rp_pyframes *p, struct rp_pyframes_stats *st)
{
	*st = p->st;
}
