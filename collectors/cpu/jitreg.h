/* Functions of JIT-compiled code (XLA on CPU, any LLVM ORC JIT) named from
 * the process's GDB JIT registrations (docs/unwinding.md).
 *
 * A JIT that supports debuggers keeps __jit_debug_descriptor {version,
 * action, relevant_entry, first_entry} and a list of entries {next, prev,
 * symfile_addr, symfile_size}; each symfile is an ELF object whose section
 * headers carry the addresses its sections were loaded at.  This module
 * walks the list through a memory reader and turns each symfile's FUNC
 * symbols into [start, end) -> name.
 *
 * Everything read is hostile input: the walk stops after RP_JIT_ENTRIES
 * entries (a loop in the list ends there), symfiles over RP_JIT_SYMFILE
 * bytes are skipped, the ELF is read with libelf (which checks every offset
 * and index against the buffer). */
#ifndef RINGPROF_JITREG_H
#define RINGPROF_JITREG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RP_JIT_ENTRIES 4096
#define RP_JIT_SYMFILE (16u << 20)
#define RP_JIT_NAME 128

struct rp_jit_func {
	uint64_t start, end;
	char name[RP_JIT_NAME];
};

/* Reads len bytes at addr of process pid; 0 or negative errno. */
typedef int (*rp_jit_read_fn)(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len);

/* The FUNC symbols of one symfile (an ELF64 little-endian object, read
 * with libelf in place), at most max into out; returns how many were
 * stored, or -EINVAL when buf is no such object. */
RP_MUST_CHECK int rp_jit_parse_symfile(uint8_t *buf, size_t len, struct rp_jit_func *out,
                                       size_t max);

/* Walks the descriptor at desc in process pid and stores the functions of
 * every registered symfile, at most max; returns how many, or negative
 * errno when the descriptor cannot be read or has an unknown version.
 * Entries whose symfile cannot be read or parsed are skipped. */
RP_MUST_CHECK int rp_jit_walk(rp_jit_read_fn read, void *ctx, uint32_t pid, uint64_t desc,
                              struct rp_jit_func *out, size_t max);

/* Where __jit_debug_descriptor lies in the ELF file open at fd, as its
 * symbols say (.symtab, where LLVM keeps it LOCAL, or .dynsym): its
 * distance from the start of the mapping of the file's offset 0 (the
 * first loaded page).  0 or negative errno (-ENOENT: the file defines
 * none).  The file's position is not used; fd stays open. */
RP_MUST_CHECK int rp_jit_find_descriptor(int fd, uint64_t *from_base);

#endif
