# The one image of the project: `autoscaler operator` and `autoscaler engine` (deploy/).
# Build: docker build -t pytorch-elastic-autoscaler:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
# The package and its runtime dependencies only (no test or dev extras), into /install.
RUN pip install --no-cache-dir --disable-pip-version-check --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
# A fixed non-root user: the Deployments' securityContext runs as 65532:65532.
RUN groupadd --system --gid 65532 autoscaler \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin autoscaler
USER 65532:65532
ENTRYPOINT ["autoscaler"]
CMD ["--help"]
