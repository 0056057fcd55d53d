"""Text Embeddings Inference's API: `POST /embed` (`routes.py`), `POST /rerank` and `POST /predict`
(`scores.py`), their request fields and responses."""
