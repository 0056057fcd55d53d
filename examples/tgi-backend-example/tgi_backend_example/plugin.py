"""Entry point of the example backend: registers it with tgi's plugin host."""

from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl
from tgi_backend_example import __version__


def _probe() -> ProbeResult:
    # A real backend checks for its device and driver here, cheaply, and says what is missing.
    return ProbeResult.ok("plain torch on the host CPU (example backend)")


def _create():
    # Import the heavy parts only once the backend is selected.
    from tgi_backend_example.backend import ExampleBackend

    return ExampleBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="example",
            version=__version__,
            interface_version=INTERFACE_VERSION,  # the host refuses a plugin built for another version
            priority=-10,  # never chosen by `auto` over a real backend
            description="Template backend for hardware vendors (naive attention on the CPU)",
            probe=_probe,
            create=_create,
        )
    )
