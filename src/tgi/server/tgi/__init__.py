"""TGI's own API: `/generate`, `/generate_stream`, `/tokenize`, `/info`, `/health`, `/metrics`, `/chat_tokenize`."""
