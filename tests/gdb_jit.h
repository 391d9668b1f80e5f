/* GDB's JIT interface as a JIT program declares it (GDB's manual, "JIT
 * Compilation Interface"): the test programs that play a JIT define
 * __jit_debug_descriptor and register their code in it. */
#ifndef RINGPROF_TESTS_GDB_JIT_H
#define RINGPROF_TESTS_GDB_JIT_H

#include <stdint.h>

struct jit_code_entry {
	struct jit_code_entry *next, *prev;
	const char *symfile_addr;
	uint64_t symfile_size;
};

struct jit_descriptor {
	uint32_t version, action_flag;
	struct jit_code_entry *relevant_entry, *first_entry;
};

#endif
