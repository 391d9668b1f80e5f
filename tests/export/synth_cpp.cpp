// The C++ function the synthetic session's worker samples (synth.c): a
// member of a class template in a namespace, so that its symbol is a
// mangled one (_ZN5synth6KernelIfE3runEi) and exports must demangle it to
// synth::Kernel<float>::run(int).
namespace synth {
template <typename T> struct Kernel {
	__attribute__((noinline)) static T run(int n)
	{
		T acc = 0;
		for (int i = 0; i < n; i++)
			acc += static_cast<T>(i) * 0.5f;
		return acc;
	}
};
} // namespace synth

extern "C" const void *synth_cpp_kernel(void);

extern "C" const void *synth_cpp_kernel(void)
{
	return reinterpret_cast<const void *>(&synth::Kernel<float>::run);
}
