from hypothesis import settings

pytest_plugins = ["tests.support.fixtures", "tests.support.recovery"]

# Every hypothesis test: no example database in the repository, no deadline on a shared 2-core
# machine (a slow example is not a failure), the same examples on every run.
settings.register_profile("project", database=None, deadline=None, derandomize=True)
settings.load_profile("project")
