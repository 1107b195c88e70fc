"""How soon an HDFS client asks whether a file it closed is complete.

HDFS's client asks the NameNode whether a closed file is complete, and if its last
block is not reported yet, asks again after ``initial.delay.ms`` (400 by default),
then after twice that, ``retries`` times (5): made for large files, where a close is
rare. The loader closes one small file per received file, and a Delta commit and its
list of uncommitted files one each per run; on a busy cluster the first answer is
often "not yet", and most of such a close was that first 400 ms wait. The loader's
closes ask first after :data:`CLOSE_FIRST_ASK_MS` and retry as long in all as the
configured pair would (:func:`quick_close`): its session's settings
(:func:`session_settings`), and the uploads of a session it was given
(:meth:`spark_loader.store.HadoopStore.upload_many`).
"""

from __future__ import annotations

from collections.abc import Mapping

CLOSE_FIRST_ASK_MS = 25
CLOSE_DELAY_KEY = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
CLOSE_RETRIES_KEY = "dfs.client.block.write.locateFollowingBlock.retries"
DELAY_DEFAULT = 400
RETRIES_DEFAULT = 5
_SPARK = "spark.hadoop."


def quick_close(delay_ms: int, retries: int) -> tuple[int, int] | None:
    """The (first wait, retries) a close uses in place of the configured ``(delay_ms,
    retries)``: a first ask after :data:`CLOSE_FIRST_ASK_MS`, doubling, waiting at
    least as long in all; None if the configured first wait is no longer."""
    if delay_ms <= CLOSE_FIRST_ASK_MS:
        return None
    patience = delay_ms * ((1 << max(retries, 0)) - 1)
    tries = max(retries, 0)
    while CLOSE_FIRST_ASK_MS * ((1 << tries) - 1) < patience:
        tries += 1
    return CLOSE_FIRST_ASK_MS, tries


def session_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """The Spark settings that give the loader's session quick closes, none if ``conf``
    (the operator's ``[loader.spark]``) sets either of the pair itself."""
    if any(_SPARK + key in conf for key in (CLOSE_DELAY_KEY, CLOSE_RETRIES_KEY)):
        return {}
    quick = quick_close(DELAY_DEFAULT, RETRIES_DEFAULT)
    assert quick is not None
    return {_SPARK + CLOSE_DELAY_KEY: str(quick[0]), _SPARK + CLOSE_RETRIES_KEY: str(quick[1])}
