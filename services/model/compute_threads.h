#ifndef PETRA_SERVICES_MODEL_COMPUTE_THREADS_H_
#define PETRA_SERVICES_MODEL_COMPUTE_THREADS_H_

namespace petra::model {

// Sets the calling thread's torch intra-op threads to `threads` (at least
// 1) and the BLAS library's threads to the same number.
//
// Why both: Debian's libtorch does its matrix products in OpenBLAS, whose
// pthread build keeps its own pool sized to the machine and ignores
// torch's setting. Several stages in one process (the local fleet), or a
// stage and its PaReprop helper, then each fan out over every core and
// queue on OpenBLAS's one pool (docs/BENCHMARKS.md, threads: revvit on 2
// stages ran 2.3x slower that way on 2 cores). OpenBLAS's count is
// process-wide, so every caller in a process should pass the same number
// (the local fleet gives every stage the same count). An explicit
// OPENBLAS_NUM_THREADS in the environment wins; without OpenBLAS loaded
// only torch's count is set.
void SetComputeThreads(int threads);

}  // namespace petra::model

#endif  // PETRA_SERVICES_MODEL_COMPUTE_THREADS_H_
