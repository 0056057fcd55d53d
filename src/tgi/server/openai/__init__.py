"""OpenAI's chat completions, completions and models routes: routes, request schemas, response bodies."""
