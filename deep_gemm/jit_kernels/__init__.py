"""DeepGEMM May-2025 module path `deep_gemm.jit_kernels` (its tests import helpers from here); the helpers live in
`deep_gemm.utils`."""
from . import utils  # noqa: F401
