/* What each call of the stand-in libnrt takes (fake_nrt.c), for the test
 * programs and the benchmark. */
#ifndef RINGPROF_FAKE_NRT_H
#define RINGPROF_FAKE_NRT_H

#define FAKE_NRT_INIT_NS 3000000u
#define FAKE_NRT_CLOSE_NS 1000000u
#define FAKE_NRT_LOAD_NS 4000000u
#define FAKE_NRT_UNLOAD_NS 1000000u
#define FAKE_NRT_EXECUTE_NS 2000000u
#define FAKE_NRT_COMM_NS 1500000u
#define FAKE_NRT_COPY_NS 500000u

#endif
