/* klaraptor instrument: parsing stand-in for <cuda.h> (see klaraptor_cuda_stub.h). */
#include "klaraptor_cuda_stub.h"
