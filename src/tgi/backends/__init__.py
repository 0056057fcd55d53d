"""In-tree hardware backends. Each registers through the ``tgi.backends`` entry-point group."""
