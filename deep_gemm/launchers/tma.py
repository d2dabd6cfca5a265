"""TMA operand geometry shared by the launchers (the descriptors themselves are encoded by `deep_gemm._C`)."""
import torch


def tma_row_stride(t: torch.Tensor) -> int:
    """Row stride (elements) to give TMA: the tensor's own, or any legal one when there is a single row."""
    rows, cols = t.shape
    if rows > 1:
        return t.stride(0)
    per16 = 16 // t.element_size()
    return (cols + per16 - 1) // per16 * per16
