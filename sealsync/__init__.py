"""sealsync: ship sealed time-series data files between instances, load them once."""

__version__ = "0.1.0"
