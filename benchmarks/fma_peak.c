/* The machine's float32 FMA peak, measured: every core runs independent fused multiply-adds
   on vector registers, nothing from memory (benchmarks/matmul_limit.py compiles and runs it:
   cc -O3 -march=native -fopenmp). ACC independent accumulators per thread hide the FMA
   latency (4-5 cycles on 2 ports needs 8-10 in flight) and, with the two constants, fit in
   16 vector registers (AVX2) as well as 32 (AVX-512). Prints the best of REPS timings in
   FLOP/s (2 per lane per FMA), the vector lanes, accumulators and threads. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
#define ACC 12
typedef float vf __attribute__((vector_size(LANES * 4)));

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000000;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  double best = 0;
  float sink = 0;
  for (int rep = 0; rep < reps; rep++) {
    double start = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
    {
      vf acc[ACC], a, b;
      for (int j = 0; j < LANES; j++) {
        a[j] = 0.999999f;
        b[j] = 1e-7f;
      }
      for (int i = 0; i < ACC; i++)
        for (int j = 0; j < LANES; j++) acc[i][j] = (float)(i + j + omp_get_thread_num());
      for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACC; i++) acc[i] = acc[i] * a + b;
      for (int i = 0; i < ACC; i++)
        for (int j = 0; j < LANES; j++) sink += acc[i][j]; /* the result is used: no dead code */
    }
    double seconds = omp_get_wtime() - start;
    double flops = 2.0 * LANES * ACC * (double)iters * omp_get_max_threads();
    if (flops / seconds > best) best = flops / seconds;
  }
  printf("FLOPS %.6g\nLANES %d\nACC %d\nTHREADS %d\nSINK %g\n", best, LANES, ACC, omp_get_max_threads(), sink);
  return 0;
}
