"""Several models behind one server: `pool` (which are loaded, on demand, LRU and keep-alive) and `selection` (which one a request uses)."""
