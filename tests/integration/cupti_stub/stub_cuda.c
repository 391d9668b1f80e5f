/* libcuda.so.1 for test_cupti_load.py: only its presence matters (the
 * injection library checks that a driver is loaded before starting). */
int cuDriverGetVersion(int *v);
int cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}
