"""An upload to HDFS asks sooner whether its file is complete, and waits as long in all
(spark_loader.hdfs_close): the loader closes one small file per received file,
and HDFS's first ask after 400 ms was most of an upload's time. The real HDFS uploads
are in tests/test_lake_load.py; the figures in docs/performance.md."""

from __future__ import annotations

import pytest

from spark_loader.hdfs_close import CLOSE_FIRST_ASK_MS, quick_close, session_settings


def _patience(first: int, retries: int) -> int:
    """How long the client waits in all before it gives up on a close."""
    return sum(first << i for i in range(retries))


@pytest.mark.parametrize(("first", "retries"), [(400, 5), (400, 8), (1000, 3), (26, 0), (5000, 1)])
def test_the_first_ask_comes_sooner_and_the_client_is_as_patient(first: int, retries: int) -> None:
    quick = quick_close(first, retries)
    assert quick is not None
    assert quick[0] == CLOSE_FIRST_ASK_MS < first
    assert _patience(*quick) >= _patience(first, retries)
    assert _patience(quick[0], quick[1] - 1) < max(_patience(first, retries), 1)  # no more


def test_hdfs_s_defaults_give_nine_retries_from_25_ms() -> None:
    assert quick_close(400, 5) == (25, 9)  # 12.4 s of patience, 12.8 s after


@pytest.mark.parametrize("first", [CLOSE_FIRST_ASK_MS, 10, 0])
def test_a_first_ask_already_as_soon_is_left_as_configured(first: int) -> None:
    assert quick_close(first, 5) is None


def test_the_loader_s_session_closes_quickly_unless_the_operator_says_otherwise() -> None:
    key = "spark.hadoop.dfs.client.block.write.locateFollowingBlock"
    assert session_settings({}) == {
        f"{key}.initial.delay.ms": "25",
        f"{key}.retries": "9",
    }
    assert session_settings({f"{key}.retries": "3"}) == {}
    assert session_settings({f"{key}.initial.delay.ms": "400"}) == {}
