"""A request read once into typed values: no field accepted and ignored, sampling parameters, grammars."""
