"""A small reader of GGUF files: metadata, and tensors as NumPy views of a memory map.

``gguf.GGUFReader`` makes a NumPy view for every field part, which for SmolLM2's 49152-token
vocabulary and 48900 merges took 8 of the engine's 20-30 seconds of start-up on a busy
two-core machine. This reader parses the same layout (GGUF v2/v3: header, key/value pairs,
tensor descriptions, aligned data) with ``struct`` and keeps string arrays as Python lists,
which takes a fraction of a second. Quantized blocks are still decoded by ``gguf.quants``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

_MAGIC = b"GGUF"
_SCALARS = {  # GGUF value type -> struct format
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32


class GgufError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True, slots=True)
class Tensor:
    """One tensor: its name, GGML type, shape (GGML order: fastest axis first) and bytes."""

    name: str
    ggml_type: int
    dims: tuple[int, ...]
    data: npt.NDArray[np.uint8]


class GgufFile:
    """The metadata and tensors of one GGUF file, opened read-only."""

    def __init__(self, path: Path) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        buffer = memoryview(self._map)  # type: ignore[arg-type]
        if bytes(buffer[:4]) != _MAGIC:
            raise GgufError(f"{path} is not a GGUF file")
        version, n_tensors, n_values = struct.unpack_from("<IQQ", buffer, 4)
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} is not supported")
        self._buffer, self._at = buffer, 24
        self.metadata: dict[str, object] = {}
        for _ in range(n_values):
            key = self._string()
            (kind,) = self._unpack("<I")
            self.metadata[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = self._unpack(f"<{n_dims}Q")
            kind, offset = self._unpack("<IQ")
            infos.append((name, kind, tuple(dims), offset))
        align = int(str(self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT)))
        start = -(-self._at // align) * align
        self.tensors: dict[str, Tensor] = {}
        for name, kind, dims, offset in infos:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            rows = int(np.prod(dims[1:], dtype=np.int64)) if len(dims) > 1 else 1
            row_bytes = dims[0] // block * size
            begin = start + offset
            data = self._map[begin : begin + rows * row_bytes].reshape(rows, row_bytes)
            self.tensors[name] = Tensor(name, kind, dims, data)

    def _unpack(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self._buffer, self._at)
        self._at += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        (length,) = self._unpack("<Q")
        text = bytes(self._buffer[self._at : self._at + length]).decode("utf-8")
        self._at += length
        return text

    def _value(self, kind: int) -> object:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, count = self._unpack("<IQ")
            if item == _STRING:
                return [self._string() for _ in range(count)]
            if item in _SCALARS:
                return list(self._unpack(f"<{count}{_SCALARS[item]}"))
            return [self._value(item) for _ in range(count)]
        if kind in _SCALARS:
            return self._unpack("<" + _SCALARS[kind])[0]
        raise GgufError(f"unknown GGUF value type {kind}")

    def weight(self, name: str) -> npt.NDArray[np.float32]:
        """The tensor as float32, in NumPy order (slowest axis first)."""
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize

        tensor = self.tensors[name]
        kind = GGMLQuantizationType(tensor.ggml_type)
        if kind == GGMLQuantizationType.F32:
            values = tensor.data.view(np.float32)
        else:
            values = dequantize(tensor.data, kind)
        shape = tuple(reversed(tensor.dims))
        return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
