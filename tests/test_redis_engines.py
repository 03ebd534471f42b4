"""The redis and redis-cluster engines against real local servers."""
from __future__ import annotations

import pytest

from prefixbench.engines.conformance import EngineConformance
from prefixbench.engines.redis import RedisStore

from redis_support import cluster_always, redis_always  # noqa: F401 - fixtures


class TestRedis(EngineConformance):
    kill_rounds = 2

    @pytest.fixture
    def engine_factory(self):
        return RedisStore

    @pytest.fixture
    def engine_config(self, redis_always):
        return {"options": {"url": redis_always.url}}
