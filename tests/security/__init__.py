"""Attacks on a real ``sealsync serve`` over loopback (issue 16); see ``report.py``."""
