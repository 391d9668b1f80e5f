// symtest-cpp: C++ functions for the symbolizer's demangling test
// (test_symbolize.c): prints the run-time address of
// rp::symtest::Matrix<float>::rows(int) and of
// double rp::symtest::scaled<double>(double, int), one a line, then waits
// for its stdin to close.  Built with -g -O0.
#include <cstdio>

namespace rp {
namespace symtest {
template <typename T> struct Matrix {
	__attribute__((noinline)) static int rows(int n) { return n * 3 + 1; }
};
template <typename T> __attribute__((noinline)) T scaled(T v, int k) { return v * k; }
} // namespace symtest
} // namespace rp

int main()
{
	std::printf("%p\n%p\n", reinterpret_cast<void *>(&rp::symtest::Matrix<float>::rows),
		    reinterpret_cast<void *>(&rp::symtest::scaled<double>));
	std::fflush(stdout);
	while (std::getchar() != EOF)
		;
	return rp::symtest::Matrix<float>::rows(0) + static_cast<int>(rp::symtest::scaled(0.0, 1)) == 1 ? 0 : 1;
}
