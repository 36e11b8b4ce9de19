// C = act(A @ B (+ bias per row)) for few rows of A: work item (i, r, b) computes the ROWS x (RN * VW) block of C at
// columns i * RN * VW, rows r * ROWS of batch entry b, in VW-wide vector registers, so B is read once per ROWS rows and
// A's elements are broadcast; no local memory, no barriers.
// The arguments are kernels/gemm.cl's; ACT is in common.cl.
#if VW == 1  // GPUs: scalars (OpenCL has no 1-wide vector types)
#define VT ACC
#define VLOADT(p) LOAD((p), 0)
#define VLOADA(p) (*(p))
#define VSTOREA(v, p) (*(p) = (v))
#else  // VT from T in memory, from and to ACC arrays in private memory
#define VT CAT(ACC, VW)
#ifdef HALF
#define VLOADT(p) CAT(vload_half, VW)(0, (p))
#else
#define VLOADT(p) CAT(convert_, VT)(CAT(vload, VW)(0, (p)))
#endif
#define VLOADA(p) CAT(vload, VW)(0, (p))
#define VSTOREA(v, p) CAT(vstore, VW)((v), 0, (p))
#endif
#define TN (RN * VW)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void gemv(__global const T* A, __global const T* B, __global T* C, __global const T* bias,
          const long M, const long N, const long K, const long sam, const long sak, const long sbk, const long sbn,
          const Batch bt) {
  const long n0 = get_global_id(0) * TN;
  const long m0 = get_global_id(1) * ROWS;
  if (n0 >= N) return;
  long batch = get_global_id(2), ao = 0, bo = 0, biaso = 0;
  C += batch * M * N;
  BATCH_OFFSETS(bt, batch)
  long ra[ROWS];  // where each row of A starts; rows past M read row M - 1 and are not stored
  _Pragma("unroll") for (int i = 0; i < ROWS; i++) ra[i] = ao + min(m0 + i, M - 1) * sam;
  // Registers only if every loop over the block is unrolled (kernels/gemm.cl says why).
  VT c[ROWS][RN];
  _Pragma("unroll") for (int i = 0; i < ROWS; i++)
    _Pragma("unroll") for (int j = 0; j < RN; j++) c[i][j] = 0;
  // One vector of B live at a time (registers for more rows). The common case, a block of contiguous columns all
  // below N, loads B as vectors; the last block and strided B (transpose_y) take the second loop, which gathers
  // the vectors not wholly inside B's row element by element (columns past N read column N - 1, stored nowhere).
  if (sbn == 1 && n0 + TN <= N) {
    for (long k = 0; k < K; k++) {
      VT a[ROWS];
      _Pragma("unroll") for (int i = 0; i < ROWS; i++) a[i] = (VT)(LOAD(A, ra[i] + k * sak));
      __global const T* bk = B + bo + k * sbk + n0;
      _Pragma("unroll") for (int j = 0; j < RN; j++) {
        const VT b = VLOADT(bk + j * VW);
        _Pragma("unroll") for (int i = 0; i < ROWS; i++) c[i][j] += a[i] * b;
      }
    }
  } else {
    for (long k = 0; k < K; k++) {
      VT a[ROWS];
      _Pragma("unroll") for (int i = 0; i < ROWS; i++) a[i] = (VT)(LOAD(A, ra[i] + k * sak));
      __global const T* bk = B + bo + k * sbk;
      _Pragma("unroll") for (int j = 0; j < RN; j++) {
        const long c0 = n0 + j * VW;
        VT b;
        if (sbn == 1 && c0 + VW <= N) {
          b = VLOADT(bk + c0);
        } else {
          ACC g[VW];
          for (int e = 0; e < VW; e++) g[e] = LOAD(bk, min(c0 + e, N - 1) * sbn);
          b = VLOADA(g);
        }
        _Pragma("unroll") for (int i = 0; i < ROWS; i++) c[i][j] += a[i] * b;
      }
    }
  }
  _Pragma("unroll") for (int i = 0; i < ROWS; i++) {
    const long m = m0 + i;
    if (m >= M) break;
    const ACC add = ROW_BIAS(m);
    _Pragma("unroll") for (int j = 0; j < RN; j++) {
      ACC v[VW];
      VSTOREA(c[i][j], v);
      for (int e = 0; e < VW; e++) {
        const long n = n0 + j * VW + e;
        if (n < N) STORE(C, m * N + n, ACT(v[e] + add));
      }
    }
  }
}
