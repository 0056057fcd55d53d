"""SageMaker's routes (`/invocations`, `/ping`), which dispatch to TGI's and OpenAI's APIs."""
