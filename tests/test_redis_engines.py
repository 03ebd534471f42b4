"""The redis and redis-cluster engines against real local servers."""
from __future__ import annotations

import pytest

from prefixbench.engines.conformance import EngineConformance
from prefixbench.engines.redis import RedisStore
from prefixbench.engines.redis_cluster import RedisClusterStore

from redis_support import cluster_always, redis_always  # noqa: F401 - fixtures


class TestRedis(EngineConformance):
    kill_rounds = 2

    @pytest.fixture
    def engine_factory(self):
        return RedisStore

    @pytest.fixture
    def engine_config(self, redis_always):
        return {"options": {"url": redis_always.url}}


class TestRedisCluster(EngineConformance):
    kill_rounds = 2

    @pytest.fixture
    def engine_factory(self):
        return RedisClusterStore

    @pytest.fixture
    def engine_config(self, cluster_always):
        return {"options": {"url": cluster_always.url}}


class TestRedisClusterOneBucket(EngineConformance):
    """Every batch in one slot: the plain MULTI/EXEC path without the journal."""

    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return RedisClusterStore

    @pytest.fixture
    def engine_config(self, cluster_always):
        return {"options": {"url": cluster_always.url, "buckets": 1}}
