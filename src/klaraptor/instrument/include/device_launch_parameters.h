/* klaraptor instrument: parsing stand-in for <device_launch_parameters.h> (see klaraptor_cuda_stub.h). */
#include "klaraptor_cuda_stub.h"
