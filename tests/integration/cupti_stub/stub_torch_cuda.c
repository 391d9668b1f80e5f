/* libtorch_cuda.so for test_cupti_load.py: only its name matters (the
 * injection library looks for it in /proc/self/maps). */
int rp_stub_torch_cuda(void);
int rp_stub_torch_cuda(void)
{
	return 0;
}
