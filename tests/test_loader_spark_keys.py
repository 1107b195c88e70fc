"""Spark settings in a loader's config written as TOML's dotted keys: each taken as the
Spark setting the line means, as the documented quoted keys are; one setting given
both ways refused with one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealsync.config import load_loader_config
from sealsync.errors import ConfigError
from sealsync.permissions import restrict_writes

HEAD = """[loader]
receiver_data_dirs = ["dc/data"]
table_path = "warehouse/points"
state_dir = "warehouse/_state"
"""


def config_with(tmp_path: Path, text: str) -> Path:
    (tmp_path / "dc/data").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "L.toml"
    path.write_text(HEAD + text)
    restrict_writes(path)
    return path


@pytest.mark.parametrize(
    "text",
    [
        # the documented form
        'spark = { "spark.executor.memory" = "2g", "spark.cores.max" = 4 }\n',
        # dotted keys under [loader]: TOML's tables spark -> executor -> memory
        'spark.executor.memory = "2g"\nspark.cores.max = 4\n',
        # the same lines under a [loader.spark] header
        '[loader.spark]\nspark.executor.memory = "2g"\nspark.cores.max = 4\n',
        # quoted under the header, as documented
        '[loader.spark]\n"spark.executor.memory" = "2g"\n"spark.cores.max" = 4\n',
    ],
)
def test_a_dotted_key_is_the_spark_setting_it_means(tmp_path: Path, text: str) -> None:
    config = load_loader_config(config_with(tmp_path, text))
    assert config.spark == {"spark.executor.memory": "2g", "spark.cores.max": "4"}


def test_dotted_and_quoted_keys_mix(tmp_path: Path) -> None:
    text = 'spark.executor.memory = "2g"\nspark."spark.driver.host" = "10.0.0.5"\n'
    config = load_loader_config(config_with(tmp_path, text))
    assert config.spark == {"spark.executor.memory": "2g", "spark.driver.host": "10.0.0.5"}


def test_one_setting_given_twice_is_refused_naming_it(tmp_path: Path) -> None:
    text = 'spark.executor.memory = "2g"\nspark."spark.executor.memory" = "4g"\n'
    path = config_with(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_loader_config(path)
    message = str(err.value)
    assert message == (
        f"{path}: [loader] spark.spark.executor.memory: set twice, by the dotted key "
        'spark.executor.memory and by the quoted key "spark.executor.memory": keep one '
        '(quoted, "spark.executor.memory" = ..., in the spark table)'
    )
    assert "\n" not in message


def test_a_dotted_key_with_a_value_spark_cannot_take_names_its_whole_key(
    tmp_path: Path,
) -> None:
    path = config_with(tmp_path, 'spark.executor.memory = ["2g"]\n')
    with pytest.raises(ConfigError) as err:
        load_loader_config(path)
    assert str(err.value) == (
        f"{path}: [loader] spark.spark.executor.memory: must be a string, number or "
        "boolean, got a list"
    )
