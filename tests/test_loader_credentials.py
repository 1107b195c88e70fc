"""A loader file that holds a credential in its Spark settings (an S3 secret, an Azure
account key, a token) is refused while others may read it: ``check`` and ``load`` say
so in one line naming the setting and the fix, exit 2, and write nothing. The same
file readable by its owner alone is taken; so is any file whose settings hold none
(the credentials then come from Hadoop's configuration or the environment)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from config_helpers import write_config

from sealsync.app.cli import cli
from sealsync.config import load_loader_config
from sealsync.config.loader import secret_settings
from sealsync.errors import ConfigError


def _loader(root: Path, spark: dict[str, str], mode: int) -> Path:
    data = root / "recv"
    (data / "sequence").mkdir(parents=True)
    doc = {
        "loader": {
            "receiver_data_dirs": [str(data)],
            "table_path": "s3a://lake/points",
            "state_dir": str(root / "state"),
            "master": "local[1]",
            "spark": spark,
        }
    }
    path = write_config(root / "loader.toml", doc)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.bucket.lake.secret.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net",
        "spark.hadoop.hadoop.security.credstore.java-keystore-provider.password-file",
    ],
)
def test_a_credential_in_a_file_others_may_read_is_refused(tmp_path: Path, key: str) -> None:
    config = _loader(tmp_path, {key: "s3cr3t", "spark.executor.memory": "1g"}, 0o644)
    line = (
        f"{config}: [loader] spark: {key} holds a credential and others may read this "
        f"file: chmod o-r {config}, or better give it through Hadoop's configuration "
        "(core-site.xml) or the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    )
    with pytest.raises(ConfigError) as caught:
        load_loader_config(config)
    assert str(caught.value) == line and "s3cr3t" not in line

    for command in ("check", "load"):
        done = CliRunner().invoke(cli, [command, "--config", str(config)])
        assert (done.exit_code, done.stdout, done.stderr) == (2, "", f"sealsync: error: {line}\n")
    assert not (tmp_path / "state").exists()

    config.chmod(0o640)  # its group may read it: the owner's choice, taken
    assert load_loader_config(config).spark[key] == "s3cr3t"
    config.chmod(0o600)
    assert load_loader_config(config).spark[key] == "s3cr3t"


def test_settings_without_a_credential_are_taken_from_any_file(tmp_path: Path) -> None:
    spark = {
        "spark.hadoop.fs.s3a.endpoint": "http://s3.dc:9000",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"
        ),
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.executor.memory": "2g",
    }
    assert secret_settings(spark) == []
    config = _loader(tmp_path, spark, 0o644)
    assert os.stat(config).st_mode & 0o004
    assert load_loader_config(config).spark == spark
