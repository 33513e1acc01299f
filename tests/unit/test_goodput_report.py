"""A goodput job's gauges, exposed under the metrics contract's names and labels."""

from prometheus_client import generate_latest

from autoscaler import metrics_contract as mc
from autoscaler.training import ThroughputReporter
from autoscaler.training.adaptation import Adaptation, Config, GoodputSpec, NormSample


def test_the_report_carries_the_noise_the_batch_and_each_configurations_step_time() -> None:
    adaptation = Adaptation(GoodputSpec(base_batch=64, max_local_batch=256, max_global_batch=2048))
    for _ in range(20):
        adaptation.measure(NormSample(local_sqr=3.0, total_sqr=2.0, pieces=2), batch=64)
    adaptation.record_step(Config(2, 32, 1), 0.25)
    reporter = ThroughputReporter(namespace="team-a", job_name="bert")
    reporter.set_goodput(adaptation.report(Config(2, 32, 1)))
    text = generate_latest(reporter.registry).decode()
    job = f'{mc.LABEL_JOB_NAME}="bert",{mc.LABEL_NAMESPACE}="team-a"'
    assert adaptation.noise is not None
    for name, value in [
        (mc.GRADIENT_NOISE_SCALE, adaptation.noise.phi),
        (mc.BASE_BATCH, 64.0),
        (mc.LOCAL_BATCH, 32.0),
        (mc.ACCUM_STEPS, 1.0),
        (mc.REPLICAS, 2.0),
        (mc.MAX_LOCAL_BATCH, 256.0),
        (mc.MAX_GLOBAL_BATCH, 2048.0),
    ]:
        assert f"{name}{{{job}}} {value!r}" in text
    labels = (  # exposed sorted by label name
        f'{mc.LABEL_ACCUM_STEPS}="1",{mc.LABEL_JOB_NAME}="bert",{mc.LABEL_LOCAL_BATCH}="32",'
        f'{mc.LABEL_NAMESPACE}="team-a",{mc.LABEL_REPLICAS}="2"'
    )
    assert f"{mc.STEP_SECONDS}{{{labels}}} 0.25" in text


def test_a_job_without_goodput_exports_no_goodput_series() -> None:
    reporter = ThroughputReporter(namespace="team-a", job_name="bert")
    text = generate_latest(reporter.registry).decode()
    assert f"{mc.GRADIENT_NOISE_SCALE}{{" not in text
    assert f"{mc.STEP_SECONDS}{{" not in text
