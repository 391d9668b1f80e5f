/* GDB JIT registrations read and parsed, bounded (jitreg.h). */
#include <elf.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jitreg.h"

struct jit_descriptor {
	uint32_t version, action;
	uint64_t relevant_entry, first_entry;
};

struct jit_entry {
	uint64_t next, prev, symfile_addr, symfile_size;
};

/* One FUNC symbol into f; 0 when it names a function of loaded code.
 * libelf checks the section index and the name's offset and end. */
static int symbol(Elf *elf, const GElf_Shdr *symtab, const GElf_Sym *sym, struct rp_jit_func *f)
{
	GElf_Shdr sec;
	Elf_Scn *scn = ELF64_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_size &&
				       sym->st_shndx != SHN_UNDEF && sym->st_shndx < SHN_LORESERVE
			       ? elf_getscn(elf, sym->st_shndx)
			       : NULL;
	if (!scn || !gelf_getshdr(scn, &sec) || !(sec.sh_flags & SHF_EXECINSTR))
		return -ENOENT;
	/* In a relocatable object st_value is the offset in its section,
	 * whose sh_addr the JIT set to where it loaded it. */
	if (sym->st_value > UINT64_MAX - sec.sh_addr ||
	    sym->st_size > UINT64_MAX - sec.sh_addr - sym->st_value)
		return -ENOENT;
	const char *name = elf_strptr(elf, symtab->sh_link, sym->st_name);
	if (!name || !name[0])
		return -ENOENT;
	f->start = sec.sh_addr + sym->st_value;
	f->end = f->start + sym->st_size;
	snprintf(f->name, sizeof(f->name), "%s", name);
	return 0;
}

int rp_jit_parse_symfile(uint8_t *buf, size_t len, struct rp_jit_func *out, size_t max)
{
	if (!buf || elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	Elf *elf = elf_memory((char *)buf, len);
	GElf_Ehdr eh;
	int r = -EINVAL;
	if (elf && elf_kind(elf) == ELF_K_ELF && gelf_getclass(elf) == ELFCLASS64 &&
	    gelf_getehdr(elf, &eh) && eh.e_ident[EI_DATA] == ELFDATA2LSB) {
		size_t n = 0;
		for (Elf_Scn *scn = NULL; n < max && (scn = elf_nextscn(elf, scn));) {
			GElf_Shdr sh;
			Elf_Data *data = gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB &&
							 sh.sh_entsize
						 ? elf_getdata(scn, NULL)
						 : NULL;
			size_t count = data ? data->d_size / sh.sh_entsize : 0;
			for (size_t k = 0; k < count && k <= INT32_MAX && n < max; k++) {
				GElf_Sym sym;
				if (gelf_getsym(data, (int)k, &sym) && symbol(elf, &sh, &sym, &out[n]) == 0)
					n++;
			}
		}
		r = (int)n;
	}
	if (elf)
		(void)elf_end(elf);
	return r;
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

/* The page-aligned address of the first PT_LOAD: where the mapping of the
 * file's offset 0 starts, less the load bias. */
static int first_load_page(Elf *elf, uint64_t *page)
{
	size_t n;
	if (elf_getphdrnum(elf, &n) < 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD) {
			*page = ph.p_vaddr & ~(uint64_t)0xfff;
			return 0;
		}
	}
	return -ENOENT;
}

int rp_jit_find_descriptor(int fd, uint64_t *from_base)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	int r = -ENOENT;
	uint64_t vaddr = 0, page = 0;
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	for (Elf_Scn *scn = elf ? elf_nextscn(elf, NULL) : NULL; scn && r < 0; scn = elf_nextscn(elf, scn)) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM))
			r = find_in(elf, scn, &sh, &vaddr);
	}
	if (r == 0)
		r = first_load_page(elf, &page);
	if (r == 0 && vaddr < page)
		r = -EINVAL;
	if (r == 0)
		*from_base = vaddr - page;
	if (elf)
		(void)elf_end(elf);
	return r;
}
