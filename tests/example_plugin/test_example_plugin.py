"""The example plugin under both conformance kits, the way a plugin author runs them
(by registered name: the package must be installed, as ``pip install tests/example_plugin``)."""
from prefixbench.engines.conformance import EngineConformance
from prefixbench.plugins.conformance import StrategyConformance


class TestExampleDict(StrategyConformance):
    strategy_name = "example-dict"


class TestExampleMemory(EngineConformance):
    engine_name = "example-memory"
