/* Calls of libtaichi_c_api redirected to ours: the library calls the functions of other libraries through its
   GOT (the slots the dynamic linker fills), and only the library reads its own GOT. So pointing its slots for a
   function at ours changes what the library reaches and nothing else: Python and other libraries still reach
   the original. threads.c redirects get_nprocs, vkfence.c dlsym. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "taichi_aot.h"
#include "loader.h"

#if defined(__x86_64__)
#define TAICHI_AOT_JUMP_SLOT R_X86_64_JUMP_SLOT
#define TAICHI_AOT_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define TAICHI_AOT_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define TAICHI_AOT_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

#ifdef TAICHI_AOT_JUMP_SLOT
/* The library's RELRO range (read-only after relocation), found among the loaded objects by load address. */
typedef struct {
    uintptr_t base, start, end;
} TaichiAotRelro;

static int taichi_aot_find_relro(struct dl_phdr_info *info, size_t size, void *data) {
    TaichiAotRelro *relro = (TaichiAotRelro *)data;
    int i;
    (void)size;
    if (info->dlpi_addr != relro->base) {
        return 0;
    }
    for (i = 0; i < info->dlpi_phnum; ++i) {
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            relro->start = relro->base + info->dlpi_phdr[i].p_vaddr;
            relro->end = relro->start + info->dlpi_phdr[i].p_memsz;
        }
    }
    return 1;
}

/* Point the slot at `fn`: its page made writable for the store, and read-only again where it lies in the
   library's RELRO range. 0, or -1 when the page cannot be made writable. */
static int taichi_aot_patch_slot(void **slot, void *fn, const TaichiAotRelro *relro) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)slot & ~(uintptr_t)(page - 1);
    if (mprotect((void *)start, (size_t)page, PROT_READ | PROT_WRITE) != 0) {
        return -1;
    }
    *slot = fn;
    if ((uintptr_t)slot >= relro->start && (uintptr_t)slot < relro->end) {
        mprotect((void *)start, (size_t)page, PROT_READ);
    }
    return 0;
}

/* An address from the dynamic section: relocated in place by glibc on most targets, an offset from the
   load address elsewhere. */
static uintptr_t taichi_aot_dyn_address(const struct link_map *map, ElfW(Addr) value) {
    return value < map->l_addr ? map->l_addr + value : value;
}

/* What the library's dynamic section says of its symbols and relocations: its symbol and string tables, its PLT
   relocations (tables[0]) and its other RELA relocations (tables[1]) with their sizes in bytes. */
typedef struct {
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Rela) *tables[2];
    size_t sizes[2];
    int plt_is_rela;
} TaichiAotDynamic;

static void taichi_aot_read_dynamic(const struct link_map *map, TaichiAotDynamic *d) {
    const ElfW(Dyn) *dyn;
    for (dyn = map->l_ld; dyn->d_tag != DT_NULL; ++dyn) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: d->symtab = (const ElfW(Sym) *)taichi_aot_dyn_address(map, dyn->d_un.d_ptr); break;
        case DT_STRTAB: d->strtab = (const char *)taichi_aot_dyn_address(map, dyn->d_un.d_ptr); break;
        case DT_JMPREL: d->tables[0] = (const ElfW(Rela) *)taichi_aot_dyn_address(map, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: d->sizes[0] = dyn->d_un.d_val; break;
        case DT_RELA: d->tables[1] = (const ElfW(Rela) *)taichi_aot_dyn_address(map, dyn->d_un.d_ptr); break;
        case DT_RELASZ: d->sizes[1] = dyn->d_un.d_val; break;
        case DT_PLTREL: d->plt_is_rela = dyn->d_un.d_val == DT_RELA; break;
        default: break;
        }
    }
}

/* The slots of relocation table `t` that bind `name` (a jump slot or a GOT entry) pointed at `fn`: how many, or -1
   where a page cannot be made writable. */
static int taichi_aot_patch_table(const struct link_map *map, const TaichiAotDynamic *d, int t, const char *name,
                                  void *fn, const TaichiAotRelro *relro) {
    size_t i, count = d->tables[t] == NULL ? 0 : d->sizes[t] / sizeof(ElfW(Rela));
    int patched = 0;
    for (i = 0; i < count; ++i) {
        const ElfW(Rela) *rela = &d->tables[t][i];
        unsigned long type = ELF64_R_TYPE(rela->r_info);
        unsigned long sym = ELF64_R_SYM(rela->r_info);
        if ((type != TAICHI_AOT_JUMP_SLOT && type != TAICHI_AOT_GLOB_DAT) || sym == 0 ||
            strcmp(d->strtab + d->symtab[sym].st_name, name) != 0) {
            continue;
        }
        if (taichi_aot_patch_slot((void **)(map->l_addr + rela->r_offset), fn, relro) != 0) {
            return -1;
        }
        ++patched;
    }
    return patched;
}
#endif

/* Point the library's GOT slots for `name` at `fn`; the number of slots patched (0: the library does not call
   `name`), or -1 where this cannot be done (another processor, a missing table, a page that cannot be made
   writable). */
int taichi_aot_patch_library_calls(const char *name, void *fn) {
#ifdef TAICHI_AOT_JUMP_SLOT
    struct link_map *map = NULL;
    TaichiAotDynamic d = {NULL, NULL, {NULL, NULL}, {0, 0}, 1};
    TaichiAotRelro relro = {0, 0, 0};
    int patched = 0, t;
    void *library = taichi_aot_library_handle();
    if (library == NULL || dlinfo(library, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
        return -1;
    }
    relro.base = map->l_addr;
    dl_iterate_phdr(taichi_aot_find_relro, &relro);
    taichi_aot_read_dynamic(map, &d);
    if (d.symtab == NULL || d.strtab == NULL || !d.plt_is_rela) {
        return -1;
    }
    for (t = 0; t < 2; ++t) {
        int n = taichi_aot_patch_table(map, &d, t, name, fn, &relro);
        if (n < 0) {
            return -1;
        }
        patched += n;
    }
    return patched;
#else
    return -1;
#endif
}
