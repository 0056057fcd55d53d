"""Images in requests: where a request names them (`sources`), fetching their bytes SSRF-safely (`fetch`),
decoding and checking them (`decode`), the limits that apply (`limits`), and the model's own processor that
turns them into placeholder tokens and pixel arrays (`processor`)."""
