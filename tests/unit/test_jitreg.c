/* collectors/cpu/jitreg: a symfile built here as LLVM's JIT registers one
 * (a relocatable ELF whose section headers carry the loaded addresses),
 * walked through a fake process memory; hostile variants (every
 * truncation, bad indexes, a loop in the entry list, unmapped pointers,
 * an unknown descriptor version) stay bounded. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <unistd.h>

#include "../gdb_jit.h"
#include "jitreg.h"
#include "procmem.h"

#define TEXT_ADDR 0x7f3700001000ull
#define MEM_BASE 0x10000ull

/* ehdr | shdr[4] (null, .ltext, .symtab, .strtab) | syms[5] | strtab */
struct symfile {
	Elf64_Ehdr eh;
	Elf64_Shdr sh[4];
	Elf64_Sym sym[5];
	char str[64];
};

static const char strtab[] = "\0wrapped_broadcast\0fusion.3\0data\0";

static void build(struct symfile *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->eh.e_ident, ELFMAG, SELFMAG);
	f->eh.e_ident[EI_CLASS] = ELFCLASS64;
	f->eh.e_ident[EI_DATA] = ELFDATA2LSB;
	f->eh.e_ident[EI_VERSION] = EV_CURRENT;
	f->eh.e_version = EV_CURRENT;
	f->eh.e_ehsize = sizeof(Elf64_Ehdr);
	f->eh.e_type = ET_REL;
	f->eh.e_shoff = offsetof(struct symfile, sh);
	f->eh.e_shentsize = sizeof(Elf64_Shdr);
	f->eh.e_shnum = 4;
	f->sh[1] = (Elf64_Shdr){.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
	                        .sh_addr = TEXT_ADDR, .sh_size = 4096};
	f->sh[2] = (Elf64_Shdr){.sh_type = SHT_SYMTAB, .sh_offset = offsetof(struct symfile, sym),
	                        .sh_size = sizeof(f->sym), .sh_link = 3, .sh_entsize = sizeof(Elf64_Sym)};
	f->sh[3] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = offsetof(struct symfile, str),
	                        .sh_size = sizeof(strtab)};
	memcpy(f->str, strtab, sizeof(strtab));
	f->sym[1] = (Elf64_Sym){.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
	                        .st_shndx = 1, .st_value = 0, .st_size = 532};
	f->sym[2] = (Elf64_Sym){.st_name = 19, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC),
	                        .st_shndx = 1, .st_value = 0x240, .st_size = 64};
	/* Not functions of loaded code: data, a bad section index. */
	f->sym[3] = (Elf64_Sym){.st_name = 28, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_OBJECT),
	                        .st_shndx = 1, .st_size = 8};
	f->sym[4] = (Elf64_Sym){.st_name = 1, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC),
	                        .st_shndx = 99, .st_size = 8};
}

static void parses_loaded_functions(void **state)
{
	(void)state;
	struct symfile f;
	build(&f);
	struct rp_jit_func out[8];
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), 2);
	assert_string_equal(out[0].name, "wrapped_broadcast");
	assert_int_equal(out[0].start, TEXT_ADDR);
	assert_int_equal(out[0].end, TEXT_ADDR + 532);
	assert_string_equal(out[1].name, "fusion.3");
	assert_int_equal(out[1].start, TEXT_ADDR + 0x240);
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 1), 1);
}

static void hostile_symfiles_stay_bounded(void **state)
{
	(void)state;
	struct rp_jit_func out[8];
	uint64_t *copy = malloc(sizeof(struct symfile));
	assert_non_null(copy);
	struct symfile f;
	build(&f);
	/* Every truncation: parsed from a buffer of exactly that size. */
	for (size_t len = 0; len < sizeof(f); len++) {
		memcpy(copy, &f, len);
		int r = rp_jit_parse_symfile((uint8_t *)copy, len, out, 8);
		assert_true(r == -EINVAL || (r >= 0 && r <= 2));
	}
	build(&f);
	f.eh.e_shnum = 0xffff; /* a section table past the end: none read */
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), 0);
	build(&f);
	f.sh[2].sh_size = UINT64_MAX - 7;
	f.sh[3].sh_size = UINT64_MAX;
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), 0);
	build(&f);
	f.sh[2].sh_link = 77;
	f.sym[1].st_name = 1000;
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), 0);
	build(&f);
	f.sym[1].st_size = UINT64_MAX;
	f.str[sizeof(f.str) - 1] = 'x';
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), 1);
	build(&f);
	f.eh.e_ident[EI_CLASS] = ELFCLASS32;
	assert_int_equal(rp_jit_parse_symfile((uint8_t *)&f, sizeof(f), out, 8), -EINVAL);
	free(copy);
}

