"""Model providers: the embedded llama.cpp model, OpenAI-compatible upstreams, a scripted fake;
``registry`` names them and builds the chosen one."""
