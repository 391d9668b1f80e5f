/* GDB JIT registrations read and parsed, bounded (jitreg.h). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jitreg.h"

struct jit_descriptor {
	uint32_t version, action;
	uint64_t relevant_entry, first_entry;
};

struct jit_entry {
	uint64_t next, prev, symfile_addr, symfile_size;
};

/* Whether [off, off + size) lies inside a buffer of len bytes. */
static int in_bounds(uint64_t off, uint64_t size, size_t len)
{
	return off <= len && size <= len - off;
}

static const Elf64_Shdr *section(const uint8_t *buf, size_t len, const Elf64_Ehdr *eh, uint64_t i)
{
	if (i == SHN_UNDEF || i >= eh->e_shnum)
		return NULL;
	uint64_t off = eh->e_shoff + i * sizeof(Elf64_Shdr);
	if (!in_bounds(off, sizeof(Elf64_Shdr), len))
		return NULL;
	return (const Elf64_Shdr *)(buf + off);
}

/* One FUNC symbol of a symtab into f; 0 when it names a loaded function. */
static int symbol(const uint8_t *buf, size_t len, const Elf64_Ehdr *eh, const Elf64_Shdr *strtab,
                  const Elf64_Sym *sym, struct rp_jit_func *f)
{
	if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_size == 0)
		return -ENOENT;
	const Elf64_Shdr *sec = section(buf, len, eh, sym->st_shndx);
	if (!sec || !(sec->sh_flags & SHF_EXECINSTR) || sym->st_name >= strtab->sh_size)
		return -ENOENT;
	/* In a relocatable object st_value is the offset in its section,
	 * whose sh_addr the JIT set to where it loaded it. */
	if (sym->st_value > UINT64_MAX - sec->sh_addr ||
	    sym->st_size > UINT64_MAX - sec->sh_addr - sym->st_value)
		return -ENOENT;
	f->start = sec->sh_addr + sym->st_value;
	f->end = f->start + sym->st_size;
	const char *s = (const char *)buf + strtab->sh_offset + sym->st_name;
	size_t avail = (size_t)(strtab->sh_size - sym->st_name);
	size_t n = strnlen(s, avail < RP_JIT_NAME - 1 ? avail : RP_JIT_NAME - 1);
	if (n == 0)
		return -ENOENT;
	memcpy(f->name, s, n);
	f->name[n] = '\0';
	return 0;
}

int rp_jit_parse_symfile(const uint8_t *buf, size_t len, struct rp_jit_func *out, size_t max)
{
	/* Section headers and symbols are read in place: 8-aligned. */
	if (!buf || len < sizeof(Elf64_Ehdr) || ((uintptr_t)buf & 7) != 0)
		return -EINVAL;
	Elf64_Ehdr eh;
	memcpy(&eh, buf, sizeof(eh));
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    (eh.e_shoff & 7) != 0)
		return -EINVAL;
	size_t n = 0;
	for (uint64_t i = 1; i < eh.e_shnum && n < max; i++) {
		const Elf64_Shdr *sh = section(buf, len, &eh, i);
		if (!sh)
			return -EINVAL;
		if (sh->sh_type != SHT_SYMTAB || sh->sh_entsize != sizeof(Elf64_Sym) ||
		    (sh->sh_offset & 7) != 0 || !in_bounds(sh->sh_offset, sh->sh_size, len))
			continue;
		const Elf64_Shdr *strtab = section(buf, len, &eh, sh->sh_link);
		if (!strtab || strtab->sh_type != SHT_STRTAB || !in_bounds(strtab->sh_offset, strtab->sh_size, len))
			continue;
		const Elf64_Sym *syms = (const Elf64_Sym *)(buf + sh->sh_offset);
		for (uint64_t k = 0; k < sh->sh_size / sizeof(Elf64_Sym) && n < max; k++)
			if (symbol(buf, len, &eh, strtab, &syms[k], &out[n]) == 0)
				n++;
	}
	return (int)n;
}

int rp_jit_walk(rp_jit_read_fn read, void *ctx, uint32_t pid, uint64_t desc, struct rp_jit_func *out,
                size_t max)
{
	struct jit_descriptor d;
	int r = read(ctx, pid, desc, &d, sizeof(d));
	if (r < 0)
		return r;
	if (d.version != 1)
		return -EPROTO;
	size_t n = 0;
	uint64_t at = d.first_entry;
	for (unsigned i = 0; at && i < RP_JIT_ENTRIES && n < max; i++) {
		struct jit_entry e;
		if (read(ctx, pid, at, &e, sizeof(e)) < 0)
			break;
		at = e.next;
		if (e.symfile_size < sizeof(Elf64_Ehdr) || e.symfile_size > RP_JIT_SYMFILE)
			continue;
		uint8_t *buf = malloc(e.symfile_size);
		if (!buf)
			return -ENOMEM;
		if (read(ctx, pid, e.symfile_addr, buf, e.symfile_size) == 0) {
			r = rp_jit_parse_symfile(buf, e.symfile_size, out + n, max - n);
			if (r > 0)
				n += (size_t)r;
		}
		free(buf);
	}
	return (int)n;
}

/* The descriptor's value in one symbol table section; 0 or -ENOENT. */
static int find_in(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, uint64_t *vaddr)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data || !sh->sh_entsize)
		return -ENOENT;
	for (size_t i = 0; i < sh->sh_size / sh->sh_entsize; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym) || ELF64_ST_TYPE(sym.st_info) != STT_OBJECT)
			continue;
		const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (name && strcmp(name, "__jit_debug_descriptor") == 0 && sym.st_value) {
			*vaddr = sym.st_value;
			return 0;
		}
	}
	return -ENOENT;
}

int rp_jit_find_descriptor(const char *path, uint64_t *vaddr)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = -ENOENT;
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	for (Elf_Scn *scn = elf ? elf_nextscn(elf, NULL) : NULL; scn && r < 0; scn = elf_nextscn(elf, scn)) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM))
			r = find_in(elf, scn, &sh, vaddr);
	}
	if (elf)
		(void)elf_end(elf);
	(void)close(fd);
	return r;
}
