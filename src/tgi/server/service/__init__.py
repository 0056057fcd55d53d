"""The one path every API's routes share: `InferenceService` (admission, tokenisation, generation), the engine surface it needs, and the server's settings."""
