"""The model behind suggestions: providers (the embedded llama.cpp model, OpenAI-compatible
upstreams, a scripted fake) and the supervised worker process that holds native code.
"""
