/* klaraptor instrument: parsing stand-in for <driver_types.h> (see klaraptor_cuda_stub.h). */
#include "klaraptor_cuda_stub.h"
