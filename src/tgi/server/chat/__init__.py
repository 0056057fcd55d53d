"""What the chat APIs (OpenAI chat, Responses, Anthropic Messages) share: tool plans, output parsers, the assistant message read back."""
