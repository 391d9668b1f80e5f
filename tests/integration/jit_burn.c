/* jit-burn: generates a function at run time (x86-64 machine code copied
 * into an executable anonymous mapping), calls it in a loop, and
 * describes it as a JIT would, for the JIT symbolization tests: in
 * /tmp/perf-<pid>.map (perfmap, the default; the file is left behind, as
 * JITs leave it), or through GDB's JIT interface (gdb: an in-memory ELF
 * object whose .text section header carries the code's address and whose
 * symbol names it, registered in __jit_debug_descriptor, as LLVM's ORC JIT
 * in XLA does).
 *
 *   jit-burn SECONDS NAME [perfmap|gdb]
 *
 * Prints its pid. */
#include <elf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../gdb_jit.h"

/* mov eax, edi; 1: dec eax; jnz 1b; ret */
static const unsigned char spin[] = { 0x89, 0xf8, 0xff, 0xc8, 0x75, 0xfc, 0xc3 };

/* GDB's JIT interface: the debugger (ringprofd) finds the descriptor by
 * its symbol and walks the list. */
struct jit_descriptor __jit_debug_descriptor = { 1, 0, NULL, NULL };

/* Where a debugger sets its breakpoint; called after each change. */
__attribute__((noinline, used)) void __jit_debug_register_code(void)
{
	__asm__ volatile("" ::: "memory");
}

/* ehdr | section headers (null, .text, .symtab, .strtab) | symbols | names */
static struct {
	Elf64_Ehdr eh;
	Elf64_Shdr sh[4];
	Elf64_Sym sym[2];
	char str[64];
} symfile;

static void register_code(const void *code, size_t size, const char *name)
{
	memcpy(symfile.eh.e_ident, ELFMAG, SELFMAG);
	symfile.eh.e_ident[EI_CLASS] = ELFCLASS64;
	symfile.eh.e_ident[EI_DATA] = ELFDATA2LSB;
	symfile.eh.e_ident[EI_VERSION] = EV_CURRENT;
	symfile.eh.e_type = ET_REL;
	symfile.eh.e_machine = EM_X86_64;
	symfile.eh.e_ehsize = sizeof(Elf64_Ehdr);
	symfile.eh.e_shoff = offsetof(__typeof__(symfile), sh);
	symfile.eh.e_shentsize = sizeof(Elf64_Shdr);
	symfile.eh.e_shnum = 4;
	symfile.sh[1] = (Elf64_Shdr){ .sh_type = SHT_PROGBITS,
				      .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
				      .sh_addr = (uint64_t)(uintptr_t)code, .sh_size = size };
	symfile.sh[2] = (Elf64_Shdr){ .sh_type = SHT_SYMTAB,
				      .sh_offset = offsetof(__typeof__(symfile), sym),
				      .sh_size = sizeof(symfile.sym), .sh_link = 3, .sh_info = 1,
				      .sh_entsize = sizeof(Elf64_Sym) };
	snprintf(symfile.str + 1, sizeof(symfile.str) - 1, "%s", name);
	symfile.sh[3] = (Elf64_Shdr){ .sh_type = SHT_STRTAB,
				      .sh_offset = offsetof(__typeof__(symfile), str),
				      .sh_size = sizeof(symfile.str) };
	symfile.sym[1] = (Elf64_Sym){ .st_name = 1,
				      .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
				      .st_shndx = 1, .st_size = size };
	static struct jit_code_entry entry;
	entry = (struct jit_code_entry){ .symfile_addr = (const char *)&symfile,
					 .symfile_size = sizeof(symfile) };
	__jit_debug_descriptor.first_entry = __jit_debug_descriptor.relevant_entry = &entry;
	__jit_debug_descriptor.action_flag = 1; /* JIT_REGISTER_FN */
	__jit_debug_register_code();
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	bool gdb = argc == 4 && !strcmp(argv[3], "gdb");
	if (argc < 3 || argc > 4 || (argc == 4 && !gdb && strcmp(argv[3], "perfmap"))) {
		fprintf(stderr, "usage: jit-burn SECONDS NAME [perfmap|gdb]\n");
		return 2;
	}
#if !defined(__x86_64__)
	fprintf(stderr, "jit-burn: generates x86-64 code only\n");
	return 3;
#else
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, spin, sizeof(spin));
	if (mprotect(code, 4096, PROT_READ | PROT_EXEC) < 0)
		return 1;
	if (gdb) {
		register_code(code, sizeof(spin), argv[2]);
	} else {
		char path[64];
		snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
		FILE *f = fopen(path, "w");
		if (!f)
			return 1;
		fprintf(f, "%lx %zx %s\n", (unsigned long)code, sizeof(spin), argv[2]);
		fclose(f);
	}
	int (*fn)(int);
	memcpy(&fn, &code, sizeof(fn));
	double end = now() + atof(argv[1]);
	while (now() < end)
		fn(1000000);
	printf("%d\n", (int)getpid());
	return 0;
#endif
}
