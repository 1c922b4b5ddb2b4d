//===- CudnnDevices.h - GPUs described to cuDNN for device-less probes ----===//
//
// cuDNN's JSON device descriptions (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION) of the GPUs the
// engine probes compile for, shared by the attention and convolution probes.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_CUDNNDEVICES_H
#define AMPC_TEST_UNIT_RUNTIME_CUDNNDEVICES_H

namespace ampc::cuda {

/// cuDNN's device descriptions (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION) of the GPUs the
/// engines are probed for: an H100/H200 (sm_90, 132 multiprocessors, 227 KB of shared memory a
/// block) and an A100 (sm_80, 108 multiprocessors, 163 KB).
inline const char *const kH100 =
    R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],)"
    R"("regsPerBlock":65536,"multiProcessorCount":132,"warpSize":32,)"
    R"("maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":232448,)"
    R"("reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"maxCtasPerSM":32,)"
    R"("maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,)"
    R"("supportCoopLaunch":1,"totalGlobalMem":150754820096,"smClockRateKHz":1980000,)"
    R"("memClockRateKHz":3201000,"l2CacheSize":52428800,"cudaDeviceId":0,"deviceVer":900,)"
    R"("driverVer":13000,"deviceName":"NVIDIA H200"})";
inline const char *const kA100 =
    R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],)"
    R"("regsPerBlock":65536,"multiProcessorCount":108,"warpSize":32,)"
    R"("maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":166912,)"
    R"("reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"maxCtasPerSM":32,)"
    R"("maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,)"
    R"("supportCoopLaunch":1,"totalGlobalMem":85899345920,"smClockRateKHz":1410000,)"
    R"("memClockRateKHz":1593000,"l2CacheSize":41943040,"cudaDeviceId":0,"deviceVer":800,)"
    R"("driverVer":13000,"deviceName":"NVIDIA A100-SXM4-80GB"})";

} // namespace ampc::cuda

#endif // AMPC_TEST_UNIT_RUNTIME_CUDNNDEVICES_H
