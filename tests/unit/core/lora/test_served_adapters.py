"""`tgi.core.lora.served_adapters`: the adapters an engine serves at run time. The engine imports no
framework, so neither this module nor the `tgi.core.lora` package it lives in may import one; the
package's torch parts load when one of their names is first used."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tgi.core.lora", "tgi.core.lora.served_adapters"])
def test_it_imports_no_framework(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules and 'jax' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_package_names_load_their_module():
    import tgi.core.lora as lora
    from tgi.core.lora import adapter, manager, ops

    assert lora.load_lora is manager.load_lora and lora.check_lora is manager.check_lora
    assert lora.AdapterError is adapter.AdapterError and lora.TorchLoRAOps is ops.TorchLoRAOps
    assert all(getattr(lora, name) is not None for name in lora.__all__)
    with pytest.raises(AttributeError, match="no attribute 'served'"):
        lora.served  # noqa: B018 - the attribute access is the check
