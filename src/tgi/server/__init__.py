"""The HTTP server: TGI's and OpenAI's APIs over the engine (`create_app`), and `tgi launch`."""

__version__ = "0.1.0"
