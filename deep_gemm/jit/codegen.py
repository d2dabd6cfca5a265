"""Source generation: one include, one Config struct of named template arguments, one kernel instantiation.

The kernel is instantiated as `function<Config>` and reads `Config::BLOCK_M` etc., so an argument reaches the C++
by its name, never by its position; a name the kernel needs but the config lacks (or misspells) fails the compile.
"""
import re
from dataclasses import dataclass
from typing import Mapping, Tuple, Union

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The generated struct's name; it appears in the mangled kernel name.
CONFIG_STRUCT = "Config"


@dataclass(frozen=True)
class CppName:
    """A value given by its C++ name, e.g. an enumerator (`deep_gemm::GemmType::Normal`)."""
    name: str

    def __post_init__(self):
        if not self.name.replace("::", "").replace("_", "").isalnum():
            raise ValueError(f"not a C++ qualified name: {self.name!r}")


Value = Union[bool, int, CppName]


@dataclass(frozen=True)
class KernelSource:
    name: str        # short human-readable name, used in cache directory names and logs
    header: str      # project header that defines the kernel
    function: str    # fully qualified name of the kernel template, whose one template parameter is the Config
    config: Tuple[Tuple[str, Value], ...]  # the Config's members (name, value), in declaration order;
                                           # a mapping is accepted and stored as such a tuple

    def __post_init__(self):
        # A mapping (the families' dicts) keeps its insertion order: the generated source, hashed into the disk
        # cache key, is deterministic.
        config = self.config
        items = tuple(config.items()) if isinstance(config, Mapping) else tuple(config)
        if not all(isinstance(i, tuple) and len(i) == 2 for i in items):
            raise TypeError(f"a config is a mapping or (name, value) pairs, got {config!r}")
        names = [n for n, _ in items]
        for n in names:
            if not isinstance(n, str) or not _IDENTIFIER.fullmatch(n):
                raise ValueError(f"not a C++ identifier: {n!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate config names in {names}")
        for _, v in items:
            _render(v)  # reject what cannot be rendered here, not at compile time
        object.__setattr__(self, "config", items)

    def config_struct(self) -> str:
        members = "".join(f"    static constexpr {_cpp_type(v)} {n} = {_render(v)};\n" for n, v in self.config)
        return f"struct {CONFIG_STRUCT} {{\n{members}}};\n"

    def instantiation(self) -> str:
        """One readable line naming the kernel and its arguments (unique per source: loaded kernels and cache
        metadata are keyed by it)."""
        args = ", ".join(f"{n}={_render(v)}" for n, v in self.config)
        return f"{self.function}<{CONFIG_STRUCT}{{{args}}}>"

    def code(self) -> str:
        # NOTES: taking the address forces the instantiation for both NVRTC and nvcc; the cubin then holds
        # exactly one kernel, which the runtime finds by enumeration (no name mangling to agree on).
        return (f"#include <{self.header}>\n\n"
                f"{self.config_struct()}\n"
                f"static void deep_gemm_instantiate() {{\n"
                f"    auto kernel = reinterpret_cast<void*>(&{self.function}<{CONFIG_STRUCT}>);\n"
                f"    (void)kernel;\n"
                f"}}\n")

    def to_json(self) -> dict:
        """A JSON-able form for worker processes (CppName as {"cpp": name}); see `from_json`."""
        return dict(name=self.name, header=self.header, function=self.function,
                    config=[[n, {"cpp": v.name} if isinstance(v, CppName) else v] for n, v in self.config])

    @classmethod
    def from_json(cls, item: dict) -> "KernelSource":
        config = tuple((n, CppName(v["cpp"]) if isinstance(v, dict) else v) for n, v in item["config"])
        return cls(item["name"], item["header"], item["function"], config)


def _cpp_type(v: Value) -> str:
    # NOTES: deep_gemm::uint32_t, because NVRTC has no ::uint32_t (common/types.cuh); enumerators keep their type.
    if isinstance(v, CppName):
        return "auto"
    return "bool" if isinstance(v, bool) else "deep_gemm::uint32_t"


def _render(v) -> str:
    if isinstance(v, CppName):
        return v.name
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"template arguments are unsigned, got {v}")
        return str(v)
    raise TypeError(f"unsupported template argument {v!r}")