/* A process memory: descriptor, entries, the symfile, from MEM_BASE. */
struct memory {
	uint64_t desc[3];    /* version|action, relevant_entry, first_entry */
	uint64_t entry[2][4];
	struct symfile f;
};

static int memory_read(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len)
{
	(void)pid;
	if (addr < MEM_BASE || addr - MEM_BASE > sizeof(struct memory) ||
	    len > sizeof(struct memory) - (addr - MEM_BASE))
		return -EFAULT;
	memcpy(buf, (const uint8_t *)ctx + (addr - MEM_BASE), len);
	return 0;
}

static void memory_build(struct memory *m)
{
	memset(m, 0, sizeof(*m));
	m->desc[0] = 1;
	m->desc[2] = MEM_BASE + offsetof(struct memory, entry);
	uint64_t sf = MEM_BASE + offsetof(struct memory, f);
	m->entry[0][0] = MEM_BASE + offsetof(struct memory, entry[1]);
	m->entry[0][2] = sf;
	m->entry[0][3] = sizeof(struct symfile);
	m->entry[1][2] = 0xdead0000; /* unmapped: skipped */
	m->entry[1][3] = sizeof(struct symfile);
	build(&m->f);
}

static void walks_entries(void **state)
{
	(void)state;
	struct memory m;
	memory_build(&m);
	struct rp_jit_func out[8];
	assert_int_equal(rp_jit_walk(memory_read, &m, 1, MEM_BASE, out, 8), 2);
	assert_string_equal(out[0].name, "wrapped_broadcast");
	/* A loop in the list: bounded by RP_JIT_ENTRIES and by max. */
	m.entry[1][0] = m.desc[2];
	m.entry[1][2] = m.entry[0][2];
	assert_int_equal(rp_jit_walk(memory_read, &m, 1, MEM_BASE, out, 8), 8);
	/* Absurd sizes, an unmapped descriptor, an unknown version. */
	memory_build(&m);
	m.entry[0][3] = UINT64_MAX;
	assert_int_equal(rp_jit_walk(memory_read, &m, 1, MEM_BASE, out, 8), 0);
	assert_int_equal(rp_jit_walk(memory_read, &m, 1, 0x10, out, 8), -EFAULT);
	m.desc[0] = 2;
	assert_int_equal(rp_jit_walk(memory_read, &m, 1, MEM_BASE, out, 8), -EPROTO);
}

/* This program as a JIT that registers one symfile the way GDB's
 * interface says; found in its own ELF and walked in its own memory. */
struct jit_descriptor __jit_debug_descriptor = {1, 0, NULL, NULL};

static void finds_and_walks_own_registration(void **state)
{
	(void)state;
	static struct symfile f;
	build(&f);
	struct jit_code_entry e = {NULL, NULL, (const char *)&f, sizeof(f)};
	__jit_debug_descriptor.first_entry = __jit_debug_descriptor.relevant_entry = &e;
	uint64_t vaddr = 0;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(rp_jit_find_descriptor(fd, &vaddr), 0);
	close(fd);
	Dl_info info;
	assert_int_not_equal(dladdr(&__jit_debug_descriptor, &info), 0);
	uint64_t desc = (uint64_t)(uintptr_t)info.dli_fbase + vaddr;
	assert_int_equal(desc, (uint64_t)(uintptr_t)&__jit_debug_descriptor);
	struct rp_jit_func out[4];
	assert_int_equal(rp_jit_walk(rp_procmem_read, NULL, (uint32_t)getpid(), desc, out, 4), 2);
	assert_string_equal(out[1].name, "fusion.3");
	fd = open("/bin/sh", O_RDONLY | O_CLOEXEC); /* an ELF file without one */
	assert_true(fd >= 0);
	assert_int_equal(rp_jit_find_descriptor(fd, &vaddr), -ENOENT);
	close(fd);
	__jit_debug_descriptor.first_entry = __jit_debug_descriptor.relevant_entry = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_loaded_functions),
		cmocka_unit_test(hostile_symfiles_stay_bounded),
		cmocka_unit_test(walks_entries),
		cmocka_unit_test(finds_and_walks_own_registration),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
