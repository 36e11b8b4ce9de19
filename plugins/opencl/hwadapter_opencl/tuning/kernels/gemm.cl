// C = A @ B (+ bias per row), batched: one work-group per TM x TN tile of C and per batch entry.
// The group packs TK-deep panels of A and B into local memory (zero-padded, so edge tiles need no branches in the
// inner loop), then each work item accumulates its RM x (RN*VW) micro-tiles in VW-wide vector registers.
// CPU drivers get WG = 1: the one work item is a BLAS-style micro-kernel over the whole tile and local memory is
// its packed, cache-resident panel; GPUs get one micro-tile per work item and a cooperative load.
#define VT CAT(ACC, VW)
#define VLOAD CAT(vload, VW)
#define VSTORE CAT(vstore, VW)
#define MB_N (TN / (RN * VW))        // micro-tiles across a tile
#define NB ((TM / RM) * MB_N / WG)   // micro-tiles per work item

// ACT, the epilogue of a fused conv2d + activation, is in common.cl (kernels/gemv.cl applies it too).

// Copy a tile of R rows and C columns: work item lid takes rows lid / CW + WG / CW * i and columns lid % CW + CW * j
// (CW work items across a row), so each inner loop runs along a row: contiguous, and vectorised on CPUs.
#define CW(C) (WG < (C) ? WG : (C))
#define PACK_A(sak) \
  for (int r = lid / CW(TK); r < TM; r += WG / CW(TK)) { \
    const long m = m0 + r; \
    for (int k = lid % CW(TK); k < TK; k += CW(TK)) { \
      const long kk = k0 + k; \
      As[(r / RM) * (TK * RM) + k * RM + r % RM] = (m < M && kk < K) ? LOAD(A, ao + m * sam + kk * (sak)) : (ACC)0; \
    } \
  }
#define PACK_B(sbn) \
  for (int k = lid / CW(TN); k < TK; k += WG / CW(TN)) { \
    const long kk = k0 + k; \
    for (int c = lid % CW(TN); c < TN; c += CW(TN)) { \
      const long n = n0 + c; \
      Bs[k * TN + c] = (kk < K && n < N) ? LOAD(B, bo + kk * sbk + n * (sbn)) : (ACC)0; \
    } \
  }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void gemm(__global const T* A, __global const T* B, __global T* C, __global const T* bias,
          const long M, const long N, const long K, const long sam, const long sak, const long sbk, const long sbn,
          const Batch bt) {
  __local ACC As[TM * TK];  // micro-panels of RM rows, k-major: As[(r / RM) * TK * RM + k * RM + r % RM]
  __local ACC Bs[TK * TN];
  const int lid = get_local_id(0);
  const long m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
  long batch = get_group_id(2), ao = 0, bo = 0, biaso = 0;
  C += batch * M * N;
  BATCH_OFFSETS(bt, batch)
  ACC Cs[NB * RM * RN * VW];
  for (int i = 0; i < NB * RM * RN * VW; i++) Cs[i] = 0;

  for (long k0 = 0; k0 < K; k0 += TK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // everyone is done with the previous panels
    // Unit strides get their own loops: the compiler vectorises those copies, and they are the common case.
    if (sak == 1) PACK_A(1) else PACK_A(sak)
    if (sbn == 1) PACK_B(1) else PACK_B(sbn)
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = 0; t < NB; t++) {
      const int tile = lid + t * WG, i0 = (tile / MB_N) * RM, j0 = (tile % MB_N) * RN * VW;
      __local const ACC* ap = As + i0 * TK;
      // The micro-tile lives in registers only if every loop over it is unrolled: a private array indexed by a
      // loop counter stays in memory, and each FMA would load and store its accumulator.
      VT c[RM][RN];
      _Pragma("unroll") for (int i = 0; i < RM; i++)
        _Pragma("unroll") for (int j = 0; j < RN; j++) c[i][j] = VLOAD(0, Cs + ((t * RM + i) * RN + j) * VW);
      for (int k = 0; k < TK; k++) {
        VT b[RN];
        _Pragma("unroll") for (int j = 0; j < RN; j++) b[j] = VLOAD(0, Bs + k * TN + j0 + j * VW);
        _Pragma("unroll") for (int i = 0; i < RM; i++) {
          const VT a = (VT)(ap[k * RM + i]);
          _Pragma("unroll") for (int j = 0; j < RN; j++) c[i][j] += a * b[j];
        }
      }
      _Pragma("unroll") for (int i = 0; i < RM; i++)
        _Pragma("unroll") for (int j = 0; j < RN; j++) VSTORE(c[i][j], 0, Cs + ((t * RM + i) * RN + j) * VW);
    }
  }

  for (int t = 0; t < NB; t++) {
    const int tile = lid + t * WG, i0 = (tile / MB_N) * RM, j0 = (tile % MB_N) * RN * VW;
    for (int i = 0; i < RM; i++) {
      const long m = m0 + i0 + i;
      if (m >= M) break;
      const ACC add = ROW_BIAS(m);
      for (int j = 0; j < RN; j++) {
        ACC v[VW];
        VSTORE(VLOAD(0, Cs + ((t * RM + i) * RN + j) * VW), 0, v);
        for (int e = 0; e < VW; e++) {
          const long n = n0 + j0 + j * VW + e;
          if (n < N) STORE(C, m * N + n, ACT(v[e] + add));
        }
      }
    }
  }
}
