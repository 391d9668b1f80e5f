/* Stands for a CPython 3.11 process in test_pyframes: the ELF symbols
 * the daemon looks up (the version in Py_Version: the file's name,
 * python3-fake, says none) and one code object in 3.11's layout,
 * "Fake.step" in /srv/fake.py from line 40, a line further each code
 * unit.  Prints the addresses "RUNTIME EVAL CODE", then waits for its
 * stdin to close. */
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const uint32_t Py_Version = 0x030b07f0;
uint8_t _PyRuntime[1024];
uint8_t PyCode_Type[512];

__attribute__((noinline)) int _PyEval_EvalFrameDefault(int x);
__attribute__((noinline)) int _PyEval_EvalFrameDefault(int x)
{
	return x * 3 + 1;
}

static alignas(16) uint8_t code[256], qualname[64], filename[64], linetable[64];

static void put(uint8_t *o, size_t off, uint64_t v, size_t size)
{
	memcpy(o + off, &v, size);
}

/* A compact ASCII str of 3.11: length at 16, state at 32, data at 48. */
static void ascii(uint8_t *o, const char *s)
{
	put(o, 16, strlen(s), 8);
	put(o, 32, 1 << 2 | 1 << 5 | 1 << 6, 4);
	memcpy(o + 48, s, strlen(s));
}

int main(void)
{
	put(code, 8, (uintptr_t)PyCode_Type, 8);
	put(code, 128, (uintptr_t)qualname, 8);
	put(code, 112, (uintptr_t)filename, 8);
	put(code, 72, 40, 4);
	put(code, 136, (uintptr_t)linetable, 8);
	ascii(qualname, "Fake.step");
	ascii(filename, "/srv/fake.py");
	put(linetable, 16, 4, 8); /* a bytes object: size at 16, data at 32 */
	for (int i = 0; i < 4; i += 2) {
		linetable[32 + i] = 0x80 | 13 << 3; /* one unit, no column */
		linetable[33 + i] = 2;              /* line +1 */
	}
	printf("%p %p %p\n", (void *)_PyRuntime, (void *)(uintptr_t)_PyEval_EvalFrameDefault,
	       (void *)code);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return _PyEval_EvalFrameDefault(0) == 1 ? 0 : 1;
}
