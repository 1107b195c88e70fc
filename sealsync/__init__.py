"""sealsync: ship sealed time-series data files between instances, load them once."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> Any:
    """``__version__``: the release, as the installed package's metadata says
    (pyproject.toml's ``version``), one number per release and never a copy kept by
    hand. Read on first use: importing the metadata machinery is a cost a process
    that never asks (an inspect worker) should not pay."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("sealsync")
    except PackageNotFoundError:  # the source tree on sys.path without an install
        value = "0+unknown"
    globals()["__version__"] = value
    return value
