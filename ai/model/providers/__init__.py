"""Model providers: the embedded llama.cpp model, OpenAI-compatible upstreams, a scripted fake."""
