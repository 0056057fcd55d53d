"""LoRA adapters over HTTP: the adapter a request names, and the routes that load and unload them."""
