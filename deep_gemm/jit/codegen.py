"""Source generation: one include and one template instantiation per kernel."""
from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class CppName:
    """A template argument given by its C++ name, e.g. an enumerator (`deep_gemm::GemmType::Normal`)."""
    name: str

    def __post_init__(self):
        if not self.name.replace("::", "").replace("_", "").isalnum():
            raise ValueError(f"not a C++ qualified name: {self.name!r}")


@dataclass(frozen=True)
class KernelSource:
    name: str          # short human-readable name, used in cache directory names and logs
    header: str        # project header that defines the kernel
    function: str      # fully qualified template name
    template_args: Tuple  # ints / bools / CppName, in template order

    def instantiation(self) -> str:
        args = ", ".join(_render(a) for a in self.template_args)
        return f"{self.function}<{args}>"

    def code(self) -> str:
        # NOTES: taking the address forces the instantiation for both NVRTC and nvcc; the cubin then holds
        # exactly one kernel, which the runtime finds by enumeration (no name mangling to agree on).
        return (f"#include <{self.header}>\n\n"
                f"static void deep_gemm_instantiate() {{\n"
                f"    auto kernel = reinterpret_cast<void*>(&{self.instantiation()});\n"
                f"    (void)kernel;\n"
                f"}}\n")


def _render(a) -> str:
    if isinstance(a, CppName):
        return a.name
    if isinstance(a, bool):
        return "true" if a else "false"
    if isinstance(a, int):
        if a < 0:
            raise ValueError(f"template arguments are unsigned, got {a}")
        return str(a)
    raise TypeError(f"unsupported template argument {a!r}")
