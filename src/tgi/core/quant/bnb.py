"""bitsandbytes weights, made while loading (`--quantize bitsandbytes-nf4`, `bitsandbytes-fp4`,
`bitsandbytes`), through the `bitsandbytes` package (the `bnb` extra; imported only here, on use).

NF4 / FP4: `bitsandbytes.functional.quantize_4bit` (blocks of 64 weights with an absmax each, two codes per
byte); int8 (LLM.int8()'s weights): `int8_vectorwise_quant` (int8 per row with its absmax). bitsandbytes
0.50.2 logs that it could not load a CPU kernel from the hub (`kernels-community`) when the `kernels`
package is absent, and runs its own CPU ops: tgi never installs or fetches that kernel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from tgi.core.quant.weights import QuantizedWeight

BLOCK_SIZE = 64


def import_bitsandbytes():
    """The `bitsandbytes` module; `ImportError` with what to install when it is missing."""
    try:
        quiet = logging.getLogger("bitsandbytes")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # its notice about the hub kernel it does not use
        import bitsandbytes
    except ImportError as e:
        raise ImportError(
            f"--quantize bitsandbytes*: the bitsandbytes package is not installed ({e}); install tgi[bnb]"
        ) from e
    finally:
        quiet.setLevel(level)
    return bitsandbytes


@dataclass(frozen=True)
class BnbWeight(QuantizedWeight):
    """A bitsandbytes weight: `data` as bitsandbytes stores it (uint8 [rows * cols / 2, 1] for 4-bit, int8
    [rows, cols] for int8) with `state` (its `QuantState` for 4-bit; the float32 row absmax [rows] for int8)."""

    quant_type: str  # "nf4", "fp4" or "int8"
    data: torch.Tensor
    state: Any
    rows: int
    cols: int

    @property
    def format(self) -> str:
        return f"bnb-{self.quant_type}"

    def dequantize(self) -> torch.Tensor:
        if self.quant_type == "int8":
            return self.data.float() * (self.state.float()[:, None] / 127.0)
        functional = import_bitsandbytes().functional
        return functional.dequantize_4bit(self.data, self.state).float().reshape(self.rows, self.cols)

    def tensors(self) -> dict[str, torch.Tensor]:
        if self.quant_type == "int8":
            return {"weight": self.data, "absmax": self.state}
        return {"weight": self.data, "absmax": self.state.absmax}


def bnb_quantizer(weight_format: str):
    """dense weight [rows, cols] -> `BnbWeight` of `weight_format` ("bnb-nf4", "bnb-fp4", "bnb-int8")."""
    quant_type = weight_format.removeprefix("bnb-")
    functional = import_bitsandbytes().functional

    def quantize(weight: torch.Tensor) -> BnbWeight:
        rows, cols = weight.shape
        w = weight.detach()
        if quant_type == "int8":
            cb, scb, _ = functional.int8_vectorwise_quant(
                w.to(torch.bfloat16) if w.dtype == torch.float32 else w
            )
            return BnbWeight("int8", cb, scb.float(), rows, cols)
        data, state = functional.quantize_4bit(w, blocksize=BLOCK_SIZE, quant_type=quant_type)
        return BnbWeight(quant_type, data, state, rows, cols)

    return quantize
