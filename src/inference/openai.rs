//! The `openai` driver: Chat Completions with function tools.
