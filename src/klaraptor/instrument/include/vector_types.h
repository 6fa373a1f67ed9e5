/* klaraptor instrument: parsing stand-in for <vector_types.h> (see klaraptor_cuda_stub.h). */
#include "klaraptor_cuda_stub.h"
