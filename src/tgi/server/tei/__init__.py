"""Text Embeddings Inference's API: `POST /embed`, its request fields and response."""
