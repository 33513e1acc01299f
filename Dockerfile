# The one image of the project: `autoscaler operator` and `autoscaler engine` (deploy/).
# Build: docker build -t pytorch-elastic-autoscaler:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
# The runtime dependencies exactly as locked (`make lock`), every file hash-checked, into
# /install; a layer of its own, rebuilt only when the lock changes. No extras: no matplotlib.
COPY requirements.lock ./
RUN pip install --no-cache-dir --disable-pip-version-check --prefix=/install \
        --require-hashes -r requirements.lock
# Then the package alone: its dependencies are the locked ones above, and so is its build backend
# (the lock carries build-system.requires): no build isolation, which would fetch an unpinned
# setuptools, but the locked one from /install, ahead of the base image's own on PYTHONPATH.
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
RUN PYTHONPATH=/install/lib/python3.11/site-packages \
    pip install --no-cache-dir --disable-pip-version-check --prefix=/install --no-deps \
        --no-build-isolation .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
# Upstream's Deployment (kubeflow/training-operator v1.9) runs its image's `/manager`: here that is
# the operator, so swapping the image is enough.
RUN printf '#!/bin/sh\nexec autoscaler operator "$@"\n' > /manager && chmod 755 /manager
# A fixed non-root user: the Deployments' securityContext runs as 65532:65532.
RUN groupadd --system --gid 65532 autoscaler \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin autoscaler
USER 65532:65532
ENTRYPOINT ["autoscaler"]
CMD ["--help"]
