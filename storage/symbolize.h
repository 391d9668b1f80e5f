/* Symbolization of CPU sample frames at export time (never while
 * sampling):
 *
 * - kernel frames through a kallsyms file (/proc/kallsyms, read on first
 *   use; it shows real addresses only to root);
 * - user frames through the process's recorded mappings (RP_EV_MAPPING):
 *   the file on disk is opened with elfutils (libdwfl), its build-id
 *   checked against the recorded one, and the frame named from its ELF
 *   symbols, with file and line from DWARF (separate debug files found by
 *   build-id, e.g. /usr/lib/debug/.build-id, are used too);
 * - JIT frames: a recorded mapping named RP_JIT_MAPPING_PREFIX "FUNCTION"
 *   (a function the daemon read from the process's GDB JIT registrations)
 *   is that function; outside every recorded mapping, through the
 *   process's perf map, <perf_map_dir>/perf-PID.map (written by Python
 *   3.12 -X perf, oneDNN, the JVM, V8: "START SIZE name" in hex), which
 *   may outlive the process.
 *
 * - Python frames (RP_PY_FRAME) through the process's RP_EV_PY_CODE
 *   events: "qualname (file:line)".
 *
 * A frame that cannot be named keeps module+0xOFFSET (the file offset),
 * or [unknown]+0xADDRESS without a mapping.  Results are cached per file
 * and address.
 *
 * C++ names (Itanium ABI "_Z...", which legacy Rust names follow too) are
 * demangled by libstdc++'s __cxa_demangle, each symbol once per
 * symbolizer; the mangled name is kept beside it for the formats that
 * have room for both.  A name that does not demangle stays as it is.
 * Single threaded. */
#ifndef RINGPROF_SYMBOLIZE_H
#define RINGPROF_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct rp_symbolizer_opts {
	const char *kallsyms;     /* NULL: /proc/kallsyms */
	const char *perf_map_dir; /* NULL: /tmp */
};

/* What a frame is.  Strings are the symbolizer's: valid until it is
 * freed. */
struct rp_symbol {
	const char *function; /* NULL when unnamed; demangled (see mangled) */
	const char *mangled;  /* the symbol as the binary spells it, when
				 function is its demangled form; else NULL */
	const char *module;   /* file name of the mapping, "[kernel]" or "[MODULE]"
				 for the kernel, "[jit]" for perf maps, "[python]"
				 for Python frames; NULL: none */
	uint64_t offset;      /* from the function's start; unnamed: from the
				 file's start (file offset), or the address
				 without a module; Python: the instruction offset */
	const char *file;     /* source file (DWARF), NULL when unknown */
	unsigned line;        /* 0 when unknown */
};

struct rp_symbolizer_stats {
	uint64_t frames;        /* symbolized */
	uint64_t named;         /* of which got a function name */
	uint64_t mismatched;    /* in files whose build-id is not the recorded one */
	uint64_t unreadable;    /* in files that could not be opened as ELF */
	bool kallsyms_zeroed;   /* kallsyms showed every address as 0 (not root) */
	bool kallsyms_missing;  /* the kallsyms file could not be read */
};

struct rp_symbolizer;

RP_MUST_CHECK int rp_symbolizer_new(const struct rp_symbolizer_opts *opts, struct rp_symbolizer **out,
		      struct rp_err *err);
void rp_symbolizer_free(struct rp_symbolizer *s);

/* Process pid maps path's bytes from file offset at [start, end).  A
 * mapping replaces those of the process it overlaps (the process mapped
 * something else there); adding the same mapping again is cheap (they
 * are repeated in every chunk).  build_id_len 0: unknown, not checked.
 * -ENOMEM or -EINVAL (end <= start, build_id_len over 20). */
RP_MUST_CHECK int rp_symbolizer_add_mapping(struct rp_symbolizer *s, uint32_t pid, uint64_t start,
			      uint64_t end, uint64_t offset, const char *path,
			      const uint8_t *build_id, size_t build_id_len);

/* Python code location (code object, instruction offset lasti) of
 * process pid is function name in "qualname\tfile", at line (an
 * RP_EV_PY_CODE event).  Python frames of CPU samples (RP_PY_FRAME) are
 * named from these: "qualname (file:line)", module "[python]", and
 * "[unknown python frame]" without one.  -ENOMEM or -EINVAL (pid 0). */
RP_MUST_CHECK int rp_symbolizer_add_py_code(struct rp_symbolizer *s, uint32_t pid, uint64_t code,
			      uint32_t lasti, uint32_t line, const char *name);

/* The address to name for frame i of a CPU sample's stack (frames leaf
 * first, the first nkernel of them kernel frames): a return address (any
 * frame but the leaf of the kernel and of the user stack) minus one, so
 * that it falls inside the call; 0 stays 0. */
uint64_t rp_frame_address(const uint64_t *frames, unsigned nkernel, unsigned i);

/* Name the frame at ip of process pid (see rp_frame_address). */
void rp_symbolize(struct rp_symbolizer *s, uint32_t pid, uint64_t ip, bool kernel,
		  struct rp_symbol *out);

/* The frame's name as exports show it: the function (the symbolizer's
 * string, whole), else "[unknown python frame]", module+0xOFFSET or
 * [unknown]+0xADDRESS written into buf. */
const char *rp_symbol_name(const struct rp_symbol *sym, char *buf, size_t len);

/* A name as exports show it: an Itanium C++ ABI name (a CUDA kernel's, as
 * CUPTI reports it) demangled, anything else as it is.  The result stays
 * valid as long as s. */
const char *rp_symbolizer_demangle(struct rp_symbolizer *s, const char *name);

void rp_symbolizer_stats(const struct rp_symbolizer *s, struct rp_symbolizer_stats *st);

#endif
