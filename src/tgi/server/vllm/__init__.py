"""vLLM's scoring API, which Jina's and Cohere's rerank APIs share: `POST /v1/rerank`, `/v2/rerank` (and
`/rerank` with `documents`, dispatched by `tgi.server.app`), `/score`, `/classify` (each also under `/v1`),
their request fields, responses and errors (OpenAI's shape)."""
