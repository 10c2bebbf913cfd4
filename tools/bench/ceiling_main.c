/*
 * ceiling_main.c - main() of build/bench_ceiling.  The program itself is
 * tools/bench_ceiling.c (in libbatchfs.a, which takes every .c file of tools/ and
 * so must not hold a main); see tools/bench_ceiling.h.
 */
#include "tools/bench_ceiling.h"

int main(int argc, char **argv)
{
	return bfs_bench_ceiling_main(argc, argv);
}
