"""The batched GEMM's adapter with FlagGems' `w8a8_block_fp8_bmm` signature: what it refuses before touching a
device (CPU, in CI)."""
import pytest
import torch

import deep_gemm


def _operands():
    x = torch.zeros((2, 3, 128), dtype=torch.float8_e4m3fn)
    y = torch.zeros((2, 256, 128), dtype=torch.float8_e4m3fn)
    return x, y, torch.ones((2, 3, 1)), torch.ones((2, 2, 1))


@pytest.mark.parametrize("block_size", [[64, 128], [128], (128, 128, 1), "ab", None, [128.5, 128]])
def test_adapter_refuses_other_block_sizes(block_size):
    with pytest.raises(ValueError, match="block_size"):
        deep_gemm.w8a8_block_fp8_bmm(*_operands(), block_size=block_size)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_adapter_refuses_other_output_dtypes(dtype):
    with pytest.raises(ValueError, match="output_dtype"):
        deep_gemm.w8a8_block_fp8_bmm(*_operands(), output_dtype=dtype)


def test_adapter_checks_operands_before_allocating():
    x, y, xs, ys = _operands()
    with pytest.raises(TypeError, match="^x "):
        deep_gemm.w8a8_block_fp8_bmm(x.float(), y, xs, ys)


def test_adapter_reaches_the_op_validation():
    x, y, xs, ys = _operands()
    with pytest.raises(ValueError, match="CUDA"):  # CPU tensors: the op refuses them, naming the argument
        deep_gemm.w8a8_block_fp8_bmm(x, y, xs, ys)
