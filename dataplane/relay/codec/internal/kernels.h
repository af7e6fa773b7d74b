// The kernel tables of each form (sign_kernels.h); null where the build has no such form.
#pragma once

#include "dataplane/relay/codec/sign_kernels.h"

namespace heddle::relay::internal {

const SignKernels& ScalarKernels();
const SignKernels* Avx2KernelsIfBuilt();    // not checked against the CPU
const SignKernels* Avx512KernelsIfBuilt();  // not checked against the CPU

}  // namespace heddle::relay::internal
