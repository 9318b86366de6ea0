/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few cuda.h types the test libcuda (libcuda-p2p.c) and the CUDA workload
 * (cuda-workload.c) share, with cuda.h's names and layouts (CUDA 12.x): one
 * copy, so the library and its caller cannot disagree.
 */
#ifndef GDRSIM_CUDA_TYPES_H
#define GDRSIM_CUDA_TYPES_H

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct { CUmemLocation location; unsigned long long flags; } CUmemAccessDesc;

#endif
