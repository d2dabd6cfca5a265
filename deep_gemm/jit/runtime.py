"""Loading cubins through the CUDA driver API (cuda-bindings); launches go through `deep_gemm._C`."""
import threading
from typing import Dict


class CUDADriverError(RuntimeError):
    pass


try:
    # NOTES: imported with the package rather than at the first launch: the import takes ~20 ms, which was most of
    # the first call of a process after a warm-up (measured on an H100).
    from cuda.bindings import driver as _loaded_driver
except ImportError:  # the base install has no CUDA wheel (pyproject's cu12 / cu13 extras); `_driver` says so on use
    _loaded_driver = None


def _driver():
    if _loaded_driver is None:
        from cuda.bindings import driver  # raises the ImportError that names what is missing
        return driver
    return _loaded_driver


def check(result):
    """Unpack a cuda-bindings result tuple, raising on a non-success status."""
    cu = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, msg = cu.cuGetErrorString(err)
        raise CUDADriverError(f"{err.name}: {msg.decode() if isinstance(msg, bytes) else msg}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


class LoadedKernel:
    """One cubin holding exactly one kernel, loaded context-independently; CUfunction handles per device."""

    def __init__(self, cubin: bytes, num_threads: int, smem_size: int):
        cu = _driver()
        self.num_threads = num_threads
        self.smem_size = smem_size
        self.library = check(cu.cuLibraryLoadData(cubin, None, None, 0, None, None, 0))
        count = check(cu.cuLibraryGetKernelCount(self.library))
        if count != 1:
            raise CUDADriverError(f"expected exactly one kernel in the cubin, found {count}")
        self.kernel = check(cu.cuLibraryEnumerateKernels(1, self.library))[0]
        self._functions: Dict[int, object] = {}
        self._lock = threading.Lock()

    def function(self, device_index: int):
        """CUfunction for the current context (the device's primary context, made current by the caller)."""
        f = self._functions.get(device_index)
        if f is None:
            cu = _driver()
            with self._lock:
                f = check(cu.cuKernelGetFunction(self.kernel))
                check(cu.cuFuncSetAttribute(
                    f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem_size))
                # Clusters of up to 16 CTAs (sm_90's non-portable size; the einsum's sums over batches): a launch of
                # at most 8 is unaffected.
                check(cu.cuFuncSetAttribute(
                    f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
                self._functions[device_index] = f
        return f


def current_context():
    """The CUcontext current on this thread."""
    return check(_driver().cuCtxGetCurrent())


def ensure_context(device_index: int) -> None:
    """Make the device's primary context current on this thread if nothing is current (torch normally did)."""
    cu = _driver()
    ctx = check(cu.cuCtxGetCurrent())
    if ctx is None or int(ctx) == 0:
        dev = check(cu.cuDeviceGet(device_index))
        check(cu.cuCtxSetCurrent(check(cu.cuDevicePrimaryCtxRetain(dev))))
