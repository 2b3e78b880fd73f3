// The target that builds cmake/library_pch.h's precompiled header with the libraries' flags, for
// them to reuse (cmake/library_pch.cmake). Nothing links it.
#include "library_pch.h"
