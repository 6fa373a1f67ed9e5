/* klaraptor instrument: parsing stand-in for <cuda_runtime.h> (see klaraptor_cuda_stub.h). */
#include "klaraptor_cuda_stub.h"
